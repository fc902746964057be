package client_test

import (
	"context"
	"fmt"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/kernel/client"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

type Charge struct {
	OrderID string `json:"orderId"`
	Amount  int    `json:"amount"`
}

type Receipt struct {
	ID string `json:"id"`
}

// register registers billing.charge on reg.
func register(reg *operations.Registry) error {
	return operations.Register(reg, operations.Descriptor{ID: "billing.charge", Method: "POST", Path: "/charges"},
		func(_ context.Context, in Charge) (Receipt, error) {
			if in.Amount <= 0 {
				return Receipt{}, pipeline.NewError(pipeline.KindValidation, "BILLING_VALIDATION_001",
					"The amount must be positive.").WithDetail("field", "amount")
			}
			return Receipt{ID: "chg-" + in.OrderID}, nil
		})
}

// A typed client of billing.charge. Here its transport is a kernel in the
// same binary; httpadapter.ClientTransport and the gRPC adapter's
// ClientTransport give the same client over the network, and the call
// site stays as it is.
func Example() {
	reg := operations.NewRegistry()
	if err := register(reg); err != nil {
		panic(err)
	}
	k, err := kernel.New(kernel.WithRegistry(reg))
	if err != nil {
		panic(err)
	}
	charge, err := client.New[Charge, Receipt](client.Local(k), "billing.charge")
	if err != nil {
		panic(err)
	}

	r, err := charge.Call(context.Background(), Charge{OrderID: "o-1", Amount: 30})
	fmt.Println(r.ID, err)

	_, err = charge.Call(context.Background(), Charge{OrderID: "o-2"})
	e := pipeline.AsError(err)
	fmt.Println(e.Kind(), e.Code(), e.Details()["field"])
	// Output:
	// chg-o-1 <nil>
	// VALIDATION BILLING_VALIDATION_001 amount
}
