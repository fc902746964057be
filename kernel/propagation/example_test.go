package propagation_test

import (
	"context"
	"fmt"
	"net/http"

	"go.opentelemetry.io/otel/trace"

	"github.com/sundial-go/sundial/kernel/propagation"
	"github.com/sundial-go/sundial/pipeline"
)

// An adapter extracts the caller's trace context and baggage before the
// kernel makes the invocation, so the invocation's span continues the
// caller's trace and middleware reads the baggage from the invocation.
func ExampleExtractHTTP() {
	h := http.Header{}
	h.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	h.Set("baggage", "sundial.idempotency-key=order-42")

	ctx := propagation.ExtractHTTP(context.Background(), h)
	inv := pipeline.NewInvocation(pipeline.Spec{
		Baggage:        propagation.Baggage(ctx, nil),
		IdempotencyKey: propagation.IdempotencyKey(ctx), // as the kernel's edge does
	})

	fmt.Println("trace:", trace.SpanContextFromContext(ctx).TraceID())
	fmt.Println("idempotency key:", inv.IdempotencyKey())
	// Output:
	// trace: 4bf92f3577b34da6a3ce929d0e0e4736
	// idempotency key: order-42
}
