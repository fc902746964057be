package resilience_test

import (
	"context"
	"testing"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
)

// countingLimit admits every call and counts its permits; its TryAcquire
// method makes the leading ones decide on arrival.
type countingLimit struct {
	acquired, released int
	last               resilience.Outcome
}

func (c *countingLimit) Acquire(context.Context, *pipeline.Invocation) (resilience.Permit, error) {
	c.acquired++
	return resilience.NewPermit(c), nil
}

func (c *countingLimit) Release(o resilience.Outcome) { c.released++; c.last = o }

// TestMoreLimitsThanInline: an operation with more limits than a call
// holds inline (8) is built (it panicked) and each limit gives its permit
// back once, with the handler's outcome.
func TestMoreLimitsThanInline(t *testing.T) {
	for _, n := range []int{1, 8, 9, 20} {
		lims := make([]*countingLimit, n)
		opts := make([]resilience.Option, n)
		for i := range lims {
			lims[i] = new(countingLimit)
			opts[i] = resilience.WithLimit(lims[i])
		}
		l := resilience.NewLimits(opID, resilience.Policy{}, opts...)
		ran := 0
		h := pipeline.Chain(func(context.Context, *pipeline.Invocation) (any, error) { ran++; return "ok", nil }, l)
		for range 3 {
			if err := callLimited(t.Context(), h); err != nil {
				t.Fatalf("%d limits: %v", n, err)
			}
		}
		for i, c := range lims {
			if c.acquired != 3 || c.released != 3 || !c.last.Ran || c.last.Verdict != resilience.Success {
				t.Errorf("%d limits: limit %d acquired %d released %d (last %+v), want 3, 3, a success that ran", n, i, c.acquired, c.released, c.last)
			}
		}
		if ran != 3 {
			t.Errorf("%d limits: the handler ran %d times, want 3", n, ran)
		}
	}
}
