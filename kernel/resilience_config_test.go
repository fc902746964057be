package kernel_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience"
)

// resKernel builds a kernel serving orders.create, orders.get and
// orders.cancel (each counts its calls into *calls) under config.
func resKernel(t *testing.T, config string, calls *int, opts ...kernel.Option) (*kernel.Kernel, error) {
	t.Helper()
	reg := operations.NewRegistry()
	for _, id := range []string{"orders.create", "orders.get", "orders.cancel"} {
		err := operations.Register(reg, operations.Descriptor{ID: id}, func(ctx context.Context, in string) (string, error) {
			*calls++
			switch in {
			case "fail":
				return "", pipeline.NewError(pipeline.KindUnavailable, "SHOP_UNAVAILABLE_001", "database unavailable")
			case "block":
				<-ctx.Done()
				return "", ctx.Err()
			}
			return "ok", nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return kernel.New(append([]kernel.Option{kernel.WithRegistry(reg), kernel.WithConfigJSON([]byte(config))}, opts...)...)
}

func wrap(resilienceSection string) string {
	return `{"Sundial":{"Kernel":{"Resilience":` + resilienceSection + `}}}`
}

func TestResilienceConfigErrorsFailNew(t *testing.T) {
	const root = "Sundial.Kernel.Resilience"
	tests := []struct {
		name, section, want string
	}{
		{"non-positive limit", `{"PermitLimit":0}`, root + ".PermitLimit: must be greater than 0"},
		{"non-positive concurrency", `{"Operations":{"orders.create":{"ConcurrencyLimit":-1}}}`, root + ".Operations.orders.create.ConcurrencyLimit: must be greater than 0"},
		{"non-positive threshold", `{"FailureThreshold":0}`, root + ".FailureThreshold: must be greater than 0"},
		{"non-positive window", `{"Operations":{"orders.create":{"WindowSeconds":0}}}`, root + ".Operations.orders.create.WindowSeconds: must be greater than 0"},
		{"non-positive break", `{"BreakSeconds":-30}`, root + ".BreakSeconds: must be greater than 0"},
		{"negative queue", `{"QueueLimit":-1}`, root + ".QueueLimit: must not be negative"},
		{"negative concurrency queue", `{"Operations":{"orders.create":{"ConcurrencyQueueLimit":-1}}}`, root + ".Operations.orders.create.ConcurrencyQueueLimit: must not be negative"},
		{"malformed operation ID", `{"Operations":{"orders..create":{"PermitLimit":1}}}`, root + ".Operations.orders..create: operations: malformed operation ID"},
		{"unknown key", `{"Operations":{"orders.create":{"PermitLimits":1}}}`, root + ".Operations.orders.create.PermitLimits: unknown key"},
		{"wrong type", `{"Operations":{"orders.create":{"PermitLimit":"2"}}}`, root + ".Operations.orders.create.PermitLimit: want an integer, got a string"},
		{"wrong type at the root", `{"WindowSeconds":"1s"}`, root + ".WindowSeconds: want a number of seconds, got a string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var calls int
			_, err := resKernel(t, wrap(tt.section), &calls)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New(%s) = %v, want an error containing %q", tt.section, err, tt.want)
			}
		})
	}
}

func TestResilienceOperationIDsStayWhole(t *testing.T) {
	var calls int
	k, err := resKernel(t, wrap(`{"PermitLimit":1000,"Operations":{"orders.create":{"PermitLimit":2,"WindowSeconds":60,"ConcurrencyLimit":1}}}`), &calls,
		kernel.WithEnv("SUNDIAL_"),
		kernel.WithEnviron(func() []string {
			return []string{"SUNDIAL_KERNEL__RESILIENCE__OPERATIONS__ORDERS_CANCEL__FAILURETHRESHOLD=3"}
		}))
	if err != nil {
		t.Fatal(err)
	}
	if p := k.PolicyFor("orders.create"); p.PermitLimit != 2 || p.Window != time.Minute || p.ConcurrencyLimit != 1 {
		t.Errorf("PolicyFor(orders.create) = %+v, want PermitLimit 2, Window 1m, ConcurrencyLimit 1", p)
	}
	if p := k.PolicyFor("orders.get"); p.PermitLimit != 1000 || p.Window != time.Second || p.ConcurrencyLimit != 0 {
		t.Errorf("PolicyFor(orders.get) = %+v, want only the section's defaults", p)
	}
	if p := k.PolicyFor("orders.cancel"); p.FailureThreshold != 3 || p.PermitLimit != 1000 {
		t.Errorf("PolicyFor(orders.cancel) = %+v, want FailureThreshold 3 from the environment over the defaults", p)
	}
	l := k.Limits("orders.create")
	if l == nil || l.ID() != "orders.create" || l.Policy() != k.PolicyFor("orders.create") {
		t.Fatalf("Limits(orders.create) = %+v, want the operation's limits", l)
	}
	if k.Limits("orders.unknown") != nil {
		t.Error("Limits(unknown operation) != nil")
	}
}

func TestResilienceRejectsThroughTheKernel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls int
		k, err := resKernel(t, wrap(`{"PermitLimit":1000,"WindowSeconds":1,"Operations":{"orders.create":{"PermitLimit":2,"WindowSeconds":60,"ConcurrencyLimit":1}}}`), &calls)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			if _, err := kernel.Call[string, string](t.Context(), k, "orders.create", ""); err != nil {
				t.Fatalf("call %d = %v", i+1, err)
			}
		}
		_, err = kernel.Call[string, string](t.Context(), k, "orders.create", "")
		pe := pipeline.AsError(err)
		if pe == nil || pe.Code() != resilience.CodeRateLimited || pe.Message() != "Operation 'orders.create' is rate limited; retry after 60 seconds." {
			t.Fatalf("third call = %v, want KERNEL_UNAVAILABLE_002 \"... retry after 60 seconds.\"", err)
		}
		if calls != 2 {
			t.Errorf("handler ran %d times, want 2", calls)
		}
		if _, err := kernel.Call[string, string](t.Context(), k, "orders.get", ""); err != nil {
			t.Errorf("another operation is limited separately: orders.get = %v", err)
		}
	})
}

func TestResilienceBuiltInOff(t *testing.T) {
	var calls int
	// A broken Resilience section is not even read.
	k, err := resKernel(t, `{"Sundial":{"Kernel":{"UseBuiltInMiddleware":false,"Resilience":{"PermitLimit":1,"Operations":{"Bad ID":{}}}}}}`, &calls)
	if err != nil {
		t.Fatalf("New = %v, want nil", err)
	}
	for i := range 5 {
		if _, err := kernel.Call[string, string](context.Background(), k, "orders.create", ""); err != nil {
			t.Fatalf("call %d = %v, want no limit", i, err)
		}
	}
	if k.Limits("orders.create") != nil || k.PolicyFor("orders.create").Limited() {
		t.Error("built-ins off but limits exist")
	}
}

func TestResilienceExpiredOnArrivalDoesNotCount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls int
		k, err := resKernel(t, wrap(`{"FailureThreshold":1,"PermitLimit":1,"WindowSeconds":3600}`), &calls)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			in := "fail"
			o := k.Op("orders.create").Invoke(t.Context(), kernel.Unary{Caller: kernel.Caller{Deadline: time.Now().Add(-time.Millisecond)}, Input: &in})
			if pipelinetest.CodeOf(o.Err) != pipeline.CodeTimeout {
				t.Fatalf("expired on arrival = %v, want %s", o.Err, pipeline.CodeTimeout)
			}
		}
		l := k.Limits("orders.create")
		if calls != 0 || l.State().Breaker != resilience.BreakerClosed {
			t.Fatalf("handler ran %d times, breaker %v; want 0, closed", calls, l.State().Breaker)
		}
		if _, err := kernel.Call[string, string](t.Context(), k, "orders.create", ""); err != nil {
			t.Errorf("first live call = %v, want the permit untouched", err)
		}
	})
}

// TestResilienceDeadlineCountsByWhoseDeadline: a handler that honours its
// context and is ended by the operation's own TimeoutSeconds counts as a
// breaker failure (a hanging downstream must open the breaker); ended by
// the caller's earlier deadline, it counts as nothing.
func TestResilienceDeadlineCountsByWhoseDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls int
		k, err := resKernel(t, wrap(`{"FailureThreshold":2,"TimeoutSeconds":2}`), &calls)
		if err != nil {
			t.Fatal(err)
		}
		l := k.Limits("orders.create")
		for i := range 3 {
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			_, err = kernel.Call[string, string](ctx, k, "orders.create", "block")
			cancel()
			if pipelinetest.CodeOf(err) != pipeline.CodeTimeout {
				t.Fatalf("caller-bound call %d = %v, want %s", i, err, pipeline.CodeTimeout)
			}
		}
		if s := l.State().Breaker; s != resilience.BreakerClosed {
			t.Fatalf("after 3 calls ended by the caller's own deadline: breaker %v, want closed", s)
		}
		for i := range 2 {
			_, err = kernel.Call[string, string](t.Context(), k, "orders.create", "block")
			if pipelinetest.CodeOf(err) != pipeline.CodeTimeout {
				t.Fatalf("operation-bound call %d = %v, want %s", i, err, pipeline.CodeTimeout)
			}
		}
		if s := l.State().Breaker; s != resilience.BreakerOpen {
			t.Fatalf("after 2 calls ended by the operation's TimeoutSeconds: breaker %v, want open", s)
		}
	})
}
