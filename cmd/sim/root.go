package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/remat-dev/remat/report"
	"github.com/remat-dev/remat/sim"
)

// Exit codes.
const (
	exitOK       = 0
	exitError    = 1 // any error; one line on stderr
	exitUsage    = 2 // bad flags or arguments
	exitFailOver = 3 // --fail-over: the chosen strategy's peak exceeds the limit
	// exitInterrupted is the shell's code for a run ended by SIGINT
	// (128 + 2): nothing was printed as a result and no file written.
	exitInterrupted = 130
)

// usageError marks errors caused by the command line itself.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// failOverError is returned when --fail-over trips.
type failOverError struct{ msg string }

func (e failOverError) Error() string { return e.msg }

// app carries what every command shares: streams, environment and the global
// flags.
type app struct {
	stdout, stderr io.Writer
	lookupEnv      func(string) (string, bool)
	environ        func() []string
	format         string
	quiet          bool
}

func (a *app) outFormat() (report.Format, error) {
	f, err := report.ParseFormat(a.format)
	if err != nil {
		return "", usageError{fmt.Errorf("--format: %w", err)}
	}
	return f, nil
}

// Main runs the sim command line and returns its exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, lookupEnv func(string) (string, bool), environ func() []string) int {
	a := &app{stdout: stdout, stderr: stderr, lookupEnv: lookupEnv, environ: environ}
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	if errors.Is(err, sim.ErrCanceled) || errors.Is(err, context.Canceled) || ctx.Err() != nil {
		// Ctrl-C: no result was printed and no file written.
		fmt.Fprintln(stderr, "sim: interrupted")
		return exitInterrupted
	}
	msg := strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "; ")
	var fo failOverError
	if errors.As(err, &fo) {
		fmt.Fprintln(stderr, "sim:", msg)
		return exitFailOver
	}
	var ue usageError
	if errors.As(err, &ue) || isCobraUsage(err) {
		// One line: the cause, then where to look.
		fmt.Fprintf(stderr, "sim: %s (see 'sim --help')\n", msg)
		return exitUsage
	}
	fmt.Fprintln(stderr, "sim:", msg)
	return exitError
}

// isCobraUsage recognises cobra's own argument errors (unknown command or
// flag, wrong argument count), which it returns as plain errors.
func isCobraUsage(err error) bool {
	s := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "accepts ", "requires at least", "requires exactly", "invalid argument", "flag needs an argument", "required flag"} {
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "sim",
		Short: "Plan and simulate memory-saving recomputation for deep-learning training",
		Long: `sim answers what-if questions about training memory: does model X fit on device Y,
at what cost, with which strategy (none, MXNet mirror, MegEngine sublinear search,
optimal chain checkpointing, DTR)? Every number comes from the remat simulator.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.PersistentFlags().StringVar(&a.format, "format", "table", "output format: table, markdown, csv or json")
	root.PersistentFlags().BoolVarP(&a.quiet, "quiet", "q", false, "no progress bar on stderr")
	_ = root.RegisterFlagCompletionFunc("format", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{"table", "markdown", "csv", "json"}, cobra.ShellCompDirectiveNoFileComp
	})
	a.addCommands(root)
	return root
}
