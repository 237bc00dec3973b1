package report

import (
	"fmt"
	"strconv"

	"github.com/dustin/go-humanize"
)

// Bytes formats a byte count for people (binary units: KiB, MiB, GiB) with the
// exact integer for CSV.
func Bytes(n int64) Cell {
	h := humanize.IBytes(uint64(max(n, 0)))
	if n < 0 {
		h = "-" + humanize.IBytes(uint64(-n))
	}
	return Cell{Human: h, Exact: strconv.FormatInt(n, 10)}
}

// Duration formats nanoseconds as milliseconds (or seconds past 10 s) with the
// exact nanoseconds for CSV.
func Duration(ns int64) Cell {
	ms := float64(ns) / 1e6
	h := fmt.Sprintf("%.2f ms", ms)
	if ms >= 10000 {
		h = fmt.Sprintf("%.2f s", ms/1000)
	}
	return Cell{Human: h, Exact: strconv.FormatInt(ns, 10)}
}

// Ratio formats a ratio such as an overhead (1.234x).
func Ratio(r float64) Cell {
	return Cell{Human: fmt.Sprintf("%.3fx", r), Exact: strconv.FormatFloat(r, 'f', 6, 64)}
}

// Percent formats a relative change (-23.5%).
func Percent(r float64) Cell {
	return Cell{Human: fmt.Sprintf("%+.1f%%", 100*r), Exact: strconv.FormatFloat(r, 'f', 6, 64)}
}

// Int formats an integer.
func Int(n int64) Cell { s := strconv.FormatInt(n, 10); return Cell{Human: s, Exact: s} }

// Bool formats yes/no.
func Bool(b bool) Cell {
	if b {
		return Cell{Human: "yes", Exact: "true"}
	}
	return Cell{Human: "no", Exact: "false"}
}
