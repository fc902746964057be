package deadline_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience/deadline"
)

// A handler waiting on a slow dependency is released at the operation's
// 20 ms timeout. The world sees TIMEOUT; the outcome wraps what the
// handler returned.
func ExampleMiddleware() {
	mw := deadline.Middleware()
	inv := pipeline.NewInvocation(pipeline.Spec{
		Deadline:       time.Now().Add(20 * time.Millisecond),
		DeadlineSource: pipeline.DeadlineOperation,
	})
	_, err := mw.Invoke(context.Background(), inv, func(ctx context.Context, _ *pipeline.Invocation) (any, error) {
		<-ctx.Done() // a call that never answers
		return nil, fmt.Errorf("inventory: %w", ctx.Err())
	})
	fmt.Println("attributed:", pipelinetest.CodeOf(err))
	fmt.Println("original:", errors.Unwrap(err))
	// Output:
	// attributed: KERNEL_TIMEOUT_001
	// original: inventory: context deadline exceeded
}

// The caller goes away before the deadline: CANCELLED, however the handler
// reports it — here as a TIMEOUT of its own.
func ExampleMiddleware_callerCancels() {
	caller, hangUp := context.WithCancel(context.Background())
	inv := pipeline.NewInvocation(pipeline.Spec{Deadline: time.Now().Add(time.Minute)})
	_, err := deadline.Middleware().Invoke(caller, inv, func(ctx context.Context, _ *pipeline.Invocation) (any, error) {
		hangUp() // the client disconnects
		<-ctx.Done()
		return nil, pipeline.NewError(pipeline.KindTimeout, "SHOP_TIMEOUT_001", "Inventory did not answer.")
	})
	fmt.Println(pipelinetest.CodeOf(err))
	// Output:
	// KERNEL_CANCELLED_001
}

// A deadline already past on arrival ends the invocation before the handler
// runs.
func ExampleMiddleware_pastDeadline() {
	inv := pipeline.NewInvocation(pipeline.Spec{Deadline: time.Now().Add(-time.Second)})
	_, err := deadline.Middleware().Invoke(context.Background(), inv, func(context.Context, *pipeline.Invocation) (any, error) {
		fmt.Println("never printed")
		return nil, nil
	})
	fmt.Println(pipelinetest.CodeOf(err))
	// Output:
	// KERNEL_TIMEOUT_001
}
