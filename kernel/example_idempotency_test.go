package kernel_test

import (
	"context"
	"fmt"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/kernel/propagation"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

type Payment struct {
	Amount int `json:"amount"`
}

type Receipt struct {
	ChargeID string `json:"chargeId"`
}

// Idempotency keys (docs/idempotency.md): billing.charge takes them, so a
// call repeated with the same key gets the first call's outcome, marked as
// a replay, and the card is charged once; the same key with another input
// is refused. In-process the key travels in the context's baggage — the
// same place a key sent by HTTP, gRPC or the CLI ends up.
func Example_idempotencyKeys() {
	charges := 0
	reg := operations.NewRegistry()
	err := operations.Register(reg, operations.Descriptor{ID: "billing.charge"},
		func(ctx context.Context, in Payment) (Receipt, error) {
			charges++
			return Receipt{ChargeID: fmt.Sprintf("ch-%d", charges)}, nil
		})
	if err != nil {
		panic(err)
	}
	k, err := kernel.New(kernel.WithRegistry(reg), kernel.WithConfigJSON([]byte(
		`{"Sundial":{"Kernel":{"Resilience":{"Operations":{"billing.charge":{"Idempotency":{"RetentionSeconds":86400}}}}}}}`)))
	if err != nil {
		panic(err)
	}
	ctx, _ := propagation.WithIdempotencyKey(context.Background(), "order-42")
	for _, amount := range []int{30, 30, 31} {
		// An adapter takes the handles at mount time; this kernel has one.
		o := k.Operations()[0].Handle(ctx, kernel.Unary{Input: &Payment{Amount: amount}})
		if o.Err != nil {
			fmt.Printf("amount %d: %s %s\n", amount, pipelinetest.KindOf(o.Err), pipelinetest.CodeOf(o.Err))
			continue
		}
		fmt.Printf("amount %d: %s replayed=%v\n", amount, o.Output.(Receipt).ChargeID, o.Invocation.Reply().Replayed())
	}
	fmt.Println("charges:", charges)
	// Output:
	// amount 30: ch-1 replayed=false
	// amount 30: ch-1 replayed=true
	// amount 31: UNPROCESSABLE KERNEL_UNPROCESSABLE_001
	// charges: 1
}
