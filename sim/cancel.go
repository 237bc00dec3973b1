package sim

import (
	"context"
	"errors"
	"fmt"
)

// ErrCanceled is the one cancellation rule of every planner and search in
// remat (mirror, sublinear, chain, dtr and the strategy table): when the
// context is done before the work finishes, the function returns the best
// plan (or result) it has found so far, which is valid and may be used, together
// with an error that matches ErrCanceled under errors.Is. The error also
// matches the context's own error (context.Canceled or
// context.DeadlineExceeded). When nothing usable was found yet, the plan is
// nil and the error is the same.
var ErrCanceled = errors.New("canceled")

// CanceledError is the error type behind ErrCanceled: Cause is the
// context's error and Stage names what was interrupted.
type CanceledError struct {
	Stage string
	Cause error
}

func (e *CanceledError) Error() string {
	if e.Stage == "" {
		return fmt.Sprintf("canceled: %v", e.Cause)
	}
	return fmt.Sprintf("%s canceled: %v", e.Stage, e.Cause)
}

// Is reports whether target is ErrCanceled.
func (e *CanceledError) Is(target error) bool { return target == ErrCanceled }

// Unwrap returns the context's error.
func (e *CanceledError) Unwrap() error { return e.Cause }

// Canceled returns a *CanceledError naming stage when ctx is done, else nil.
// Planners call it at their checkpoints: if err := sim.Canceled(ctx,
// "sublinear search"); err != nil { return best, err }.
func Canceled(ctx context.Context, stage string) error {
	if ctx == nil {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return &CanceledError{Stage: stage, Cause: err}
	}
	return nil
}

// Progress is the one progress hook of long work (searches, sweeps, the
// genetic algorithm, DTR replays): it is told that done of total units are
// finished, with a short description of the current unit. total may be 0
// when unknown. A nil Progress is valid and means no reporting. It is called
// from the goroutine that runs the work, never concurrently, and must be cheap.
type Progress func(done, total int, what string)

// Report calls p when it is not nil.
func (p Progress) Report(done, total int, what string) {
	if p != nil {
		p(done, total, what)
	}
}
