package config

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// Size units. Following MegEngine, the decimal-looking units KB, MB, GB and TB
// mean powers of 1024, exactly like KiB, MiB, GiB and TiB.
const (
	KiB int64 = 1 << 10
	MiB int64 = 1 << 20
	GiB int64 = 1 << 30
	TiB int64 = 1 << 40
)

// sizeUnits maps a lower-cased unit suffix to its multiplier.
var sizeUnits = map[string]int64{
	"b":   1,
	"kb":  KiB,
	"kib": KiB,
	"mb":  MiB,
	"mib": MiB,
	"gb":  GiB,
	"gib": GiB,
	"tb":  TiB,
	"tib": TiB,
}

// SizeSyntax describes the accepted size syntax; it is quoted in errors.
const SizeSyntax = "a non-negative byte count, optionally fractional and followed by a unit " +
	"B, KB, MB, GB, TB, KiB, MiB, GiB or TiB (case-insensitive; KB/MB/GB/TB mean powers of 1024 as in MegEngine), e.g. 1048576, 512MiB, 1.5GB"

// BoolSyntax describes the accepted boolean spellings; it is quoted in errors.
const BoolSyntax = "0, 1, true, false, yes, no, on or off (case-insensitive)"

var errOverflow = errors.New("value overflows int64 bytes")

// ParseSize parses a size such as "1048576", "512MiB", "1.5GB" or "2 tb" into
// bytes. A plain number is bytes. Units are case-insensitive; KB, MB, GB and TB
// are powers of 1024 (MegEngine's convention), the same as KiB..TiB. A
// fractional value is allowed and the result is truncated to whole bytes.
// Negative values, unknown units and values above math.MaxInt64 bytes are
// errors.
func ParseSize(s string) (int64, error) {
	return parseSizeUnit(s, 1)
}

// parseSizeUnit is ParseSize with the multiplier used when no unit is given
// (1 for bytes, MiB for settings expressed in megabytes).
func parseSizeUnit(s string, plainUnit int64) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, errors.New("empty size")
	}
	// Split into the numeric part and the unit suffix.
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.' || t[i] == '+') {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	if num == "" {
		if strings.HasPrefix(t, "-") {
			return 0, errors.New("negative size")
		}
		return 0, fmt.Errorf("%q does not start with a number", t)
	}
	mult := plainUnit
	if unit != "" {
		m, ok := sizeUnits[unit]
		if !ok {
			return 0, fmt.Errorf("unknown unit %q", t[i:])
		}
		mult = m
	}
	if strings.HasPrefix(num, "+") {
		num = num[1:]
	}
	if strings.ContainsAny(num, "+") || strings.Count(num, ".") > 1 || num == "." || num == "" {
		return 0, fmt.Errorf("malformed number %q", t[:i])
	}
	intPart, fracPart, _ := strings.Cut(num, ".")
	if intPart == "" {
		intPart = "0"
	}
	// Guard against absurdly long inputs before doing big arithmetic.
	if len(intPart) > 40 {
		return 0, errOverflow
	}
	if len(fracPart) > 30 {
		fracPart = fracPart[:30]
	}
	n := new(big.Int)
	if _, ok := n.SetString(intPart+fracPart, 10); !ok {
		return 0, fmt.Errorf("malformed number %q", t[:i])
	}
	n.Mul(n, big.NewInt(mult))
	if fracPart != "" {
		den := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(len(fracPart))), nil)
		n.Quo(n, den) // truncates toward zero; n is non-negative
	}
	if !n.IsInt64() {
		return 0, errOverflow
	}
	return n.Int64(), nil
}

// FormatSize renders bytes with the largest binary unit that divides it
// exactly ("5GiB", "1536MiB", "1048577B", "0"). ParseSize(FormatSize(n)) == n
// for every n >= 0; a negative n is rendered as a plain signed number.
func FormatSize(n int64) string {
	if n == 0 {
		return "0"
	}
	if n < 0 {
		return strconv.FormatInt(n, 10)
	}
	for _, u := range []struct {
		m    int64
		name string
	}{{TiB, "TiB"}, {GiB, "GiB"}, {MiB, "MiB"}, {KiB, "KiB"}} {
		if n%u.m == 0 {
			return strconv.FormatInt(n/u.m, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}

// ParseBool parses 0/1/true/false/yes/no/on/off, case-insensitively and
// ignoring surrounding spaces.
func ParseBool(s string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "1", "true", "yes", "on":
		return true, nil
	case "0", "false", "no", "off":
		return false, nil
	}
	return false, fmt.Errorf("%q is not a boolean", s)
}

// parseInt parses a base-10 integer (optional sign, surrounding spaces
// ignored).
func parseInt(s string) (int64, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		var ne *strconv.NumError
		if errors.As(err, &ne) && errors.Is(ne.Err, strconv.ErrRange) {
			return 0, errors.New("integer out of int64 range")
		}
		return 0, fmt.Errorf("%q is not an integer", s)
	}
	return n, nil
}

// parseFloat parses a finite decimal number.
func parseFloat(s string) (float64, error) {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%q is not a finite number", s)
	}
	return f, nil
}

// formatFloat renders a float in the shortest form that round-trips.
func formatFloat(f float64) string {
	return strconv.FormatFloat(f, 'g', -1, 64)
}
