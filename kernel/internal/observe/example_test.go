package observe_test

import (
	"context"
	"fmt"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sundial-go/sundial/kernel/internal/observe"
	"github.com/sundial-go/sundial/pipeline"
)

// The kernel observes every invocation this way: Start when it arrives,
// End with the outcome its caller is told. Given an SDK tracer provider
// (here one that records in memory) every invocation becomes a span named
// by its operation, carrying the attributed outcome.
func Example() {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer tp.Shutdown(context.Background())

	tel := observe.New(observe.WithTracerProvider(tp))
	o := tel.Operation(op("orders.get")) // once per operation

	inv := pipeline.NewInvocation(pipeline.Spec{Operation: op("orders.get")})
	ctx, call := o.Start(context.Background(), inv, time.Now())
	_ = ctx // the handler runs under ctx
	err := pipeline.NewError(pipeline.KindNotFound, "SHOP_NOT_FOUND_001", "Order 'ord-9' does not exist.")
	call.End(err, time.Now())
	fmt.Println("trace ID recorded:", call.TraceID() != "")

	s := spans.Ended()[0]
	fmt.Println("span:", s.Name(), s.Status().Code)
	for _, a := range s.Attributes() {
		fmt.Printf("  %s = %s\n", a.Key, a.Value.Emit())
	}
	// Output:
	// trace ID recorded: true
	// span: orders.get Error
	//   sundial.operation.id = orders.get
	//   sundial.protocol = inprocess
	//   sundial.outcome.kind = NOT_FOUND
	//   sundial.outcome.code = SHOP_NOT_FOUND_001
	//   sundial.priority = default
}
