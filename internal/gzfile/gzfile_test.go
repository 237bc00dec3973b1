package gzfile

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func compress(t *testing.T, data string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	_, err := zw.Write([]byte(data))
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return b.Bytes()
}

// TestOpen: a plain file reads as it is and a gzip file decompressed,
// whatever their names; a gzip file cut short or with a wrong checksum
// fails on Read with an error that says gzip, a broken header on Open
// with one that also names the file.
func TestOpen(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, data, 0o644))
		return p
	}
	const text = "{\"a\": 1}\n{\"b\": 2}\n"
	packed := compress(t, text)
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"plain.json", []byte(text), text},
		{"packed.json.gz", packed, text},
		{"packed-plain-name.json", packed, text},
		{"empty.json", nil, ""},
		{"one.json", []byte{0x1f}, "\x1f"},
	} {
		f, err := Open(context.Background(), write(c.name, c.data))
		require.NoError(t, err, c.name)
		got, err := io.ReadAll(f)
		require.NoError(t, err, c.name)
		assert.Equal(t, c.want, string(got), c.name)
		require.NoError(t, f.Close(), c.name)
	}

	// the body cut short, and a wrong checksum in the trailer
	bad := bytes.Clone(packed)
	bad[len(bad)-8] ^= 0xff
	for name, data := range map[string][]byte{"cut.gz": packed[:len(packed)-4], "sum.gz": bad} {
		f, err := Open(context.Background(), write(name, data))
		require.NoError(t, err, name)
		_, err = io.ReadAll(f)
		require.Error(t, err, name)
		assert.True(t, strings.HasPrefix(err.Error(), "gzip: "), "%s: %v", name, err)
		assert.False(t, strings.HasPrefix(err.Error(), "gzip: gzip:"), "%s: %v", name, err)
		require.NoError(t, f.Close())
	}
	f, err := Open(context.Background(), write("cut-cut.gz", packed[:len(packed)-4]))
	require.NoError(t, err)
	_, err = io.ReadAll(f)
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
	require.NoError(t, f.Close())

	// a header cut short, and a wrong compression method
	method := bytes.Clone(packed)
	method[2] = 7
	for name, data := range map[string][]byte{"head.gz": packed[:5], "method.gz": method} {
		p := write(name, data)
		_, err := Open(context.Background(), p)
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), p+": gzip: ")
		assert.NotContains(t, err.Error(), "gzip: gzip:")
	}
	_, err = Open(context.Background(), filepath.Join(dir, "missing"))
	assert.True(t, errors.Is(err, os.ErrNotExist), "%v", err)
}

// TestIs reads the magic at offset 0 without moving the file's offset.
func TestIs(t *testing.T) {
	for _, c := range []struct {
		data string
		want bool
	}{{"", false}, {"\x1f", false}, {"\x1f\x8b", true}, {"\x1f\x8bxyz", true}, {"{\"format\"", false}} {
		r := strings.NewReader(c.data)
		got, err := Is(r)
		require.NoError(t, err)
		assert.Equal(t, c.want, got, "%q", c.data)
		assert.Equal(t, len(c.data), r.Len(), "%q: offset moved", c.data)
	}
}

// Reading stops at the first read after ctx is done, plain or compressed,
// with ctx's error; Open with a done ctx opens nothing.
func TestOpenUntilDone(t *testing.T) {
	dir := t.TempDir()
	text := strings.Repeat("{\"INSTRUCTION\":\"CONSTANT\",\"NAME\":\"x1\"}\n", 4096)
	for name, data := range map[string][]byte{"plain.log": []byte(text), "packed.log": compress(t, text)} {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, data, 0o644))
		ctx, cancel := context.WithCancel(context.Background())
		f, err := Open(ctx, p)
		require.NoError(t, err, name)
		buf := make([]byte, 1024)
		n, err := f.Read(buf)
		require.NoError(t, err, name)
		assert.Equal(t, text[:n], string(buf[:n]), name)
		cancel()
		_, err = f.Read(buf)
		assert.ErrorIs(t, err, context.Canceled, name)
		require.NoError(t, f.Close())
		_, err = Open(ctx, p)
		assert.ErrorIs(t, err, context.Canceled, name)
	}
}
