package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/remat-dev/remat/sim"
)

// fileMode is the mode of every regular file sim writes.
const fileMode = 0o644

// output is a file a command writes once all its work is done. A regular
// (or new) file is rendered into a temporary file beside it, which commit
// renames over it only when the run was not interrupted and discard
// removes otherwise, so an interrupted or failed run leaves no new or
// partial file, and an output the size of a million-op graph never sits in
// memory. Standard output ("-" or "") and a device, FIFO or socket are
// rendered into memory and written at commit.
type output struct {
	flag string // the flag or argument that named it, for errors
	path string
	tmp  string // the rendered temporary file ("": rendered into data)
	data []byte
}

// checkOutput validates an output path before any work starts: the
// extension (when exts is not empty), that the path is not a directory, and
// that its directory exists. It names the flag and the path.
func checkOutput(flag, path string, exts ...string) error {
	if path == "" {
		return usagef("%s: the file name is empty", flag)
	}
	lower := strings.ToLower(path)
	if len(exts) > 0 && !slices.ContainsFunc(exts, func(ext string) bool { return strings.HasSuffix(lower, ext) }) {
		return usagef("%s %q: expected a name ending in %s", flag, path, strings.Join(exts, " or "))
	}
	if st, err := os.Stat(path); err == nil {
		if st.IsDir() {
			return usagef("%s %q: is a directory, expected a file name", flag, path)
		}
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s %q: %w", flag, path, err)
	}
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return usagef("%s %q: directory %q does not exist", flag, path, dir)
	case err != nil:
		return fmt.Errorf("%s %q: %w", flag, path, err)
	case !st.IsDir():
		return usagef("%s %q: %q is not a directory", flag, path, dir)
	}
	return nil
}

// gzipped returns a write that writes what write writes gzip-compressed.
// The header carries no name and no time, so the bytes depend on the
// content alone.
func gzipped(write func(io.Writer) error) func(io.Writer) error {
	return func(w io.Writer) error {
		zw := gzip.NewWriter(w)
		if err := write(zw); err != nil {
			return err
		}
		return zw.Close()
	}
}

// untilDone returns a write whose writer fails with ctx.Err() once ctx is
// done, so that a long output (a DTR log of a million ops takes seconds to
// write) stops at its next write when the run is interrupted.
func untilDone(ctx context.Context, write func(io.Writer) error) func(io.Writer) error {
	return func(w io.Writer) error { return write(&ctxWriter{ctx: ctx, w: w}) }
}

// ctxWriter writes to w until ctx is done.
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (c *ctxWriter) Write(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.w.Write(p)
}

// render runs write for an output: into a temporary file beside a regular
// or new file (a symbolic link is followed), into memory for standard
// output or a file that is not regular.
func render(flag, path string, write func(io.Writer) error) (output, error) {
	o := output{flag: flag, path: path}
	if path != "" && path != "-" {
		target := path
		if resolved, err := filepath.EvalSymlinks(path); err == nil {
			target = resolved
		}
		if st, err := os.Stat(target); err != nil || st.Mode().IsRegular() {
			tmp, err := renderFile(flag, target, write)
			if err != nil {
				return output{}, err
			}
			o.path, o.tmp = target, tmp
			return o, nil
		}
	}
	var b bytes.Buffer
	if err := write(&b); err != nil {
		return output{}, err
	}
	o.data = b.Bytes()
	return o, nil
}

// renderFile runs write into a new temporary file in path's directory,
// mode fileMode, and returns its name; on failure it removes it. Errors of
// the file (not of write) name the flag and the path.
func renderFile(flag, path string, write func(io.Writer) error) (tmp string, err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return "", fmt.Errorf("%s %q: %w", flag, path, err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	w := bufio.NewWriterSize(f, 256<<10)
	if err := write(w); err != nil {
		return "", err
	}
	if err := w.Flush(); err != nil {
		return "", fmt.Errorf("%s %q: %w", flag, path, err)
	}
	if err := f.Chmod(fileMode); err != nil {
		return "", fmt.Errorf("%s %q: %w", flag, path, err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("%s %q: %w", flag, path, err)
	}
	return f.Name(), nil
}

// commit writes the outputs unless ctx is done (then it writes nothing,
// removes the rendered temporary files and returns the cancellation).
func commit(ctx context.Context, outs ...output) error {
	if err := sim.Canceled(ctx, "sim"); err != nil {
		discard(outs)
		return err
	}
	for i, o := range outs {
		var err error
		if o.tmp != "" {
			err = os.Rename(o.tmp, o.path)
		} else {
			err = writeOutput(o.path, o.data)
		}
		if err != nil {
			discard(outs[i:])
			return fmt.Errorf("%s %q: %w", o.flag, o.path, err)
		}
	}
	return nil
}

// discard removes the outputs' temporary files that commit has not renamed
// (a command defers it, for the paths that return before commit).
func discard(outs []output) {
	for _, o := range outs {
		if o.tmp != "" {
			_ = os.Remove(o.tmp)
		}
	}
}

// writeOutput writes data to path. A regular file (or a new one) is written
// atomically: a temporary file in the target's directory, renamed over it,
// mode 0644. A symbolic link is followed and its target replaced. A
// device, FIFO or socket is written directly, never replaced.
func writeOutput(path string, data []byte) error {
	if resolved, err := filepath.EvalSymlinks(path); err == nil {
		path = resolved
	}
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		if _, err := f.Write(data); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	fail := func(err error) error {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if _, err := f.Write(data); err != nil {
		return fail(err)
	}
	if err := f.Chmod(fileMode); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}
