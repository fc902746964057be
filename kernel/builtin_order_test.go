package kernel_test

import (
	"context"
	"testing"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/pipeline"
)

// TestDeadlineFirstInResilienceStage: the DeadlineMiddleware is the first
// middleware of the Resilience stage, ahead of application middleware
// registered there, which already runs under the invocation's deadline;
// Diagnostics middleware runs outside it.
func TestDeadlineFirstInResilienceStage(t *testing.T) {
	var hasDeadline, ran, outsideHasDeadline bool
	k, err := kernel.New(
		kernel.WithRegistry(newRegistry(t, nil)),
		kernel.WithConfigJSON([]byte(`{"Sundial":{"Kernel":{"Resilience":{"Operations":{"test.echo":{"TimeoutSeconds":5}}}}}}`)),
		kernel.UseAt(pipeline.StageDiagnostics, pipeline.MiddlewareFunc(func(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
			_, outsideHasDeadline = ctx.Deadline()
			return next(ctx, inv)
		})),
		kernel.UseAt(pipeline.StageResilience, pipeline.MiddlewareFunc(func(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
			ran = true
			_, hasDeadline = ctx.Deadline()
			return next(ctx, inv)
		})))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kernel.Call[echoIn, echoOut](context.Background(), k, "test.echo", echoIn{Text: "hi"}); err != nil {
		t.Fatalf("Call: %v", err)
	}
	if !ran || !hasDeadline {
		t.Errorf("Resilience middleware ran = %v, its context had a deadline = %v; want true, true (inside the DeadlineMiddleware)", ran, hasDeadline)
	}
	if outsideHasDeadline {
		t.Error("Diagnostics middleware's context had a deadline under Call; want none (it runs outside the DeadlineMiddleware, and Call has no guard)")
	}
}
