package main

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseBudgetGrammar(t *testing.T) {
	good := []struct {
		in    string
		size  int64
		ratio float64
	}{
		{"", 0, 0},
		{"8GiB", 8 << 30, 0},
		{"512MB", 512 << 20, 0}, // MegEngine reads "5GB" as 5*1024^3 (config.ParseSize)
		{"1.5GiB", 3 << 29, 0},
		{"100B", 100, 0},
		{"0.5", 0, 0.5},
		{"1.0", 0, 1},
		{".25", 0, 0.25},
		{"50%", 0, 0.5},
		{"100%", 0, 1},
		{" 0.3 ", 0, 0.3},
	}
	for _, c := range good {
		size, ratio, err := parseBudget(c.in)
		require.NoError(t, err, c.in)
		assert.Equal(t, c.size, size, c.in)
		assert.InDelta(t, c.ratio, ratio, 1e-12, c.in)
	}
	bad := []string{"1", "1.5", "2", "1024", "0", "0.0", "-0.5", "nan", "NaN%", "inf", "+Inf", "0%", "101%", "-5%", "x%",
		"0B", "-1GiB", "8 parsecs", "GiB", "%", "1e400", "9999999999EiB"}
	for _, in := range bad {
		_, _, err := parseBudget(in)
		require.Error(t, err, "%q must be refused", in)
		assert.True(t, strings.HasPrefix(err.Error(), "--budget "), err.Error())
		assert.NotContains(t, err.Error(), "\n")
	}
	_, _, err := parseBudget("1024")
	assert.ErrorContains(t, err, "it needs a unit")
	_, _, err = parseBudget("1.5")
	assert.ErrorContains(t, err, "a plain number is a ratio")
}

func TestStrategyListGrammar(t *testing.T) {
	sts, err := parseStrategies("strategies", "")
	require.NoError(t, err)
	assert.NotEmpty(t, sts)
	sts, err = parseStrategies("strategies", " none , dtr ")
	require.NoError(t, err)
	assert.Len(t, sts, 2)
	for _, in := range []string{",", "none,", ",none", "none,none", "none,,dtr", "nope"} {
		_, err := parseStrategies("strategies", in)
		assert.Error(t, err, "%q", in)
	}
}

func TestParseRatios(t *testing.T) {
	rs, err := parseRatios("1,0.5,0.1")
	require.NoError(t, err)
	assert.Equal(t, []float64{1, 0.5, 0.1}, rs)
	for _, in := range []string{"0", "1.5", "nan", "0.5,0.5", "0.5,", "x"} {
		_, err := parseRatios(in)
		assert.Error(t, err, "%q", in)
	}
}

// FuzzParseBudget checks the --budget grammar never panics and that what it
// accepts is in range: a positive size or a ratio in (0, 1].
func FuzzParseBudget(f *testing.F) {
	for _, s := range []string{"", "8GiB", "0.5", "50%", "1", "1.5", "nan%", "1e-300", "-0", "0x10", "9223372036854775807B", "1.0000000001"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		size, ratio, err := parseBudget(s)
		if err != nil {
			return
		}
		switch {
		case size > 0 && ratio == 0, size == 0 && ratio == 0 && strings.TrimSpace(s) == "":
		case size == 0 && ratio > 0 && ratio <= 1 && !math.IsNaN(ratio):
		default:
			t.Fatalf("parseBudget(%q) = %d, %g", s, size, ratio)
		}
	})
}

// FuzzStrategyList checks the --strategies and --ratios grammars never
// panic and never accept duplicates.
func FuzzStrategyList(f *testing.F) {
	for _, s := range []string{"", ",", "none,none", "none,dtr", "1,0.5", "0.5,0.5", " , "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if sts, err := parseStrategies("strategies", s); err == nil {
			seen := map[string]bool{}
			for _, st := range sts {
				if seen[st.Name] {
					t.Fatalf("%q: %s twice", s, st.Name)
				}
				seen[st.Name] = true
			}
		}
		if rs, err := parseRatios(s); err == nil {
			for _, r := range rs {
				if !(r > 0 && r <= 1) {
					t.Fatalf("%q: ratio %g", s, r)
				}
			}
		}
	})
}
