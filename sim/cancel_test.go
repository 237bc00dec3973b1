package sim

import (
	"context"
	"errors"
	"testing"
)

func TestCanceled(t *testing.T) {
	if err := Canceled(context.Background(), "x"); err != nil {
		t.Fatalf("live context: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := Canceled(ctx, "search")
	if !errors.Is(err, ErrCanceled) || !errors.Is(err, context.Canceled) {
		t.Fatalf("want ErrCanceled and context.Canceled, got %v", err)
	}
	var ce *CanceledError
	if !errors.As(err, &ce) || ce.Stage != "search" {
		t.Fatalf("want *CanceledError for stage search, got %#v", err)
	}
	if got := err.Error(); got != "search canceled: context canceled" {
		t.Fatalf("message %q", got)
	}
}

func TestProgressNil(t *testing.T) {
	var p Progress
	p.Report(1, 2, "x") // a nil hook is valid
	n := 0
	p = func(done, total int, what string) { n += done }
	p.Report(3, 4, "y")
	if n != 3 {
		t.Fatalf("hook not called")
	}
}
