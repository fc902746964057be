package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

// The first middleware given to Chain is the outermost: it acts first on the
// invocation and last on the outcome.
func ExampleChain() {
	logging := func(name string) pipeline.Middleware {
		return pipeline.MiddlewareFunc(func(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
			fmt.Println(name, "before")
			out, err := next(ctx, inv)
			fmt.Println(name, "after:", pipelinetest.KindOf(err))
			return out, err
		})
	}
	handler := func(ctx context.Context, inv *pipeline.Invocation) (any, error) {
		fmt.Println("handler")
		return nil, pipeline.NewError(pipeline.KindNotFound, "SHOP_NOT_FOUND_001", "no such order")
	}
	h := pipeline.Chain(handler, logging("outer"), logging("inner")) // composed once
	_, _ = h(context.Background(), pipeline.NewInvocation(pipeline.Spec{Route: "GET /orders/{id}"}))
	// Output:
	// outer before
	// inner before
	// handler
	// inner after: NOT_FOUND
	// outer after: NOT_FOUND
}

// An Error never changes: the With methods return copies.
func ExampleError_WithDetail() {
	base := pipeline.NewError(pipeline.KindUnavailable, "SHOP_UNAVAILABLE_001", "The payment provider is down.")
	e := base.WithDetail("provider", "acme").WithRetryAfter(1500 * time.Millisecond)
	secs, _ := pipelinetest.RetryAfterSeconds(e)
	fmt.Println(e.Details(), secs)
	fmt.Println(base.Details() == nil)
	// Output:
	// map[provider:acme] 2
	// true
}

// AsError never overwrites an outcome's code, and turns anything else into
// an outcome a caller may see.
func ExampleAsError() {
	notFound := pipeline.NewError(pipeline.KindNotFound, "SHOP_NOT_FOUND_001", "no such order")
	fmt.Println(pipeline.AsError(fmt.Errorf("lookup: %w", notFound)).Code())
	fmt.Println(pipeline.AsError(context.DeadlineExceeded).Code())
	foreign := pipeline.AsError(errors.New("pq: password authentication failed"))
	fmt.Println(foreign.Kind(), foreign.Message())
	// Output:
	// SHOP_NOT_FOUND_001
	// KERNEL_TIMEOUT_001
	// UNEXPECTED An unexpected error occurred.
}
