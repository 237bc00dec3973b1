package sim

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strconv"

	"github.com/remat-dev/remat/graph"
)

// Trace tracks (Chrome trace "tid"s).
const (
	traceCompute = 1
	traceCopy    = 2
)

// WriteTrace writes res's events (recorded with Options.Trace) as a Chrome
// trace (the JSON object format that chrome://tracing and Perfetto open):
// ops as complete ("X") events on the "compute" track (category compute or
// recompute), swaps on the "copy" track (swap_out, swap_in), and memory as a
// counter ("C") named "memory" with series allocated and reserved, sampled
// when each op starts (outputs and workspace allocated) and after every step. Timestamps are microseconds with nanosecond precision.
// The output is deterministic. MXNet writes the same kind of file as
// profile.json when MXNET_PROFILER_AUTOSTART=1; the caller chooses the path.
func WriteTrace(w io.Writer, g *graph.Graph, res *Result) error {
	if res == nil || g == nil {
		return fmt.Errorf("write trace: graph and result are required")
	}
	if len(res.Events) == 0 && res.Steps > 0 {
		return fmt.Errorf("write trace: the result has no events: simulate with Options.Trace set")
	}
	bw := bufio.NewWriter(w)
	var b []byte
	b = append(b, `{"displayTimeUnit":"ns","otherData":{"graph":`...)
	b = appendJSONString(b, res.Graph)
	b = append(b, `,"strategy":`...)
	b = appendJSONString(b, res.Strategy)
	b = append(b, `,"device":`...)
	b = appendJSONString(b, res.Device)
	b = append(b, `,"allocator":`...)
	b = appendJSONString(b, res.Allocator)
	b = append(b, "},\"traceEvents\":[\n"...)
	b = append(b, `{"name":"process_name","ph":"M","pid":1,"tid":0,"args":{"name":`...)
	b = appendJSONString(b, "remat sim: "+res.Graph)
	b = append(b, "}},\n"...)
	b = append(b, `{"name":"thread_name","ph":"M","pid":1,"tid":1,"args":{"name":"compute"}},`+"\n"...)
	b = append(b, `{"name":"thread_name","ph":"M","pid":1,"tid":2,"args":{"name":"copy"}}`...)
	bw.Write(b)
	for i, e := range res.Events {
		b = b[:0]
		b = append(b, ",\n"...)
		switch e.Kind {
		case EvCompute, EvRecompute:
			if e.ID < 0 || int(e.ID) >= len(g.Ops) {
				return fmt.Errorf("write trace: events[%d]: op %d is not in graph %q (%d ops)", i, e.ID, g.Name, len(g.Ops))
			}
			op := &g.Ops[e.ID]
			b = append(b, `{"name":`...)
			b = appendJSONString(b, op.Name)
			b = append(b, `,"cat":"`...)
			b = append(b, e.Kind.String()...)
			b = append(b, `","ph":"X","ts":`...)
			b = appendMicros(b, e.StartNs)
			b = append(b, `,"dur":`...)
			b = appendMicros(b, e.DurNs)
			b = append(b, `,"pid":1,"tid":`...)
			b = strconv.AppendInt(b, traceCompute, 10)
			b = append(b, `,"args":{"op":`...)
			b = strconv.AppendInt(b, int64(e.ID), 10)
			b = append(b, `,"type":`...)
			b = appendJSONString(b, op.Type)
			b = append(b, `,"phase":"`...)
			b = append(b, op.Phase.String()...)
			b = append(b, `","step":`...)
			b = strconv.AppendInt(b, int64(e.Step), 10)
			b = append(b, "}}"...)
		case EvSwapOut, EvSwapIn:
			if e.ID < 0 || int(e.ID) >= len(g.Tensors) {
				return fmt.Errorf("write trace: events[%d]: tensor %d is not in graph %q (%d tensors)", i, e.ID, g.Name, len(g.Tensors))
			}
			t := &g.Tensors[e.ID]
			b = append(b, `{"name":`...)
			b = appendJSONString(b, e.Kind.String()+" "+t.Name)
			b = append(b, `,"cat":"`...)
			b = append(b, e.Kind.String()...)
			b = append(b, `","ph":"X","ts":`...)
			b = appendMicros(b, e.StartNs)
			b = append(b, `,"dur":`...)
			b = appendMicros(b, e.DurNs)
			b = append(b, `,"pid":1,"tid":`...)
			b = strconv.AppendInt(b, traceCopy, 10)
			b = append(b, `,"args":{"tensor":`...)
			b = strconv.AppendInt(b, int64(e.ID), 10)
			b = append(b, `,"bytes":`...)
			b = strconv.AppendInt(b, t.Bytes, 10)
			b = append(b, `,"step":`...)
			b = strconv.AppendInt(b, int64(e.Step), 10)
			b = append(b, "}}"...)
		case EvMemory:
			b = append(b, `{"name":"memory","ph":"C","ts":`...)
			b = appendMicros(b, e.StartNs)
			b = append(b, `,"pid":1,"tid":0,"args":{"allocated":`...)
			b = strconv.AppendInt(b, e.Allocated, 10)
			b = append(b, `,"reserved":`...)
			b = strconv.AppendInt(b, e.Reserved, 10)
			b = append(b, "}}"...)
		default:
			return fmt.Errorf("write trace: events[%d]: kind %d is not valid", i, uint8(e.Kind))
		}
		bw.Write(b)
	}
	bw.WriteString("\n]}\n")
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write trace: %w", err)
	}
	return nil
}

// appendMicros formats ns as microseconds with three decimals.
func appendMicros(b []byte, ns int64) []byte {
	if ns < 0 {
		b = append(b, '-')
		ns = -ns
	}
	b = strconv.AppendInt(b, ns/1000, 10)
	frac := ns % 1000
	b = append(b, '.', byte('0'+frac/100), byte('0'+frac/10%10), byte('0'+frac%10))
	return b
}

func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always marshals
	return append(b, q...)
}
