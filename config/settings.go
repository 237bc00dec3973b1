package config

import (
	"errors"
	"fmt"
	"strings"
	"sync"
)

// SourceKind tells which mechanism produced a value. Higher kinds win:
// default < preset < env < option/flag < attribute.
type SourceKind uint8

// Source kinds in precedence order (lowest first). Option and flag share a
// level: the later of the two wins.
const (
	SourceDefault   SourceKind = iota + 1 // built-in default
	SourcePreset                          // the framework preset's value for the device (WithPreset)
	SourceEnv                             // environment variable
	SourceOption                          // explicit Go option
	SourceFlag                            // CLI flag
	SourceAttribute                       // per-op attribute
)

// Source is where an effective value came from.
type Source struct {
	Kind SourceKind
	// Name is the environment variable, the flag (without dashes), the
	// option's name (may be empty) or the attribute key.
	Name string
}

// FlagSource returns the source of a value given by the CLI flag name
// (leading dashes optional; empty means the setting's own flag).
func FlagSource(name string) Source {
	return Source{Kind: SourceFlag, Name: strings.TrimLeft(name, "-")}
}

// OptionSource returns the source of a value given by a Go option; name is
// informational (e.g. "mirror.Options.Enabled") and may be empty.
func OptionSource(name string) Source { return Source{Kind: SourceOption, Name: name} }

// String renders the source: "default", "env MXNET_BACKWARD_DO_MIRROR",
// "flag --mirror", "option" or "option NAME", "attribute force_mirroring",
// "preset pytorch on cpu".
func (s Source) String() string {
	switch s.Kind {
	case SourceDefault:
		return "default"
	case SourcePreset:
		return "preset " + s.Name
	case SourceEnv:
		return "env " + s.Name
	case SourceFlag:
		return "flag --" + s.Name
	case SourceOption:
		if s.Name == "" {
			return "option"
		}
		return "option " + s.Name
	case SourceAttribute:
		return "attribute " + s.Name
	}
	return "unknown"
}

// Value is one effective setting value with its provenance.
type Value struct {
	Setting string // setting name
	Type    Type
	Text    string // canonical text ("true", "10", "1MiB", "limited_workspace", ...)
	Source  Source

	b bool
	n int64 // int and size (bytes); enum: choice index
	f float64
}

// Bool returns a bool value (false for other types).
func (v Value) Bool() bool { return v.b }

// Int returns an int value, a size in bytes, or an enum's choice index.
func (v Value) Int() int64 { return v.n }

// Float returns a float value (ints and sizes converted).
func (v Value) Float() float64 {
	if v.Type == TypeFloat {
		return v.f
	}
	return float64(v.n)
}

// String returns the canonical text.
func (v Value) String() string { return v.Text }

// ValueError reports a value that does not parse or is out of range. It names
// where the value came from (variable, flag, option or attribute), the value,
// and what is accepted.
type ValueError struct {
	Setting  string
	Origin   string // "MXNET_EXEC_NUM_TEMP", "flag --num-temp", "attribute cudnn_tune on op conv1", ...
	Value    string
	Accepted string
	Err      error
}

// Error implements error.
func (e *ValueError) Error() string {
	return fmt.Sprintf("%s=%q (setting %s): %v; accepted: %s", e.Origin, e.Value, e.Setting, e.Err, e.Accepted)
}

// Unwrap returns the underlying parse error.
func (e *ValueError) Unwrap() error { return e.Err }

// ErrUnknownSetting is wrapped by errors about names that are no setting.
var ErrUnknownSetting = errors.New("unknown setting")

// parse converts text into a Value of d's type.
func (d *def) parse(text string, ncpu int, src Source, origin string) (Value, error) {
	v := Value{Setting: d.name, Type: d.typ, Source: src}
	fail := func(err error) (Value, error) {
		return Value{}, &ValueError{Setting: d.name, Origin: origin, Value: text, Accepted: d.acceptedText(ncpu), Err: err}
	}
	switch d.typ {
	case TypeBool:
		b, err := ParseBool(text)
		if err != nil {
			return fail(err)
		}
		v.b, v.Text = b, fmt.Sprint(b)
	case TypeInt:
		n, err := parseInt(text)
		if err != nil {
			return fail(err)
		}
		if hi := d.maxFor(ncpu); n < d.min || n > hi {
			return fail(fmt.Errorf("%d is out of range %d..%d", n, d.min, hi))
		}
		v.n, v.Text = n, fmt.Sprint(n)
	case TypeSize:
		n, err := parseSizeUnit(text, d.plainUnit)
		if err != nil {
			return fail(err)
		}
		if hi := d.maxFor(ncpu); n < d.min || n > hi {
			return fail(fmt.Errorf("%d bytes is out of range %d..%d", n, d.min, hi))
		}
		v.n, v.Text = n, FormatSize(n)
	case TypeEnum:
		t := strings.ToLower(strings.TrimSpace(text))
		for i, c := range d.choices {
			match := t == strings.ToLower(c.Name)
			for _, a := range c.Aliases {
				match = match || t == strings.ToLower(a)
			}
			if match {
				v.n, v.Text = int64(i), c.Name
				return v, nil
			}
		}
		return fail(errors.New("not one of the choices"))
	case TypeString:
		s, err := d.validate(text)
		if err != nil {
			return fail(err)
		}
		v.Text = s
	case TypeFloat:
		f, err := parseFloat(text)
		if err != nil {
			return fail(err)
		}
		if f < d.fmin || f > d.fmax {
			return fail(fmt.Errorf("%s is out of range %s..%s", formatFloat(f), formatFloat(d.fmin), formatFloat(d.fmax)))
		}
		if f == 0 {
			f = 0 // normalize -0
		}
		v.f, v.Text = f, formatFloat(f)
	default:
		return fail(fmt.Errorf("unsupported type %v", d.typ))
	}
	return v, nil
}

// Parse parses text as a value of the setting named key (setting name,
// environment variable, flag or attribute key) without applying it. The
// source of the result is an unnamed option. ncpu is taken from opts.
func Parse(key, text string, opts ...Option) (Value, error) {
	i, ok := resolve(key)
	if !ok {
		return Value{}, fmt.Errorf("%w %q: expected %s", ErrUnknownSetting, key, knownKeysText())
	}
	o := applyOptions(opts)
	return registry[i].parse(text, o.ncpu, OptionSource(""), "value")
}

// Settings is an immutable snapshot of every setting's effective value. Use
// With to derive a snapshot with explicit overrides and ForOp for per-op
// attribute overrides. A nil *Settings reads as the built-in defaults
// (Defaults); the zero Settings holds zero values.
type Settings struct {
	vals [numKeys]Value
	ncpu int
	// mem holds a MemoryConfig applied with WithMemoryConfig.
	mem    MemoryConfig
	hasMem bool
}

// Load reads every setting from env: the variable's value when set (an empty
// value counts as set and must be valid), otherwise the built-in default.
// All invalid values are reported together (errors.Join of *ValueError).
// Warnings name variables with a known prefix (MXNET_, MGB_, MEGENGINE_, GE_)
// that are no setting, with the closest known name.
func Load(env Env, opts ...Option) (*Settings, []Warning, error) {
	if env == nil {
		env = MapEnv(nil)
	}
	o := applyOptions(opts)
	s, err := load(env, o)
	if err != nil {
		return nil, nil, err
	}
	warns := append(unknownVarWarnings(env), s.inertWarnings()...)
	return s, warns, nil
}

// defaults is Defaults(), made once: what a nil *Settings stands for.
var defaults = sync.OnceValue(func() *Settings { return Defaults() })

// or returns s, or the built-in defaults when s is nil: a nil *Settings
// reads as Defaults().
func (s *Settings) or() *Settings {
	if s == nil {
		return defaults()
	}
	return s
}

// Defaults returns the built-in defaults (no environment).
func Defaults(opts ...Option) *Settings {
	s, err := load(MapEnv(nil), applyOptions(opts))
	if err != nil {
		// Defaults are validated by the package tests; this cannot happen.
		panic("config: invalid built-in default: " + err.Error())
	}
	return s
}

func load(env Env, o loadOptions) (*Settings, error) {
	s := &Settings{ncpu: o.ncpu}
	var errs []error
	for i := range registry {
		d := &registry[i]
		if text, ok := env.Lookup(d.env); ok {
			v, err := d.parse(text, o.ncpu, Source{Kind: SourceEnv, Name: d.env}, d.env)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			s.vals[i] = v
			continue
		}
		v, err := d.parse(d.defaultFn(o.ncpu), o.ncpu, Source{Kind: SourceDefault}, "default of "+d.env)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.vals[i] = v
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return s, nil
}

// NumCPU returns the CPU count the snapshot was loaded with.
func (s *Settings) NumCPU() int {
	s = s.or()
	return s.ncpu
}

// With returns a copy of s where the setting named key (setting name,
// environment variable or flag, dashes optional) takes value, from an explicit
// Go option or CLI flag. It overrides the default and the environment; between
// options and flags the later call wins. src must be of kind SourceOption or
// SourceFlag; a flag source with an empty name gets the setting's flag.
func (s *Settings) With(key, value string, src Source) (*Settings, error) {
	s = s.or()
	i, ok := resolve(key)
	if !ok {
		return nil, fmt.Errorf("%w %q: expected %s", ErrUnknownSetting, key, knownKeysText())
	}
	d := &registry[i]
	origin := ""
	switch src.Kind {
	case SourceFlag:
		if src.Name == "" {
			src.Name = d.flag
		}
		origin = "flag --" + src.Name
	case SourceOption:
		origin = "option " + d.name
		if src.Name != "" {
			origin = "option " + src.Name
		}
	default:
		return nil, fmt.Errorf("config: With(%q): source %q: expected an option or flag source (see OptionSource, FlagSource)", key, src.String())
	}
	v, err := d.parse(value, s.ncpu, src, origin)
	if err != nil {
		return nil, err
	}
	if i == GEStaticMemoryPolicy.index() && s.hasMem && s.mem.StaticMemoryPolicy != nil {
		return nil, fmt.Errorf("%s from %s: %w: MemoryConfig.StaticMemoryPolicy is already set", d.name, origin, ErrConflict)
	}
	c := *s
	c.vals[i] = v
	return &c, nil
}

// Get returns the effective value of key (setting name, environment variable,
// flag or attribute key).
func (s *Settings) Get(key string) (Value, error) {
	s = s.or()
	i, ok := resolve(key)
	if !ok {
		return Value{}, fmt.Errorf("%w %q: expected %s", ErrUnknownSetting, key, knownKeysText())
	}
	return s.vals[i], nil
}

// Value returns the effective value of a typed key (zero Value if invalid).
func (s *Settings) Value(k Key) Value {
	s = s.or()
	if k == nil {
		return Value{}
	}
	i := k.index()
	if i < 0 || i >= int(numKeys) {
		return Value{}
	}
	return s.vals[i]
}

// ForOp returns the value of key for one op given its attributes: when the
// setting has a per-op attribute (force_mirroring, cudnn_tune) and attrs sets
// it, the attribute's value wins (source: attribute); otherwise the snapshot's
// value. An invalid attribute value is an error naming the attribute.
func (s *Settings) ForOp(key string, attrs map[string]string) (Value, error) {
	s = s.or()
	i, ok := resolve(key)
	if !ok {
		return Value{}, fmt.Errorf("%w %q: expected %s", ErrUnknownSetting, key, knownKeysText())
	}
	d := &registry[i]
	if d.attr != "" {
		if text, ok := attrs[d.attr]; ok {
			return d.parse(text, s.ncpu, Source{Kind: SourceAttribute, Name: d.attr}, "attribute "+d.attr)
		}
	}
	return s.vals[i], nil
}

// Bool returns a bool setting (false for an invalid key).
func (s *Settings) Bool(k BoolKey) bool {
	s = s.or()
	if lookupDef(int(k), TypeBool) == nil {
		return false
	}
	return s.vals[k].b
}

// Int returns an int setting (0 for an invalid key).
func (s *Settings) Int(k IntKey) int {
	s = s.or()
	if lookupDef(int(k), TypeInt) == nil {
		return 0
	}
	return int(s.vals[k].n)
}

// Size returns a size setting in bytes (0 for an invalid key).
func (s *Settings) Size(k SizeKey) int64 {
	s = s.or()
	if lookupDef(int(k), TypeSize) == nil {
		return 0
	}
	return s.vals[k].n
}

// Float returns a float setting (0 for an invalid key).
func (s *Settings) Float(k FloatKey) float64 {
	s = s.or()
	if lookupDef(int(k), TypeFloat) == nil {
		return 0
	}
	return s.vals[k].f
}

// Enum returns an enum setting's canonical choice name ("" for an invalid key).
func (s *Settings) Enum(k EnumKey) string {
	s = s.or()
	if lookupDef(int(k), TypeEnum) == nil {
		return ""
	}
	return s.vals[k].Text
}

// Text returns a string setting's canonical text ("" for an invalid key).
func (s *Settings) Text(k StringKey) string {
	s = s.or()
	if lookupDef(int(k), TypeString) == nil {
		return ""
	}
	return s.vals[k].Text
}

// DTREnabled reports whether runtime rematerialization is on
// (dtr.drop or dtr.auto_drop).
func (s *Settings) DTREnabled() bool {
	s = s.or()
	return s.Bool(DTREnableDrop) || s.Bool(DTRAutoDrop)
}
