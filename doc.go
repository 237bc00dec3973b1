//go:generate go run ./internal/misusegen

// Package remat is the short way into remat's Go API: read or build a
// training graph, choose a device, run one memory strategy or all of them,
// and read each one's peak memory and step time.
//
//	g, _ := models.Build("resnet50", models.Options{Batch: 32})
//	o, _ := remat.Options("a100-40gb")
//	results, _ := remat.Run(ctx, g, o)
//
// Options reads the process's environment exactly as the sim command does
// (the same settings snapshot, through strategy.OptionsFrom), so a program
// and `sim report` with the same environment and flags get the same plans.
//
// The packages behind it, along the flow: graph (the IR) and its codecs
// graph/native, graph/onnx and graph/dtrlog; graph/models (the zoo); config
// (settings); sim (the simulator); mirror, sublinear, chain and dtr (the
// algorithms); strategy (the table of strategies, their options and their
// one Result); report (side-by-side reports and tables); cmd/sim (the CLI).
package remat
