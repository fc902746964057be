package kernel_test

import (
	"context"
	"fmt"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

// A per-key limit: at most two orders per tenant per minute, the tenant
// taken from the caller's baggage (the W3C baggage header over HTTP, the
// baggage metadata over gRPC). With "Scope": "cluster" and Redis
// configured, the same keys count across every replica.
func Example_perKeyLimit() {
	reg := operations.NewRegistry()
	if err := operations.Register(reg, operations.Descriptor{ID: "orders.create"}, func(context.Context, string) (string, error) {
		return "created", nil
	}); err != nil {
		panic(err)
	}
	k, err := kernel.New(kernel.WithRegistry(reg), kernel.WithConfigJSON([]byte(`{"Sundial":{"Kernel":{"Resilience":{
		"Operations":{"orders.create":{"PerKey":{"PermitLimit":2,"WindowSeconds":60,"Baggage":"tenant"}}}}}}}`)))
	if err != nil {
		panic(err)
	}
	defer k.Close()
	for _, tenant := range []string{"acme", "acme", "acme", "globex", "bad{key}"} {
		out := k.Operations()[0].Invoke(withTenant(tenant), kernel.Unary{Input: new("widget")})
		if out.Err != nil {
			fmt.Println(tenant+":", pipelinetest.KindOf(out.Err), pipelinetest.CodeOf(out.Err))
			continue
		}
		fmt.Println(tenant+":", out.Output)
	}
	// Output:
	// acme: created
	// acme: created
	// acme: UNAVAILABLE KERNEL_UNAVAILABLE_002
	// globex: created
	// bad{key}: VALIDATION KERNEL_VALIDATION_008
}
