package sim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/remat-dev/remat/graph"
)

// Plan JSON format: an object with a format tag and version, the strategy
// name and the steps, one object per step with a single key naming the step
// kind and the op (compute) or tensor (free, swap_out, swap_in) ID:
//
//	{"format": "remat.plan", "version": 1, "strategy": "none", "steps": [
//	{"compute": 0},
//	{"free": 3},
//	{"swap_out": 5},
//	{"swap_in": 5}
//	]}
//
// An optional "signature" array (Plan.Signature) describes the graph the
// plan was made for, one string per op in op order:
//
//	PHASE TYPE [<FORWARD] [ID:DTYPE[DIMS][=ALIAS]]...
//
// PHASE is forward, backward or update; TYPE the op type; <FORWARD the
// forward op of a backward op (absent when none); then one field per output
// tensor: its ID, dtype ("?" when unknown), dimensions in brackets,
// comma-separated ("[?]" when the shape is unknown, "[]" for a scalar), and
// =ALIAS, the tensor it is a view of, when it is one.
// Example: "backward convolution_backward <0 130:f32[2,3,64,64] 131:f32[64,3,7,7]".
// `sim plan` fills it; a framework applying the plan compares it with the
// ops it runs and refuses a plan made for another graph.
//
// EncodePlan writes one step (and one signature entry) per line so that diffs
// of plans read well.
const (
	PlanFormat  = "remat.plan"
	PlanVersion = 1
)

// EncodePlan writes p as plan JSON.
func EncodePlan(w io.Writer, p *Plan) error {
	if p == nil {
		return fmt.Errorf("encode plan: plan is nil")
	}
	bw := bufio.NewWriter(w)
	name, err := json.Marshal(p.Strategy)
	if err != nil {
		return fmt.Errorf("encode plan: strategy: %w", err)
	}
	fmt.Fprintf(bw, "{\"format\": %q, \"version\": %d, \"strategy\": %s, \"steps\": [", PlanFormat, PlanVersion, name)
	var buf []byte
	for i, st := range p.Steps {
		if !st.Kind.Valid() {
			return fmt.Errorf("encode plan: steps[%d]: kind %d is not valid", i, uint8(st.Kind))
		}
		buf = buf[:0]
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, "\n{\""...)
		buf = append(buf, st.Kind.String()...)
		buf = append(buf, "\": "...)
		id := int64(st.Tensor)
		if st.Kind == Compute {
			id = int64(st.Op)
		}
		buf = strconv.AppendInt(buf, id, 10)
		buf = append(buf, '}')
		bw.Write(buf)
	}
	bw.WriteString("\n]")
	if p.Signature != nil {
		bw.WriteString(", \"signature\": [")
		var q bytes.Buffer
		enc := json.NewEncoder(&q)
		enc.SetEscapeHTML(false) // "<" of the forward links stays readable
		for i, e := range p.Signature {
			q.Reset()
			if err := enc.Encode(e); err != nil {
				return fmt.Errorf("encode plan: signature[%d]: %w", i, err)
			}
			if i > 0 {
				bw.WriteByte(',')
			}
			bw.WriteByte('\n')
			bw.Write(bytes.TrimSuffix(q.Bytes(), []byte("\n")))
		}
		bw.WriteString("\n]")
	}
	bw.WriteString("}\n")
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("encode plan: %w", err)
	}
	return nil
}

type stepDoc struct {
	Compute *int64 `json:"compute"`
	Free    *int64 `json:"free"`
	SwapOut *int64 `json:"swap_out"`
	SwapIn  *int64 `json:"swap_in"`
}

type planDoc struct {
	Format    *string   `json:"format"`
	Version   *int      `json:"version"`
	Strategy  string    `json:"strategy"`
	Steps     []stepDoc `json:"steps"`
	Signature []string  `json:"signature"`
}

// DecodePlan reads plan JSON. It checks the format tag, the version and that
// every step has exactly one kind with an ID in 0..2^31-1; whether the IDs
// exist in a graph and the steps make sense is checked by CheckPlan and by
// replaying the plan.
func DecodePlan(r io.Reader) (*Plan, error) {
	var d planDoc
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("decode plan: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("decode plan: trailing data after the plan object")
	}
	if d.Format == nil || *d.Format != PlanFormat {
		got := "missing"
		if d.Format != nil {
			got = strconv.Quote(*d.Format)
		}
		return nil, fmt.Errorf("decode plan: field format is %s, expected %q", got, PlanFormat)
	}
	if d.Version == nil || *d.Version != PlanVersion {
		got := "missing"
		if d.Version != nil {
			got = strconv.Itoa(*d.Version)
		}
		return nil, fmt.Errorf("decode plan: field version is %s, expected %d", got, PlanVersion)
	}
	p := &Plan{Strategy: d.Strategy, Steps: make([]Step, len(d.Steps)), Signature: d.Signature}
	for i, s := range d.Steps {
		var kind StepKind
		var id *int64
		n := 0
		for k, v := range [...]*int64{s.Compute, s.Free, s.SwapOut, s.SwapIn} {
			if v != nil {
				n++
				kind, id = StepKind(k+1), v
			}
		}
		if n != 1 {
			return nil, fmt.Errorf("decode plan: steps[%d]: has %d step kinds, expected exactly one of compute, free, swap_out, swap_in", i, n)
		}
		if *id < 0 || *id > math.MaxInt32 {
			return nil, fmt.Errorf("decode plan: steps[%d].%s: ID %d, expected 0..%d", i, kind, *id, math.MaxInt32)
		}
		if kind == Compute {
			p.Steps[i] = ComputeStep(graph.OpID(*id))
		} else {
			p.Steps[i] = Step{Kind: kind, Op: graph.NoOp, Tensor: graph.TensorID(*id)}
		}
	}
	return p, nil
}

// CheckPlan checks p's steps against g without running them: valid kinds and
// op/tensor IDs that exist. The error names the step index. A plan with a
// Signature must have one entry per op of g, each starting with the op's
// phase and type (the first mismatch is named).
func CheckPlan(g *graph.Graph, p *Plan) error {
	if p == nil {
		return fmt.Errorf("plan is nil: %w", ErrInvalidPlan)
	}
	for i, st := range p.Steps {
		switch {
		case !st.Kind.Valid():
			return fmt.Errorf("plan step %d: kind %d, expected compute, free, swap_out or swap_in: %w", i, uint8(st.Kind), ErrInvalidPlan)
		case st.Kind == Compute && (st.Op < 0 || int(st.Op) >= len(g.Ops)):
			return fmt.Errorf("plan step %d: compute op %d, expected 0..%d: %w", i, st.Op, len(g.Ops)-1, ErrInvalidPlan)
		case st.Kind != Compute && (st.Tensor < 0 || int(st.Tensor) >= len(g.Tensors)):
			return fmt.Errorf("plan step %d: %s tensor %d, expected 0..%d: %w", i, st.Kind, st.Tensor, len(g.Tensors)-1, ErrInvalidPlan)
		}
	}
	if p.Signature == nil {
		return nil
	}
	if len(p.Signature) != len(g.Ops) {
		return fmt.Errorf("plan signature: %d entries, expected one per op of graph %q (%d): the plan was made for another graph: %w", len(p.Signature), g.Name, len(g.Ops), ErrInvalidPlan)
	}
	for i, e := range p.Signature {
		o := &g.Ops[i]
		want := o.Phase.String() + " " + o.Type
		if e != want && !strings.HasPrefix(e, want+" ") {
			return fmt.Errorf("plan signature[%d]: %q, expected op #%d %q to start with %q: the plan was made for another graph: %w", i, e, i, o.Name, want, ErrInvalidPlan)
		}
	}
	return nil
}
