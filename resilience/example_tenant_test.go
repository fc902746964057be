package resilience_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/resilience/deadline"
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
func (m *TenantRateLimit) Invoke(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
	tenant, ok := inv.Baggage("tenant")
	if !ok {
		tenant = "anonymous"
	}
	retryAfter, err := m.limits.Wait(ctx, tenant)
	switch {
	case errors.Is(err, resilience.ErrLimited):
		// KERNEL_UNAVAILABLE_002: a 503 with Retry-After on HTTP, and
		// neutral for the operation's circuit breaker — one noisy tenant
		// must not open it for everybody.
		return nil, resilience.RateLimited(inv.OperationID(), retryAfter).WithDetail("tenant", tenant)
	case err != nil:
		return nil, err // the invocation's context ended; the deadline middleware says why
	}
	return next(ctx, inv)
}

// Example_tenantRateLimit places TenantRateLimit after the built-in
// deadline, breaker and limits of the Resilience stage — where the kernel
// puts middleware registered with UseAt(pipeline.StageResilience, ...) —
// and lets two tenants call the same operation.
func Example_tenantRateLimit() {
	perTenant, err := NewTenantRateLimit(2, time.Minute)
	if err != nil {
		panic(err)
	}
	limits := resilience.NewLimits("orders.create", resilience.Policy{PermitLimit: 100, Window: time.Minute})
	create := pipeline.Chain(func(context.Context, *pipeline.Invocation) (any, error) { return "created", nil },
		limits, perTenant)
	for _, tenant := range []string{"acme", "acme", "acme", "globex"} {
		inv := pipeline.NewInvocation(pipeline.Spec{
			Operation: op("orders.create"),
			Input:     "widget",
			Baggage:   map[string]string{"tenant": tenant},
		})
		out, err := create(context.Background(), inv)
		if err != nil {
			e := pipeline.AsError(err)
			t, _ := e.Details()["tenant"]
			fmt.Printf("%s: %s %s (tenant %v)\n", tenant, e.Kind(), e.Code(), t)
			continue
		}
		fmt.Printf("%s: %v\n", tenant, out)
	}
	// Output:
	// acme: created
	// acme: created
	// acme: UNAVAILABLE KERNEL_UNAVAILABLE_002 (tenant acme)
	// globex: created
}

// ExampleNewLimits shows an operation's limits on their own:
// one call at a time, nobody waiting.
func ExampleNewLimits() {
	limits := resilience.NewLimits("reports.export", resilience.Policy{ConcurrencyLimit: 1})
	chain := pipeline.Chain(func(ctx context.Context, inv *pipeline.Invocation) (any, error) {
		// While the first export runs, a second one arrives.
		second := pipeline.NewInvocation(pipeline.Spec{Operation: inv.Operation()})
		_, err := limits.Invoke(ctx, second, func(context.Context, *pipeline.Invocation) (any, error) { return nil, nil })
		fmt.Println("second export:", pipeline.AsError(err).Message())
		fmt.Println("in flight:", limits.State().InFlight)
		return nil, nil
	}, deadline.Middleware(), limits)

	inv := pipeline.NewInvocation(pipeline.Spec{
		Operation:      op("reports.export"),
		Deadline:       time.Now().Add(time.Minute),
		DeadlineSource: pipeline.DeadlineOperation,
	})
	_, err := chain(context.Background(), inv)
	fmt.Println("first export:", err, "- in flight after:", limits.State().InFlight)
	// Output:
	// second export: Operation 'reports.export' has too many calls in progress; retry later.
	// in flight: 1
	// first export: <nil> - in flight after: 0
}
