package pipeline_test

import (
	"context"
	"fmt"

	"github.com/sundial-go/sundial/pipeline"
)

// The first middleware given to Chain is the outermost: it acts first on the
// invocation and last on the outcome.
func ExampleChain() {
	logging := func(name string) pipeline.Middleware {
		return pipeline.MiddlewareFunc(func(inv *pipeline.Invocation, next pipeline.Handler) error {
			fmt.Println(name, "before")
			err := next(inv)
			fmt.Println(name, "after:", pipeline.KindOf(err))
			return err
		})
	}
	handler := func(inv *pipeline.Invocation) error {
		fmt.Println("handler")
		return pipeline.NotFound("SHOP_NOT_FOUND_001", "no such order")
	}
	h := pipeline.Chain(handler, logging("outer"), logging("inner")) // compiled once
	_ = h(pipeline.NewInvocation(context.Background(), nil, nil))
	// Output:
	// outer before
	// inner before
	// handler
	// inner after: NOT_FOUND
	// outer after: NOT_FOUND
}
