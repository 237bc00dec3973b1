package config

import (
	"fmt"
	"sync"
)

// Process models one process's view of its settings: read-once settings are
// captured from the environment at the first call of Settings and never
// re-read; dynamic settings are re-read at every call. It is safe for
// concurrent use. The zero Process reads an empty environment, like
// NewProcess(nil).
type Process struct {
	env  Env
	opts loadOptions

	once     sync.Once
	captured map[string]capturedVar // read-once variable -> value at first read
}

type capturedVar struct {
	value string
	set   bool
}

// NewProcess returns a Process reading env (nil means an empty environment).
func NewProcess(env Env, opts ...Option) *Process {
	if env == nil {
		env = MapEnv(nil)
	}
	return &Process{env: env, opts: applyOptions(opts)}
}

// Settings returns the current snapshot: read-once settings as captured at
// the first call, dynamic settings as the environment holds them now. A
// read-once variable whose value changed since the capture yields a warning
// saying the change is ignored. An invalid captured value is an error at
// every call (the process cannot re-read it).
func (p *Process) Settings() (*Settings, []Warning, error) {
	p.once.Do(func() {
		if p.env == nil { // the zero Process
			p.env = MapEnv(nil)
			p.opts = applyOptions(nil)
		}
		p.captured = make(map[string]capturedVar)
		for i := range registry {
			d := &registry[i]
			if d.readOnce {
				v, ok := p.env.Lookup(d.env)
				p.captured[d.env] = capturedVar{value: v, set: ok}
			}
		}
	})
	view := processView{p: p}
	s, err := load(view, p.opts)
	if err != nil {
		return nil, nil, err
	}
	warns := unknownVarWarnings(p.env)
	for _, i := range sortedEnvIndexes {
		d := &registry[i]
		if !d.readOnce {
			continue
		}
		c := p.captured[d.env]
		now, ok := p.env.Lookup(d.env)
		if ok == c.set && now == c.value {
			continue
		}
		was, is := "unset", "unset"
		if c.set {
			was = fmt.Sprintf("%q", c.value)
		}
		if ok {
			is = fmt.Sprintf("%q", now)
		}
		warns = append(warns, Warning{
			Var: d.env,
			Message: fmt.Sprintf("%s changed after it was first read (was %s, now %s); the change is ignored because it is read once per process",
				d.env, was, is),
		})
	}
	warns = append(warns, s.inertWarnings()...)
	return s, warns, nil
}

// processView is the Env seen by a Process: captured values for read-once
// variables, the live environment for the rest.
type processView struct{ p *Process }

func (v processView) Lookup(name string) (string, bool) {
	if c, ok := v.p.captured[name]; ok {
		return c.value, c.set
	}
	return v.p.env.Lookup(name)
}

func (v processView) Names() []string { return v.p.env.Names() }

var global = NewProcess(OSEnv())

// Global returns the process-wide settings from the OS environment:
// read-once settings are captured at the first call in the process, dynamic
// settings are re-read at each call. It is the package's only mutable global
// state.
func Global() (*Settings, []Warning, error) { return global.Settings() }
