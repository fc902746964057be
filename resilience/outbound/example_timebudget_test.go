package outbound_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience/outbound"
)

// Two sequential calls share a 2 s deadline: 0.2 s is kept back for the
// reply and 0.5 s for billing while inventory runs, so inventory gets at
// most 1.3 s. Inventory takes 1.0 s; billing then gets the 0.8 s left
// before the margin. A third call at 1.9 s finds nothing left.
func ExampleBudget() {
	start := time.Now()
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(2*time.Second))
	defer cancel()

	// A clock the example moves by hand; a handler uses the default.
	now := start
	clock := outbound.WithClock(func() time.Time { return now })
	b, err := outbound.NewBudget(ctx, "orders.submit", outbound.WithMargin(200*time.Millisecond), clock)
	if err != nil {
		fmt.Println(err)
		return
	}
	inventory, _ := b.Timeout(outbound.Call{Dependency: "inventory", Reserve: 500 * time.Millisecond})
	fmt.Println("inventory:", inventory)

	now = start.Add(time.Second)
	billing, _ := b.Timeout(outbound.Call{Dependency: "billing"})
	fmt.Println("billing:", billing)

	now = start.Add(1900 * time.Millisecond)
	_, err = b.Timeout(outbound.Call{Dependency: "email"})
	e := pipeline.AsError(err)
	fmt.Println(e.Kind(), e.Code(), e.Details())
	// Output:
	// inventory: 1.3s
	// billing: 800ms
	// TIMEOUT KERNEL_TIMEOUT_002 map[allottedMs:0 cut:false dependency:email remainingMs:100 stage:orders.submit]
}

// Parallel calls split what is available with Share; a Cap bounds one call
// whatever the budget.
func ExampleCall() {
	start := time.Now()
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(time.Second))
	defer cancel()

	clock := outbound.WithClock(func() time.Time { return start })
	b, _ := outbound.NewBudget(ctx, "search", outbound.WithMargin(100*time.Millisecond), clock)
	for _, c := range []outbound.Call{
		{Dependency: "catalog", Share: 0.6},
		{Dependency: "reviews", Share: 0.4},
		{Dependency: "ads", Cap: 50 * time.Millisecond},
	} {
		d, _ := b.Timeout(c)
		fmt.Println(c.Dependency, d)
	}
	// Output:
	// catalog 540ms
	// reviews 360ms
	// ads 50ms
}

// Context derives the call's context: it ends at the allotment, never
// later than the handler's own deadline.
func ExampleBudget_Context() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, _ := outbound.NewBudget(ctx, "orders.submit", outbound.WithCallCap(20*time.Millisecond))

	callCtx, done, err := b.Context(ctx, outbound.Call{Dependency: "inventory"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer done()
	<-callCtx.Done() // inventory does not answer in 20 ms
	fmt.Println(pipelinetest.CodeOf(context.Cause(callCtx)), callCtx.Err())
	// Output:
	// KERNEL_TIMEOUT_002 context deadline exceeded
}
