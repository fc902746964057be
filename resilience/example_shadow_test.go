package resilience_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
)

// ExampleLimits_shadow tries a limit of 2 calls a minute in shadow mode:
// all 5 calls run, and the limits count the 3 they would have turned away.
func ExampleLimits_shadow() {
	l := resilience.NewLimits("orders.create", resilience.Policy{PermitLimit: 2, Window: time.Minute, Shadow: true})
	ran := 0
	h := pipeline.Chain(func(context.Context, *pipeline.Invocation) (any, error) {
		ran++
		return nil, nil
	}, l)
	for range 5 {
		if _, err := h(context.Background(), pipeline.NewInvocation(pipeline.Spec{})); err != nil {
			fmt.Println(err)
		}
	}
	st := l.State()
	fmt.Printf("ran %d, rejected %d, would have rejected %d\n", ran, st.Rejections.Rate, st.Shadowed.Rate)
	// Output: ran 5, rejected 0, would have rejected 3
}
