package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzParseValue parses any string as every setting's type: the result is an
// error or a value, never a panic; a value's canonical text parses back to
// the same value, and a parsed size survives FormatSize/ParseSize.
func FuzzParseValue(f *testing.F) {
	for _, seed := range []string{
		"", "0", "1", "-1", "true", "OFF", "yes", "10", "1048576", "5GB", "1.5gib", ".5KB", "9223372036854775807",
		"9223372036854775808", "8388608TiB", "-5GB", "1e9", "NaN", "+Inf", "2.5", "fastest", "limited_workspace",
		"PROFILE_REPRODUCIBLE", "heuristic_profile", "_", "1.2.3", "  7  ", "+", "++1", "0x10", "\x00", "١٢",
	} {
		f.Add(seed)
	}
	specs := Specs()
	f.Fuzz(func(t *testing.T, s string) {
		for _, sp := range specs {
			v, err := Parse(sp.Name, s, WithNumCPU(4))
			if err != nil {
				require.Contains(t, err.Error(), sp.Accepted[:min(10, len(sp.Accepted))])
				continue
			}
			again, err := Parse(sp.Name, v.Text, WithNumCPU(4))
			require.NoError(t, err, "%s: canonical text %q of %q does not parse", sp.Name, v.Text, s)
			require.Equal(t, v, again, "%s: %q", sp.Name, s)
		}
		if n, err := ParseSize(s); err == nil {
			require.GreaterOrEqual(t, n, int64(0))
			back, err := ParseSize(FormatSize(n))
			require.NoError(t, err)
			require.Equal(t, n, back)
		}
		if b, err := ParseBool(s); err == nil {
			back, err := ParseBool(map[bool]string{true: "true", false: "false"}[b])
			require.NoError(t, err)
			require.Equal(t, b, back)
		}
	})
}
