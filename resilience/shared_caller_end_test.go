package resilience_test

import (
	"context"
	"testing"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience"
)

// pastDeadline is a context whose deadline has passed while its timer has
// not fired yet (Err is still nil) — the instant a shared limiter can see
// and a context.WithDeadline cannot be built at.
type pastDeadline struct{ context.Context }

func (pastDeadline) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

// endedWindow and endedSlots are shared limiters that saw the caller's
// deadline pass and returned the context's error for it.
type endedWindow struct{}

func (endedWindow) Take(context.Context, *pipeline.Invocation) (pipeline.Quota, error) {
	return pipeline.Quota{}, context.DeadlineExceeded
}

type endedSlots struct{}

func (endedSlots) Acquire(context.Context, *pipeline.Invocation) (func(), error) {
	return nil, context.DeadlineExceeded
}

// TestSharedLimiterCallerDeadlineIsTimeout: when a shared window or shared
// slots return the context's deadline error because the caller's deadline
// passed (before ctx's own timer fired), the call is told TIMEOUT — its
// own deadline — not that it was rate (_002) or concurrency (_003)
// limited. The same error while the deadline has not passed is not the
// caller's end and stays a rejection.
func TestSharedLimiterCallerDeadlineIsTimeout(t *testing.T) {
	p := resilience.Policy{Scope: resilience.ScopeCluster, PermitLimit: 10, Window: time.Second, ConcurrencyLimit: 1}
	for _, tc := range []struct {
		name string
		opt  resilience.Option
		live string // the code when the deadline has not passed
	}{
		{"window", resilience.WithSharedWindow(endedWindow{}), resilience.CodeRateLimited},
		{"slots", resilience.WithSharedSlots(endedSlots{}), resilience.CodeConcurrencyLimited},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pol := p
			if tc.name == "window" {
				pol.ConcurrencyLimit = 0
			} else {
				pol.PermitLimit, pol.Window = 0, 0
			}
			mw := resilience.NewLimits("billing.charge", pol, tc.opt)
			ran := false
			h := func(context.Context, *pipeline.Invocation) (any, error) { ran = true; return nil, nil }
			inv := pipelinetest.NewInvocation(pipeline.Spec{Operation: pipelinetest.Operation("billing.charge")})
			_, err := mw.Invoke(pastDeadline{context.Background()}, inv, h)
			if pipelinetest.CodeOf(err) != pipeline.CodeTimeout || ran {
				t.Errorf("deadline passed: %v (ran %v), want %s", err, ran, pipeline.CodeTimeout)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
			defer cancel()
			if _, err := mw.Invoke(ctx, inv, h); pipelinetest.CodeOf(err) != tc.live {
				t.Errorf("deadline live: %v, want %s", err, tc.live)
			}
		})
	}
}
