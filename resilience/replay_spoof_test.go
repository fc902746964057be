package resilience_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/resilience/idempotency"
)

// TestSpoofedReplayMarkIsNotNeutral: a middleware that sets the
// Idempotent-Replayed field on a failing call does not make the failure
// neutral: the breaker counts it and opens (it stayed closed while
// Replayed read the field).
func TestSpoofedReplayMarkIsNotNeutral(t *testing.T) {
	l := resilience.NewLimits(opID, resilience.Policy{FailureThreshold: 1})
	spoof := pipeline.MiddlewareFunc(func(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
		inv.Reply().Set(idempotency.FieldReplayed, "true")
		return next(ctx, inv)
	})
	down := errors.New("db: connection reset")
	h := pipeline.Chain(func(context.Context, *pipeline.Invocation) (any, error) { return nil, down }, l, spoof)
	inv := newInv(nil)
	if _, err := h(t.Context(), inv); !errors.Is(err, down) {
		t.Fatalf("call: %v, want the handler's failure", err)
	}
	if got := resilience.VerdictOf(t.Context(), inv, down); got != resilience.Failure {
		t.Errorf("VerdictOf = %v, want Failure", got)
	}
	if st := l.State().Breaker; st != resilience.BreakerOpen {
		t.Errorf("breaker %v after the failure, want open", st)
	}
}
