package main

import (
	"bytes"
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

// output is a file a command writes once all its work is done: outputs are
// rendered into memory first, and written only when the run was not
// interrupted, so an interrupted or failed run leaves no new or partial
// file.
type output struct {
	flag string // the flag or argument that named it, for errors
	path string
	data []byte
}

// checkOutput validates an output path before any work starts: the
// extension (when exts is not empty), that the path is not a directory, and
// that its directory exists. It names the flag and the path.
func checkOutput(flag, path string, exts ...string) error {
	if path == "" {
		return usagef("%s: the file name is empty", flag)
	}
	if len(exts) > 0 && !slices.Contains(exts, strings.ToLower(filepath.Ext(path))) {
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

// render runs write into memory, for an output.
func render(flag, path string, write func(io.Writer) error) (output, error) {
	var b bytes.Buffer
	if err := write(&b); err != nil {
		return output{}, err
	}
	return output{flag: flag, path: path, data: b.Bytes()}, nil
}

// commit writes the outputs unless ctx is done (then it writes nothing and
// returns the cancellation).
func commit(ctx context.Context, outs ...output) error {
	if err := sim.Canceled(ctx, "sim"); err != nil {
		return err
	}
	for _, o := range outs {
		if err := writeOutput(o.path, o.data); err != nil {
			return fmt.Errorf("%s %q: %w", o.flag, o.path, err)
		}
	}
	return nil
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
