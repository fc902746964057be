package telemetry_test

import (
	"context"
	"fmt"
	"net/http"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/kernel/telemetry"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// The kernel registers the Diagnostics middleware by default; give it an
// SDK tracer provider (here one that records in memory) and every
// invocation becomes a span named by its operation, carrying the
// attributed outcome.
func Example() {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer tp.Shutdown(context.Background())

	reg := operations.NewRegistry()
	_ = operations.Register(reg, operations.Descriptor{ID: "orders.get"}, func(_ context.Context, id string) (string, error) {
		return "", pipeline.NotFound("SHOP_NOT_FOUND_001", "Order '"+id+"' does not exist.")
	})
	k, err := kernel.New(kernel.WithRegistry(reg), kernel.WithTracerProvider(tp))
	if err != nil {
		panic(err)
	}
	_, err = kernel.Call[string, string](context.Background(), k, "orders.get", "ord-9")
	fmt.Println("outcome:", pipeline.CodeOf(err))

	s := spans.Ended()[0]
	fmt.Println("span:", s.Name(), s.Status().Code)
	for _, a := range s.Attributes() {
		if a.Key == telemetry.AttrDeadline {
			continue // the effective deadline: now + the kernel's 5-minute cap
		}
		fmt.Printf("  %s = %s\n", a.Key, a.Value.Emit())
	}
	// Output:
	// outcome: SHOP_NOT_FOUND_001
	// span: orders.get Error
	//   sundial.operation.id = orders.get
	//   sundial.protocol = inprocess
	//   sundial.outcome.kind = NOT_FOUND
	//   sundial.outcome.code = SHOP_NOT_FOUND_001
}

// An adapter extracts the caller's trace context and baggage before it
// builds the invocation, so the invocation's span continues the caller's
// trace and handlers read the baggage from the invocation.
func ExampleExtractHTTP() {
	h := http.Header{}
	h.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	h.Set("baggage", "sundial.idempotency-key=order-42")

	ctx := telemetry.ExtractHTTP(context.Background(), h)
	inv := pipeline.NewInvocation(ctx, nil, nil)
	telemetry.CopyBaggage(ctx, inv, nil)

	fmt.Println("trace:", telemetry.TraceID(inv))
	fmt.Println("idempotency key:", inv.IdempotencyKey())
	// Output:
	// trace: 4bf92f3577b34da6a3ce929d0e0e4736
	// idempotency key: order-42
}
