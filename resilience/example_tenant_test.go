package resilience_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
)

// TenantRateLimit is application middleware that limits each tenant
// separately, on top of the operation's own limits: permits per window per
// tenant, keyed by the "tenant" baggage the caller sends.
//
// The tenant is resolved properly only at the Tenant stage, later in the
// pipeline; here the caller's own claim is good enough to share capacity
// fairly, and it is never used to authorise anything.
type TenantRateLimit struct {
	limits *resilience.KeyedFixedWindow
}

// NewTenantRateLimit returns the middleware; it fails on the values
// NewKeyedFixedWindow refuses.
func NewTenantRateLimit(permits int, window time.Duration) (*TenantRateLimit, error) {
	l, err := resilience.NewKeyedFixedWindow(permits, window, 0)
	if err != nil {
		return nil, err
	}
	return &TenantRateLimit{limits: l}, nil
}

// Invoke implements pipeline.Middleware.
func (m *TenantRateLimit) Invoke(inv *pipeline.Invocation, next pipeline.Handler) error {
	tenant, ok := inv.Baggage("tenant")
	if !ok {
		tenant = "anonymous"
	}
	retryAfter, err := m.limits.Wait(inv.Context(), tenant)
	switch {
	case errors.Is(err, resilience.ErrLimited):
		// KERNEL_UNAVAILABLE_002: a 503 with Retry-After on HTTP, and not
		// a failure for the operation's circuit breaker — one noisy
		// tenant must not open it for everybody.
		return resilience.RateLimited(inv.OperationID(), retryAfter).WithDetail("tenant", tenant)
	case err != nil:
		return err // the invocation's context ended; the DeadlineMiddleware says why
	}
	return next(inv)
}

// Example_tenantRateLimit registers TenantRateLimit at the end of the
// Resilience stage — after the built-in deadline, breaker and limits — and
// lets two tenants call the same operation.
func Example_tenantRateLimit() {
	reg := operations.NewRegistry()
	_ = operations.Register(reg, operations.Descriptor{ID: "orders.create"},
		func(context.Context, string) (string, error) { return "created", nil })

	perTenant, err := NewTenantRateLimit(2, time.Minute)
	if err != nil {
		panic(err)
	}
	k, err := kernel.New(
		kernel.WithRegistry(reg),
		kernel.WithConfigJSON([]byte(`{"Sundial":{"Kernel":{"Resilience":{
			"Operations":{"orders.create":{"PermitLimit":100,"WindowSeconds":60}}}}}}`)),
		kernel.UseAt(pipeline.StageResilience, perTenant),
	)
	if err != nil {
		panic(err)
	}
	d, _ := k.Lookup("orders.create")
	for _, tenant := range []string{"acme", "acme", "acme", "globex"} {
		inv := pipeline.NewInvocation(context.Background(), d, "widget")
		inv.SetBaggage("tenant", tenant)
		if err := k.Invoke(inv); err != nil {
			e := pipeline.AsError(err)
			t, _ := e.Detail("tenant")
			fmt.Printf("%s: %s %s (tenant %v)\n", tenant, e.Kind, e.Code, t)
			continue
		}
		fmt.Printf("%s: %v\n", tenant, inv.Output())
	}
	// Output:
	// acme: created
	// acme: created
	// acme: UNAVAILABLE KERNEL_UNAVAILABLE_002 (tenant acme)
	// globex: created
}

// ExampleNewResilienceMiddleware shows an operation's limits on their own:
// one call at a time, nobody waiting.
func ExampleNewResilienceMiddleware() {
	limits := resilience.NewResilienceMiddleware("reports.export", resilience.Policy{ConcurrencyLimit: 1})
	chain := pipeline.Chain(func(inv *pipeline.Invocation) error {
		// While the first export runs, a second one arrives.
		second := pipeline.NewInvocation(context.Background(), inv.Operation(), nil)
		err := limits.Invoke(second, func(*pipeline.Invocation) error { return nil })
		fmt.Println("second export:", pipeline.AsError(err).Message)
		fmt.Println("in flight:", limits.InFlight())
		return nil
	}, resilience.NewDeadlineMiddleware(time.Minute, 0), limits)

	err := chain(pipeline.NewInvocation(context.Background(), op("reports.export"), nil))
	fmt.Println("first export:", err, "- in flight after:", limits.InFlight())
	// Output:
	// second export: Operation 'reports.export' has too many calls in progress; retry later.
	// in flight: 1
	// first export: <nil> - in flight after: 0
}
