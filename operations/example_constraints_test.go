package operations_test

import (
	"fmt"

	"github.com/sundial-go/sundial/operations"
)

// ExampleCheckConstraints: an input with two fields wrong is one outcome
// listing both, by JSON name, with the rule each breaks.
func ExampleCheckConstraints() {
	type placeOrder struct {
		Amount   int    `json:"amount" validate:"min=1,max=10000"`
		Currency string `json:"currency" validate:"oneof=EUR USD"`
	}
	err := operations.CheckConstraints(&placeOrder{Amount: 0, Currency: "GBP"})
	fmt.Println(err.Code())
	for _, v := range err.Details()[operations.DetailViolations].([]operations.Violation) {
		fmt.Printf("%s %s: %s\n", v.Field, v.Rule, v.Message)
	}
	// Output:
	// KERNEL_VALIDATION_007
	// amount min: must be at least 1.
	// currency oneof: must be one of: EUR USD.
}
