package pipelinetest_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

// Test a middleware: record what the handler behind it was given and what
// it returned, and what the middleware logged.
func Example() {
	logs := new(pipelinetest.LogSink)
	logger := logs.Logger()
	audit := pipeline.MiddlewareFunc(func(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
		out, err := next(ctx, inv)
		logger.Info("audit", "operation", inv.OperationID(), "code", pipelinetest.CodeOf(err))
		return out, err
	})

	rec := new(pipelinetest.Recorder)
	h := pipeline.Chain(pipelinetest.Handler(nil, pipeline.NewError(pipeline.KindNotFound, "SHOP_NOT_FOUND_001", "no such order")), audit, rec)
	inv := pipelinetest.NewInvocation(pipeline.Spec{
		Operation:      pipelinetest.Operation("orders.get"),
		CallerDeadline: time.Now().Add(time.Minute),
	})
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(time.Minute))
	defer cancel()
	_, _ = h(ctx, inv)

	call, _ := rec.Last()
	fmt.Println("handler had a deadline:", call.HasDeadline)
	fmt.Println("handler returned:", pipelinetest.CodeOf(call.Err))
	fmt.Println("source:", call.Invocation.Timing().Source)
	for _, r := range logs.Find(pipelinetest.Message("audit")) {
		fmt.Println("logged:", r.Attrs["operation"], r.Attrs["code"])
	}
	// Output:
	// handler had a deadline: true
	// handler returned: SHOP_NOT_FOUND_001
	// source: caller
	// logged: orders.get SHOP_NOT_FOUND_001
}
