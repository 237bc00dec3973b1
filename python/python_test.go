// Package python runs the unittest tests of the remat_torch package
// (python/remat_torch) from `go test ./...`.
package python

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/remat-dev/remat/internal/testinputs"
)

// pythonWithTorch returns a python3 that imports torch, or "" and why not.
func pythonWithTorch() (string, string) {
	cands := []string{os.Getenv("REMAT_PYTHON"), "/usr/bin/python3"}
	if p, err := exec.LookPath("python3"); err == nil {
		cands = append(cands, p)
	}
	for _, c := range cands {
		if c == "" {
			continue
		}
		if _, err := os.Stat(c); err != nil {
			continue
		}
		if err := exec.Command(c, "-c", "import torch").Run(); err == nil {
			return c, ""
		}
	}
	return "", "no python3 with torch (set REMAT_PYTHON, or install python3-torch)"
}

// TestPythonUnittest runs `python3 -m unittest discover -s python -t python`
// from the repository root. The Python tests build the sim binary themselves
// when they need it (REMAT_SIM overrides).
func TestPythonUnittest(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the remat_torch tests")
	}
	py, why := pythonWithTorch()
	if py == "" {
		t.Skip(why)
	}
	testinputs.Track(t)
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, "-m", "unittest", "discover", "-s", "python", "-t", "python")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(root, "python"), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 -m unittest discover -s python -t python: %v\n%s", err, out)
	}
	if s := string(out); strings.Contains(s, "skipped") {
		t.Log(s)
	}
}
