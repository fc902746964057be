package kernel_test

import (
	"context"
	"testing"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// TestDeadlineFirstInResilienceStage: the DeadlineMiddleware is the first
// middleware of the Resilience stage, ahead of a framework built-in added
// there with WithBuiltIn, so that built-in already runs under the
// invocation's deadline.
func TestDeadlineFirstInResilienceStage(t *testing.T) {
	var hasDeadline, ran bool
	k, err := kernel.New(
		kernel.WithRegistry(newRegistry(t, nil)),
		kernel.WithConfigJSON([]byte(`{"Sundial":{"Kernel":{"Resilience":{"Operations":{"test.echo":{"TimeoutSeconds":5}}}}}}`)),
		kernel.WithBuiltIn(pipeline.StageResilience, func(_ *kernel.Kernel, _ *operations.Descriptor) pipeline.Middleware {
			return pipeline.MiddlewareFunc(func(inv *pipeline.Invocation, next pipeline.Handler) error {
				ran = true
				_, hasDeadline = inv.Context().Deadline()
				return next(inv)
			})
		}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kernel.Call[echoIn, echoOut](context.Background(), k, "test.echo", echoIn{Text: "hi"}); err != nil {
		t.Fatalf("Call: %v", err)
	}
	if !ran || !hasDeadline {
		t.Errorf("Resilience built-in ran = %v, its context had a deadline = %v; want true, true (inside the DeadlineMiddleware)", ran, hasDeadline)
	}
}
