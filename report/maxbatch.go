package report

import (
	"context"
	"fmt"

	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/graph/models"
	"github.com/remat-dev/remat/sim"
	"github.com/remat-dev/remat/strategy"
)

// MaxBatchRow is one strategy's largest batch.
type MaxBatchRow struct {
	Strategy string `json:"strategy"`
	// MaxBatch is the largest batch size that fits (0: not even batch 1).
	MaxBatch int `json:"max_batch"`
	// Throughput is samples per second at MaxBatch (simulated step time).
	Throughput    float64 `json:"throughput"`
	PeakAllocated int64   `json:"peak_allocated"`
	TimeNs        int64   `json:"time_ns"`
	// Probes is how many batch sizes were simulated.
	Probes int    `json:"probes"`
	Reason string `json:"reason,omitempty"`
}

// MaxBatchReport is the largest batch per strategy (the table Checkmate and
// DTR publish).
type MaxBatchReport struct {
	Version   int           `json:"version"`
	Kind      string        `json:"kind"`
	Model     string        `json:"model"`
	Device    string        `json:"device"`
	Allocator string        `json:"allocator"`
	Limit     int64         `json:"limit"`
	Rows      []MaxBatchRow `json:"rows"`
}

// MaxBatchLimit caps the batch search.
const MaxBatchLimit = 1 << 16

// MaxBatch searches, for each strategy (nil: all), the largest batch size
// of a zoo model whose step fits the device (or o.Budget, if > 0): doubling
// from 1 until a batch does not fit, then bisection. It assumes memory grows
// with the batch, which holds for every zoo model. Cancelling ctx returns an
// error matching sim.ErrCanceled and no report.
func MaxBatch(ctx context.Context, model string, mo models.Options, o strategy.Options, strategies []strategy.Strategy, progress sim.Progress) (*MaxBatchReport, error) {
	if _, err := models.Lookup(model); err != nil {
		return nil, err
	}
	return MaxBatchOf(ctx, model, func(batch int) (*graph.Graph, error) {
		oo := mo
		oo.Batch = batch
		return models.Build(model, oo)
	}, o, strategies, progress)
}

// MaxBatchOf is MaxBatch for any source of training graphs: build returns
// the step at a batch size (an ONNX model imported with that batch, say);
// model names it in the report. Memory must grow with the batch.
func MaxBatchOf(ctx context.Context, model string, build func(batch int) (*graph.Graph, error), o strategy.Options, strategies []strategy.Strategy, progress sim.Progress) (*MaxBatchReport, error) {
	if build == nil {
		return nil, fmt.Errorf("maxbatch: no graph builder")
	}
	if len(strategies) == 0 {
		strategies = strategy.All()
	}
	if o.Limit() <= 0 {
		return nil, fmt.Errorf("maxbatch: needs a device with a capacity or a budget")
	}
	if o.Allocator == "" {
		o.Allocator = strategy.DefaultAllocator
	}
	rep := &MaxBatchReport{Version: SchemaVersion, Kind: "maxbatch", Model: model, Device: o.Device.Name, Allocator: o.Allocator, Limit: o.Limit()}
	fits := func(st strategy.Strategy, batch int) (Row, error) {
		g, err := build(batch)
		if err != nil {
			return Row{}, err
		}
		return RunStrategy(ctx, g, o, st)
	}
	for i, st := range strategies {
		progress.Report(i, len(strategies), st.Name)
		row := MaxBatchRow{Strategy: st.Name}
		var best Row
		ok := func(b int) (bool, error) {
			if err := sim.Canceled(ctx, "maxbatch"); err != nil {
				return false, err
			}
			r, err := fits(st, b)
			if err != nil {
				return false, err
			}
			row.Probes++
			good := r.Status == StatusOK && r.FitsBudget
			if good && b > row.MaxBatch {
				row.MaxBatch, best = b, r
			}
			if !good && r.Reason != "" {
				row.Reason = r.Reason
			}
			return good, nil
		}
		lo, hi := 0, 1 // lo fits (0 trivially), hi is the next probe
		for hi <= MaxBatchLimit {
			good, err := ok(hi)
			if err != nil {
				return nil, err
			}
			if !good {
				break
			}
			lo, hi = hi, hi*2
		}
		if hi > MaxBatchLimit {
			hi = MaxBatchLimit + 1
		}
		for hi-lo > 1 {
			mid := lo + (hi-lo)/2
			good, err := ok(mid)
			if err != nil {
				return nil, err
			}
			if good {
				lo = mid
			} else {
				hi = mid
			}
		}
		if row.MaxBatch > 0 {
			row.Reason = ""
			row.PeakAllocated, row.TimeNs = best.PeakAllocated, best.TimeNs
			if best.TimeNs > 0 {
				row.Throughput = float64(row.MaxBatch) / (float64(best.TimeNs) / 1e9)
			}
		}
		rep.Rows = append(rep.Rows, row)
	}
	progress.Report(len(strategies), len(strategies), "")
	return rep, nil
}

// Table renders the rows.
func (m *MaxBatchReport) Table() *Table {
	t := &Table{Columns: []string{"strategy", "max batch", "samples/s", "peak allocated", "step time", "probes"},
		RightAlign: []bool{false, true, true, true, true, true}}
	for _, r := range m.Rows {
		t.AddRow(Text(r.Strategy), Int(int64(r.MaxBatch)), Cell{Human: fmt.Sprintf("%.1f", r.Throughput), Exact: fmt.Sprintf("%.6f", r.Throughput)},
			Bytes(r.PeakAllocated), Duration(r.TimeNs), Int(int64(r.Probes)))
	}
	return t
}

// Write renders the report.
func (m *MaxBatchReport) Write(w interface{ Write([]byte) (int, error) }, f Format) error {
	if f == FormatJSON {
		return WriteJSON(w, m)
	}
	return m.Table().Write(w, f)
}
