package resilience_test

import (
	"context"
	"fmt"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience"
)

// checkout is the operation of ExampleShed.
type checkoutOp struct{}

func (checkoutOp) OperationID() string { return "shop.checkout" }

// A critical operation with one slot: while a checkout holds it, a call
// its caller lowered to sheddable is shed with KERNEL_UNAVAILABLE_008 and
// a retry-after, and the breaker does not count it.
func ExampleShed() {
	limits := resilience.NewLimits("shop.checkout", resilience.Policy{
		ConcurrencyLimit: 1, FailureThreshold: 1, Priority: pipeline.PriorityCritical,
	})
	call := func(p pipeline.Priority) *pipeline.Invocation {
		return pipeline.NewInvocation(pipeline.Spec{Operation: checkoutOp{}, Priority: p})
	}
	ctx := context.Background()
	_, _ = limits.Invoke(ctx, call(pipeline.PriorityCritical), func(ctx context.Context, _ *pipeline.Invocation) (any, error) {
		// The checkout holds the slot: a prefetch arriving now is shed.
		_, err := limits.Invoke(ctx, call(pipeline.PrioritySheddable), nil)
		e := pipeline.AsError(err)
		retry, _ := pipelinetest.RetryAfterSeconds(e)
		fmt.Println(e.Kind(), e.Code(), "retry after", retry)
		fmt.Println(e.Message())
		return "paid", nil
	})
	st := limits.State()
	fmt.Printf("shed %d, breaker %s\n", st.Rejections.Shed, st.Breaker)
	// Output:
	// UNAVAILABLE KERNEL_UNAVAILABLE_008 retry after 1
	// Operation 'shop.checkout' is shedding sheddable calls under load; retry after 1 second.
	// shed 1, breaker closed
}
