package config

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// ErrConflict is wrapped by every error about settings that must not be
// combined.
var ErrConflict = errors.New("conflicting settings")

// CheckExclusive returns an error wrapping ErrConflict when the sublinear
// search and DTR are both enabled: MegEngine does not allow them together and
// neither does remat. Strategies call it with their own enable state and
// Settings.DTREnabled().
func CheckExclusive(sublinearEnabled, dtrEnabled bool) error {
	if sublinearEnabled && dtrEnabled {
		return fmt.Errorf("%w: the sublinear memory search and DTR (MEGENGINE_ENABLE_DROP / MEGENGINE_DTR_AUTO_DROP) cannot be enabled together; disable one of them", ErrConflict)
	}
	return nil
}

// AtomicCleanPolicy selects how memset-initialized outputs (e.g. gradient
// accumulators) are cleaned.
type AtomicCleanPolicy int

// Atomic clean policies.
const (
	// AtomicCleanTogether cleans all of them together at graph start: one
	// block, live for the whole graph.
	AtomicCleanTogether AtomicCleanPolicy = 0
	// AtomicCleanSeparately cleans each right before its use: less memory,
	// more launches.
	AtomicCleanSeparately AtomicCleanPolicy = 1
)

// StaticPolicy is a static memory policy (GE_USE_STATIC_MEMORY's values).
type StaticPolicy int

// Static memory policies. 1 is accepted and behaves as StaticArena.
const (
	// StaticDynamic allocates dynamically by actual size.
	StaticDynamic StaticPolicy = 0
	// StaticArena (2) uses one arena sized to the largest graph of a
	// session, reused across graphs.
	StaticArena StaticPolicy = 2
	// StaticExpand (3) expands dynamically for dynamic shapes (less
	// fragmentation).
	StaticExpand StaticPolicy = 3
	// StaticArenaExpand (4) combines 2 and 3.
	StaticArenaExpand StaticPolicy = 4
)

// Effective maps policy 1 to 2 (its documented behaviour); other values are
// returned unchanged.
func (p StaticPolicy) Effective() StaticPolicy {
	if p == 1 {
		return StaticArena
	}
	return p
}

// MemoryConfig is the Go API's memory configuration (GE's MemoryConfig).
type MemoryConfig struct {
	// AtomicCleanPolicy is 0 (clean together) or 1 (clean separately).
	AtomicCleanPolicy AtomicCleanPolicy
	// StaticMemoryPolicy, when non-nil, sets the static memory policy
	// (0, 2, 3 or 4; 1 behaves as 2). It must not be combined with
	// GE_USE_STATIC_MEMORY or the --static-memory flag.
	StaticMemoryPolicy *StaticPolicy
}

// PolicyPtr returns a pointer to p, for MemoryConfig.StaticMemoryPolicy.
func PolicyPtr(p StaticPolicy) *StaticPolicy { return &p }

// WithMemoryConfig returns a copy of s with mc applied. Invalid fields are
// errors; a StaticMemoryPolicy together with a non-default
// ge.static_memory_policy (from GE_USE_STATIC_MEMORY, a flag or an option) is
// an error wrapping ErrConflict.
func (s *Settings) WithMemoryConfig(mc MemoryConfig) (*Settings, error) {
	s = s.or()
	if mc.AtomicCleanPolicy != AtomicCleanTogether && mc.AtomicCleanPolicy != AtomicCleanSeparately {
		return nil, fmt.Errorf("MemoryConfig.AtomicCleanPolicy = %d: expected 0 (clean together) or 1 (clean separately)", mc.AtomicCleanPolicy)
	}
	c := *s
	if mc.StaticMemoryPolicy != nil {
		p := *mc.StaticMemoryPolicy
		if p < 0 || p > 4 {
			return nil, fmt.Errorf("MemoryConfig.StaticMemoryPolicy = %d: expected 0, 2, 3 or 4 (1 behaves as 2)", p)
		}
		cur := s.vals[GEStaticMemoryPolicy]
		if cur.Source.Kind != SourceDefault {
			return nil, fmt.Errorf("MemoryConfig.StaticMemoryPolicy = %d and %s = %s: %w: set the static memory policy in one place only",
				p, cur.Source, cur.Text, ErrConflict)
		}
		d := &registry[GEStaticMemoryPolicy]
		v, err := d.parse(fmt.Sprint(int(p)), s.ncpu, OptionSource("MemoryConfig.StaticMemoryPolicy"), "MemoryConfig.StaticMemoryPolicy")
		if err != nil {
			return nil, err
		}
		c.vals[GEStaticMemoryPolicy] = v
		mc.StaticMemoryPolicy = PolicyPtr(p) // do not alias the caller's variable
	}
	c.mem, c.hasMem = mc, true
	return &c, nil
}

// MemoryConfig returns the effective memory configuration: the atomic clean
// policy of the last WithMemoryConfig (default 0) and the static memory policy
// from whatever source set it (always non-nil here).
func (s *Settings) MemoryConfig() MemoryConfig {
	s = s.or()
	mc := MemoryConfig{}
	if s.hasMem {
		mc.AtomicCleanPolicy = s.mem.AtomicCleanPolicy
	}
	mc.StaticMemoryPolicy = PolicyPtr(s.StaticMemoryPolicy())
	return mc
}

// StaticMemoryPolicy returns the effective static memory policy with 1
// mapped to 2.
func (s *Settings) StaticMemoryPolicy() StaticPolicy {
	s = s.or()
	return StaticPolicy(s.vals[GEStaticMemoryPolicy].n).Effective()
}

// CheckConcurrentGraphs returns an error wrapping ErrConflict when n graphs
// run concurrently (n > 1) under static memory policy 2 or 4 (or 1, which
// behaves as 2): one shared arena cannot serve graphs running at once.
func (s *Settings) CheckConcurrentGraphs(n int) error {
	s = s.or()
	p := s.StaticMemoryPolicy()
	if n > 1 && (p == StaticArena || p == StaticArenaExpand) {
		v := s.vals[GEStaticMemoryPolicy]
		return fmt.Errorf("static memory policy %s (from %s) with %d concurrently running graphs: %w: policies 1, 2 and 4 share one arena; use 0 or 3",
			v.Text, v.Source, n, ErrConflict)
	}
	return nil
}

// Warning is a non-fatal remark about the environment.
type Warning struct {
	Var        string // the variable concerned
	Suggestion string // closest known variable, when the variable is unknown
	Message    string
}

// String returns the message.
func (w Warning) String() string { return w.Message }

// knownPrefixes are the prefixes of the variables remat reads.
var knownPrefixes = []string{"MXNET_", "MGB_", "MEGENGINE_", "GE_"}

// unknownVarWarnings warns about variables with a known prefix that are no
// setting, suggesting the closest known name by Levenshtein distance (ties go
// to the alphabetically first name).
func unknownVarWarnings(env Env) []Warning {
	names := append([]string(nil), env.Names()...)
	sort.Strings(names)
	var out []Warning
	for _, n := range names {
		if !hasKnownPrefix(n) {
			continue
		}
		if _, ok := envIndex(n); ok {
			continue
		}
		best := Suggest(n)
		out = append(out, Warning{
			Var: n, Suggestion: best,
			Message: fmt.Sprintf("%s is not a setting remat reads and is ignored; did you mean %s?", n, best),
		})
	}
	return out
}

// Suggest returns the known environment variable closest to name by
// Levenshtein distance (case-insensitive); ties go to the alphabetically first.
func Suggest(name string) string {
	best, bestD := "", -1
	up := strings.ToUpper(name)
	for _, i := range sortedEnvIndexes {
		e := registry[i].env
		d := levenshtein(up, e)
		if bestD < 0 || d < bestD {
			best, bestD = e, d
		}
	}
	return best
}

// sortedEnvIndexes lists registry indexes sorted by environment variable.
var sortedEnvIndexes = func() []int {
	idx := make([]int, numKeys)
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return registry[idx[a]].env < registry[idx[b]].env })
	return idx
}()

func hasKnownPrefix(n string) bool {
	for _, p := range knownPrefixes {
		if strings.HasPrefix(n, p) {
			return true
		}
	}
	return false
}

func envIndex(n string) (int, bool) {
	for i := range registry {
		if registry[i].env == n {
			return i, true
		}
	}
	return -1, false
}

// levenshtein returns the edit distance between a and b (bytes).
func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// inertWarnings warns about settings that have no effect in combination.
func (s *Settings) inertWarnings() []Warning {
	var out []Warning
	thr := s.vals[DTREvictionThreshold]
	if thr.Source.Kind != SourceDefault && thr.n > 0 && !s.DTREnabled() {
		out = append(out, Warning{
			Var:     registry[DTREvictionThreshold].env,
			Message: fmt.Sprintf("%s=%s has no effect: DTR is off (set MEGENGINE_ENABLE_DROP or MEGENGINE_DTR_AUTO_DROP)", registry[DTREvictionThreshold].env, thr.Text),
		})
	}
	return out
}
