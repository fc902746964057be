package outbound_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience/outbound"
)

// A dependency answers UNAVAILABLE twice, then succeeds: Do retries it
// within the deadline and the budget, and the caller sees the success.
func Example() {
	p := outbound.DefaultPolicy()
	p.BackoffBase, p.BackoffMax = time.Millisecond, 4*time.Millisecond
	billing, err := outbound.New("billing", p)
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	attempts := 0
	err = billing.Do(ctx, func(ctx context.Context) error {
		attempts++
		if attempts < 3 {
			return pipeline.NewError(pipeline.KindUnavailable, "BILLING_UNAVAILABLE_001", "billing is restarting")
		}
		return nil // the real call, made with ctx, goes here
	})
	fmt.Println(attempts, err)

	// A caller fault is never retried.
	attempts = 0
	err = billing.Do(ctx, func(context.Context) error {
		attempts++
		return pipeline.NewError(pipeline.KindValidation, "BILLING_VALIDATION_001", "no such card")
	})
	fmt.Println(attempts, pipelinetest.CodeOf(err))
	// Output:
	// 3 <nil>
	// 1 BILLING_VALIDATION_001
}
