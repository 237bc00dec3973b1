package main

import (
	"math"
	"strconv"
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

func TestParseCount(t *testing.T) {
	good := map[string]int{"56": 56, " 56 ": 56, "-3": -3, "0x40": 64, "1_000": 1000, "1e5": 100000, "2.5e4": 25000,
		"100.0": 100, "1E2": 100, "9223372036854775807": math.MaxInt64, "-9223372036854775808": math.MinInt64, "4e18": 4e18}
	for in, want := range good {
		got, err := parseCount(in)
		require.NoError(t, err, "%q", in)
		assert.Equal(t, want, got, "%q", in)
	}
	bad := map[string]string{"": "expected an integer", "eight": "expected an integer", "1.5": "not a whole number",
		"1e-3": "not a whole number", "nan": "expected an integer", "inf": "out of range", "1e19": "out of range",
		"9223372036854775808": "out of range", "-1e19": "out of range", "1e400": "out of range", "0x": "expected an integer"}
	for in, want := range bad {
		_, err := parseCount(in)
		assert.ErrorContains(t, err, want, "%q", in)
	}
}

// TestCountFlags checks that the model-size flags take scientific notation:
// --depth 1e1 builds the graph --depth 10 does.
func TestCountFlags(t *testing.T) {
	run := func(depth string) string {
		out, errOut, code := run(t, fixedEnv, "report", "--model", "mlp", "--depth", depth, "--device", "none", "--strategies", "none", "--format", "json")
		require.Equal(t, 0, code, errOut)
		return out
	}
	assert.Equal(t, run("10"), run("1e1"))
	assert.NotEqual(t, run("10"), run("9"))
}

// FuzzParseCount checks the integer flags' grammar never panics and that a
// value it accepts is the integer the text writes.
func FuzzParseCount(f *testing.F) {
	for _, s := range []string{"56", "1e5", "2.5e4", "0x40", "1_000", "-0", "1.5", "nan", "9.3e18", "-9223372036854775808", "1e-400"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := parseCount(s)
		if err != nil {
			return
		}
		if x, err := strconv.ParseInt(strings.TrimSpace(s), 0, 64); err == nil {
			if int64(v) != x {
				t.Fatalf("parseCount(%q) = %d, ParseInt %d", s, v, x)
			}
			return
		}
		x, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || x != float64(v) {
			t.Fatalf("parseCount(%q) = %d, ParseFloat %g, %v", s, v, x, err)
		}
	})
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
