package testinputs

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/remat-dev/remat/internal/modroot"
)

// Track stats every .py and .go file of the module that contains the
// working directory, and go.mod and go.sum (skipping .git). It fails the
// test if the module root cannot be found.
func Track(t testing.TB) {
	t.Helper()
	root, err := modroot.Find()
	if err != nil {
		t.Fatalf("testinputs: %v", err)
	}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" {
				return filepath.SkipDir
			}
			return nil
		}
		n := d.Name()
		if strings.HasSuffix(n, ".py") || strings.HasSuffix(n, ".go") || n == "go.mod" || n == "go.sum" {
			if _, err := os.Stat(p); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("testinputs: walking %s: %v", root, err)
	}
}
