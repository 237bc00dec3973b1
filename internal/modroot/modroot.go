package modroot

import (
	"errors"
	"os"
	"path/filepath"
)

// Find returns the nearest directory at or above the working directory
// that holds a go.mod.
func Find() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", errors.New("modroot: no go.mod at or above the working directory")
		}
		dir = up
	}
}
