// Command sim plans and simulates memory-saving recomputation for deep-learning
// training: what-if reports of peak memory and step time per strategy (none,
// MXNet mirror, MegEngine sublinear search, optimal chain checkpointing, DTR),
// budget sweeps, the largest batch per strategy, plans and Chrome traces.
//
// Run `sim --help` for the commands; docs/cli.md documents every output
// format and exit code.
package main

import (
	"context"
	"os"
	"os/signal"
)

func main() {
	tuneGC(os.LookupEnv)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := Main(ctx, os.Args[1:], os.Stdout, os.Stderr, os.LookupEnv, os.Environ)
	stop()
	os.Exit(code)
}
