package graph

import (
	"bytes"
	"strconv"
	"testing"
)

// buildChain builds an n-op chain: one f32 input x[256], and op i reads the
// previous tensor and writes a new f32 [256] tensor. Names are unique, as an
// importer would produce them.
func buildChain(tb testing.TB, n int, reserve bool) *Graph {
	tb.Helper()
	b := NewBuilder("chain")
	if reserve {
		b.Reserve(n, n+1)
	}
	t := b.Input("x", F32, 256)
	for i := 0; i < n; i++ {
		s := strconv.Itoa(i)
		t = b.Op("relu", "op"+s, t).Out("t"+s, F32, 256).FLOPs(256).BytesAccessed(2048).T()
	}
	g, err := b.Build()
	if err != nil {
		tb.Fatal(err)
	}
	return g
}

// BenchmarkChain1M builds and validates a 1,000,000-op chain with Builder
// (Build validates and builds the consumer index). Target: < 1 s, < 1 GiB.
func BenchmarkChain1M(b *testing.B) {
	for _, reserve := range []bool{true, false} {
		name := "reserve"
		if !reserve {
			name = "grow"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				g := buildChain(b, 1_000_000, reserve)
				if g.NumOps() != 1_000_000 {
					b.Fatalf("got %d ops", g.NumOps())
				}
			}
		})
	}
}

// encodedChain returns a 100,000-op chain in the JSON format.
func encodedChain(b *testing.B) []byte {
	g := buildChain(b, 100_000, false)
	var buf bytes.Buffer
	if err := Encode(&buf, g); err != nil {
		b.Fatal(err)
	}
	return buf.Bytes()
}

// BenchmarkDecode decodes an encoded 100,000-op chain.
func BenchmarkDecode(b *testing.B) {
	data := encodedChain(b)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := Decode(bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCountElements runs ReadFile's first pass (the element counts
// that size the arrays) over an encoded 100,000-op chain.
func BenchmarkCountElements(b *testing.B) {
	data := encodedChain(b)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for b.Loop() {
		if _, _, ok := countElements(bytes.NewReader(data)); !ok {
			b.Fatal("not ok")
		}
	}
}

// BenchmarkDense builds the dense index of a 100,000-op chain (what the
// first planner or simulator call on a graph pays once).
func BenchmarkDense(b *testing.B) {
	g := buildChain(b, 100_000, true)
	b.ReportAllocs()
	for b.Loop() {
		_ = newDense(g)
	}
}

// BenchmarkWideOpIndex builds the consumer index of a graph whose last op
// sums 38,400 tensors (the gradient sum of an LSTM unrolled over 38,400
// steps): linear in the op's inputs, where a scan of the inputs before
// each one compared 737 million pairs per pass.
func BenchmarkWideOpIndex(b *testing.B) {
	const n = 38400
	bl := NewBuilder("wide")
	ins := make([]TensorID, n)
	for i := range ins {
		ins[i] = bl.Input("x"+strconv.Itoa(i), F32, 4)
	}
	bl.Op("sum", "sum", ins...).Out("y", F32, 4)
	g, err := bl.Build()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		g.buildIndex()
	}
}
