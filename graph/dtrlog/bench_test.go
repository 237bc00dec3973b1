package dtrlog

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// sharedLog reads one of the DTR artifact's logs from ../shared/data
// (skipping when absent: they are not part of the repository).
func sharedLog(tb testing.TB, name string) []byte {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "shared", "data", "dtr-logs", name+".log"))
	if err != nil {
		tb.Skipf("DTR artifact log %s not available: %v", name, err)
	}
	return b
}

func benchCompile(b *testing.B, name string) {
	src := sharedLog(b, name)
	lines := bytes.Count(src, []byte{'\n'})
	b.SetBytes(int64(len(src)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Compile(bytes.NewReader(src)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(lines), "ns/line")
}

// Parsing and compiling the DTR artifact's logs (issue 17: about 4.6 us per
// line with encoding/json).
func BenchmarkCompileResnet32(b *testing.B) { benchCompile(b, "resnet32") }
func BenchmarkCompileUnet(b *testing.B)     { benchCompile(b, "unet") }
