package gzfile

import (
	"compress/gzip"
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

// Open opens the file at path for reading; a gzip-compressed file is read
// decompressed (a multistream file as one stream, as gzip -d does). An
// error reading the gzip header names the file. Errors of the compressed
// data (a truncated file, a checksum mismatch) come from Read.
func Open(path string) (io.ReadCloser, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	gz, err := Is(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if !gz {
		return f, nil
	}
	zr, err := gzip.NewReader(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, gzipErr(err))
	}
	return &reader{Reader: zr, f: f}, nil
}

// reader reads a gzip stream and closes its file.
type reader struct {
	*gzip.Reader
	f *os.File
}

// Read reads decompressed bytes; an error of the compressed data says
// gzip.
func (r *reader) Read(p []byte) (int, error) {
	n, err := r.Reader.Read(p)
	if err != nil && err != io.EOF {
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
	err := r.Reader.Close()
	if ferr := r.f.Close(); err == nil {
		err = ferr
	}
	return err
}
