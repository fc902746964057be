package operations_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"

	"github.com/sundial-go/sundial/operations"
)

// placeOrder declares its constraints once, in validate tags.
type placeOrder struct {
	Name     string `json:"name" validate:"required,min=1,max=100"`
	Amount   int    `json:"amount" validate:"min=1,max=10000"`
	Currency string `json:"currency" validate:"oneof=EUR USD"`
}

type placed struct {
	ID string `json:"id"`
}

// ExampleDescriptor_CheckConstraints: an input with two fields wrong is
// one outcome listing both, by JSON name, with the rule each breaks; the
// rules themselves, as the CLI's help and the gRPC schema show them.
func ExampleDescriptor_CheckConstraints() {
	reg := operations.NewRegistry()
	err := operations.Register(reg, operations.Descriptor{ID: "orders.place"},
		func(context.Context, placeOrder) (placed, error) { return placed{ID: "o-1"}, nil })
	if err != nil {
		panic(err)
	}
	d, _ := reg.Lookup("orders.place")
	perr := d.CheckConstraints(&placeOrder{Name: "Ada", Amount: 0, Currency: "GBP"})
	fmt.Println(perr.Code())
	for _, v := range perr.Details()[operations.DetailViolations].([]operations.Violation) {
		fmt.Printf("%s %s: %s\n", v.Field, v.Rule, v.Message)
	}
	for f := range reflect.TypeFor[placeOrder]().Fields() {
		rules, mustGive := d.FieldRules(f)
		fmt.Printf("%s (must give: %v): %s\n", f.Name, mustGive, rules)
	}
	// Output:
	// KERNEL_VALIDATION_007
	// amount min: must be at least 1.
	// currency oneof: must be one of: EUR USD.
	// Name (must give: true): required; at least 1 character; at most 100 characters
	// Amount (must give: true): at least 1; at most 10000
	// Currency (must give: true): one of EUR USD
}

// ExampleRegistry_AddRule: a named rule, registered once on the registry,
// is used in tags like a built-in one.
func ExampleRegistry_AddRule() {
	reg := operations.NewRegistry()
	err := reg.AddRule("sku", "three capitals, a hyphen and digits (ABC-123)", func(v reflect.Value, _ string) bool {
		head, digits, ok := strings.Cut(v.String(), "-")
		return ok && len(head) == 3 && strings.ToUpper(head) == head && digits != "" && strings.Trim(digits, "0123456789") == ""
	})
	if err != nil {
		panic(err)
	}
	type restock struct {
		SKU string `json:"sku" validate:"sku"`
	}
	err = operations.Register(reg, operations.Descriptor{ID: "stock.add"},
		func(context.Context, restock) (struct{}, error) { return struct{}{}, nil })
	if err != nil {
		panic(err)
	}
	d, _ := reg.Lookup("stock.add")
	fmt.Println(d.CheckConstraints(&restock{SKU: "ABC-123"}) == nil)
	fmt.Println(d.CheckConstraints(&restock{SKU: "abc"}).Message())
	// Output:
	// true
	// Field 'sku': must satisfy sku: three capitals, a hyphen and digits (ABC-123).
}
