package sim

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWriteTrace(t *testing.T) {
	g := chain(t)
	p := plan(ComputeStep(0), ComputeStep(1), SwapOutStep(tA), ComputeStep(2), ComputeStep(3), FreeStep(tB), FreeStep(tC),
		SwapInStep(tA), ComputeStep(4), FreeStep(tA), FreeStep(tGB), ComputeStep(0), ComputeStep(5), FreeStep(tGA), ComputeStep(6), FreeStep(tGW))
	res, err := Simulate(g, p, Options{Device: swapDevice(), Trace: true})
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, WriteTrace(&buf, g, res))

	var doc struct {
		DisplayTimeUnit string `json:"displayTimeUnit"`
		TraceEvents     []struct {
			Name string         `json:"name"`
			Cat  string         `json:"cat"`
			Ph   string         `json:"ph"`
			Ts   float64        `json:"ts"`
			Dur  float64        `json:"dur"`
			Tid  int            `json:"tid"`
			Args map[string]any `json:"args"`
		} `json:"traceEvents"`
	}
	require.NoError(t, json.Unmarshal(buf.Bytes(), &doc), buf.String())
	count := map[string]int{}
	for _, e := range doc.TraceEvents {
		count[e.Ph+"/"+e.Cat]++
		switch e.Ph {
		case "X":
			if e.Cat == "compute" || e.Cat == "recompute" {
				assert.Equal(t, 1, e.Tid)
			} else {
				assert.Equal(t, 2, e.Tid)
			}
		case "C":
			assert.Equal(t, "memory", e.Name)
			assert.Contains(t, e.Args, "allocated")
		}
	}
	assert.Equal(t, 7, count["X/compute"])
	assert.Equal(t, 1, count["X/recompute"])
	assert.Equal(t, 1, count["X/swap_out"])
	assert.Equal(t, 1, count["X/swap_in"])
	// One sample at each op start (with its outputs and workspace) and one
	// after every step.
	assert.Equal(t, len(p.Steps)+8, count["C/"])
	assert.Equal(t, 3, count["M/"])
	// The swap-in of a: 200 ns starting at 4 us.
	for _, e := range doc.TraceEvents {
		if e.Cat == "swap_in" {
			assert.Equal(t, "swap_in a", e.Name)
			assert.InDelta(t, 4.0, e.Ts, 1e-9)
			assert.InDelta(t, 0.2, e.Dur, 1e-9)
		}
	}
	golden(t, "trace_chain.golden.json", buf.Bytes())

	// Deterministic.
	var again bytes.Buffer
	require.NoError(t, WriteTrace(&again, g, res))
	assert.Equal(t, buf.String(), again.String())

	// Without recorded events the trace cannot be written.
	res2, err := Simulate(g, p, Options{Device: swapDevice()})
	require.NoError(t, err)
	assert.ErrorContains(t, WriteTrace(&again, g, res2), "Options.Trace")
}

func TestAppendMicros(t *testing.T) {
	assert.Equal(t, "0.000", string(appendMicros(nil, 0)))
	assert.Equal(t, "1.234", string(appendMicros(nil, 1234)))
	assert.Equal(t, "12345.006", string(appendMicros(nil, 12345006)))
	assert.Equal(t, "-0.005", string(appendMicros(nil, -5)))
}
