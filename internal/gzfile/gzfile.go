package gzfile

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// Is reports whether f starts with the two bytes that open a gzip stream,
// reading them at offset 0 (f's offset does not move). A file of fewer
// than two bytes is not gzip.
func Is(f io.ReaderAt) (bool, error) {
	var b [2]byte
	n, err := f.ReadAt(b[:], 0)
	if n < 2 {
		if errors.Is(err, io.EOF) {
			err = nil
		}
		return false, err
	}
	return b[0] == 0x1f && b[1] == 0x8b, nil
}

// Open opens the file at path for reading until ctx is done (nil: never);
// a gzip-compressed file is read decompressed (a multistream file as one
// stream, as gzip -d does). Once ctx is done, Read returns ctx.Err(), so a
// parser reading a file of a million ops stops at its next read when the
// user interrupts it. An error reading the gzip header names the file.
// Errors of the compressed data (a truncated file, a checksum mismatch)
// come from Read.
func Open(ctx context.Context, path string) (io.ReadCloser, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	gz, err := Is(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	r := &reader{ctx: ctx, f: f, src: f}
	if gz {
		zr, err := gzip.NewReader(f)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: %w", path, gzipErr(err))
		}
		r.zr, r.src = zr, zr
	}
	return r, nil
}

// reader reads a file, decompressed when zr is set, until ctx is done.
type reader struct {
	ctx context.Context
	f   *os.File
	zr  *gzip.Reader // nil: the file is read as it is
	src io.Reader    // zr or f
}

// Read reads the file's (decompressed) bytes; an error of the compressed
// data says gzip.
func (r *reader) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := r.src.Read(p)
	if err != nil && err != io.EOF && r.zr != nil {
		err = gzipErr(err)
	}
	return n, err
}

// gzipErr is err of the decompressor, said to be gzip's: compress/gzip's
// own errors say so already ("gzip: invalid checksum"), those of reading
// (io.ErrUnexpectedEOF for a truncated file) do not.
func gzipErr(err error) error {
	if strings.HasPrefix(err.Error(), "gzip: ") {
		return err
	}
	return fmt.Errorf("gzip: %w", err)
}

// Close closes the decompressor and the file.
func (r *reader) Close() error {
	var err error
	if r.zr != nil {
		err = r.zr.Close()
	}
	if ferr := r.f.Close(); err == nil {
		err = ferr
	}
	return err
}
