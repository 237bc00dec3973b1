// Package zoolog writes a zoo model's schedule as a compiled DTR log, the
// input of the log sweeps' tests on architectures other than the DTR
// artifact's: dtrlog.FromGraph with op times from the a100-40gb cost model,
// as `sim convert --model M OUT.log` writes it.
package zoolog
