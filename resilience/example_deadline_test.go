package resilience_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
)

// A handler waiting on a slow dependency is released at the operation's
// 20 ms timeout. The world sees TIMEOUT; the breaker inside sees the
// handler's own context ending, a cancellation.
func ExampleDeadlineMiddleware() {
	mw := resilience.NewDeadlineMiddleware(20*time.Millisecond, time.Minute)
	inv := pipeline.NewInvocation(context.Background(), nil, nil)
	err := mw.Invoke(inv, func(inv *pipeline.Invocation) error {
		<-inv.Context().Done() // a call that never answers
		return fmt.Errorf("inventory: %w", inv.Context().Err())
	})
	fmt.Println("attributed:", pipeline.CodeOf(err))
	fmt.Println("original:", pipeline.KindOf(inv.OriginalOutcome()))
	// Output:
	// attributed: KERNEL_TIMEOUT_001
	// original: CANCELLED
}

// The caller goes away before the deadline: CANCELLED, however the handler
// reports it — here as a TIMEOUT of its own.
func ExampleDeadlineMiddleware_callerCancels() {
	caller, hangUp := context.WithCancel(context.Background())
	inv := pipeline.NewInvocation(caller, nil, nil)
	inv.SetDeadline(time.Now().Add(time.Minute))
	err := resilience.NewDeadlineMiddleware(0, time.Minute).Invoke(inv, func(inv *pipeline.Invocation) error {
		hangUp() // the client disconnects
		<-inv.Context().Done()
		return pipeline.Timeout("SHOP_TIMEOUT_001", "Inventory did not answer.")
	})
	fmt.Println(pipeline.CodeOf(err))
	// Output:
	// KERNEL_CANCELLED_001
}

// A deadline already past on arrival ends the invocation before the handler
// runs.
func ExampleDeadlineMiddleware_pastDeadline() {
	inv := pipeline.NewInvocation(context.Background(), nil, nil)
	inv.SetDeadline(time.Now().Add(-time.Second))
	err := resilience.NewDeadlineMiddleware(0, time.Minute).Invoke(inv, func(*pipeline.Invocation) error {
		fmt.Println("never printed")
		return nil
	})
	fmt.Println(pipeline.CodeOf(err))
	// Output:
	// KERNEL_TIMEOUT_001
}
