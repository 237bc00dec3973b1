package report

import (
	"encoding/json"
	"fmt"
	"io"
)

// WriteJSON writes v as indented JSON with a trailing newline (the JSON
// form of every report; field order is fixed by the struct definitions).
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// RowsTable is the table of a report's rows.
func (r *Report) RowsTable() *Table {
	t := &Table{
		Columns:    []string{"strategy", "status", "peak allocated", "peak reserved", "change", "step time", "overhead", "recomputes", "evictions", "swaps", "fits device", "fits budget"},
		RightAlign: []bool{false, false, true, true, true, true, true, true, true, true, false, false},
	}
	for _, row := range r.Rows {
		if row.Result == nil {
			t.AddRow(Text(row.Strategy), Text(row.Status), Text("-"), Text("-"), Text("-"), Text("-"), Text("-"), Text("-"), Text("-"), Text("-"), Text("-"), Text("-"))
			continue
		}
		t.AddRow(Text(row.Strategy), Text(row.Status), Bytes(row.PeakAllocated), Bytes(row.PeakReserved), Percent(row.Change),
			Duration(row.TimeNs), Ratio(row.Overhead), Int(int64(row.Recomputes)), Int(int64(row.Evictions)), Int(int64(row.Swaps)),
			Bool(row.FitsDevice), Bool(row.FitsBudget))
	}
	return t
}

// Write renders the report. Table and Markdown add, below the rows, the
// reasons of the rows that failed, the best strategy and the ten tensors
// that dominate its peak; CSV has the rows only; JSON everything.
func (r *Report) Write(w io.Writer, f Format) error {
	if f == FormatJSON {
		return WriteJSON(w, r)
	}
	if f == FormatTable || f == FormatMarkdown {
		dev := r.Device
		if dev == "" {
			dev = "unlimited device"
		}
		head := fmt.Sprintf("%s: %d ops, %d tensors on %s (%s allocator", r.Graph, r.Ops, r.Tensors, dev, r.Allocator)
		if r.Capacity > 0 {
			head += ", usable " + Bytes(r.Capacity).Human
		}
		if r.Budget > 0 {
			head += ", budget " + Bytes(r.Budget).Human
		}
		head += ")\n\n"
		if _, err := io.WriteString(w, head); err != nil {
			return err
		}
	}
	if err := r.RowsTable().Write(w, f); err != nil {
		return err
	}
	if f == FormatCSV {
		return nil
	}
	var notes string
	for _, row := range r.Rows {
		if row.Status != StatusOK && row.Reason != "" {
			notes += fmt.Sprintf("- %s: %s: %s\n", row.Strategy, row.Status, row.Reason)
		} else if row.SavedPeak > 0 {
			notes += fmt.Sprintf("- %s: the budget bounds the saved activations (dtr.budget_scope saved), checked after each save as remat_torch.dtr does: their peak is %s, the peak allocated adds the rest of the step\n", row.Strategy, Bytes(row.SavedPeak).Human)
		}
	}
	if notes != "" {
		if _, err := io.WriteString(w, "\n"+notes); err != nil {
			return err
		}
	}
	if r.Best == "" {
		return nil
	}
	head := fmt.Sprintf("\nbest: %s; tensors that dominate its peak:\n\n", r.Best)
	for _, row := range r.Rows {
		if row.Strategy == r.Best && (row.Status != StatusOK || !row.FitsBudget) {
			// Compare fell back to the smallest peak: say so
			head = fmt.Sprintf("\nno strategy fits; smallest peak: %s; tensors that dominate it:\n\n", r.Best)
		}
	}
	if _, err := io.WriteString(w, head); err != nil {
		return err
	}
	t := &Table{Columns: []string{"tensor", "kind", "size"}, RightAlign: []bool{false, false, true}}
	for _, lt := range r.TopTensors {
		t.AddRow(Text(lt.Name), Text(lt.Kind), Bytes(lt.Bytes))
	}
	return t.Write(w, f)
}
