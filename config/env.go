package config

import (
	"os"
	"runtime"
	"sort"
	"strings"
)

// Env is the environment settings are read from. Tests inject a MapEnv; the
// process uses OSEnv.
type Env interface {
	// Lookup returns the variable's value and whether it is set.
	Lookup(name string) (string, bool)
	// Names lists the set variables (used to warn about misspelled ones).
	Names() []string
}

// MapEnv is an in-memory Env.
type MapEnv map[string]string

// Lookup implements Env.
func (m MapEnv) Lookup(name string) (string, bool) {
	v, ok := m[name]
	return v, ok
}

// Names implements Env; the names are sorted.
func (m MapEnv) Names() []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

type osEnv struct{}

func (osEnv) Lookup(name string) (string, bool) { return os.LookupEnv(name) }

func (osEnv) Names() []string {
	env := os.Environ()
	out := make([]string, 0, len(env))
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if name != "" {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// OSEnv returns the process environment (os.LookupEnv, os.Environ).
func OSEnv() Env { return osEnv{} }

// Option configures Load and NewProcess.
type Option func(*loadOptions)

type loadOptions struct {
	ncpu int
}

// WithNumCPU sets the CPU count used for machine-dependent defaults and
// ranges (sublinear.workers: default ncpu/2, at least 1; range 1..4*ncpu).
// Without it runtime.NumCPU() is used; tests and generated documents fix it.
// Values below 1 are treated as 1.
func WithNumCPU(n int) Option {
	return func(o *loadOptions) { o.ncpu = max(n, 1) }
}

func applyOptions(opts []Option) loadOptions {
	o := loadOptions{ncpu: runtime.NumCPU()}
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	if o.ncpu < 1 {
		o.ncpu = 1
	}
	return o
}
