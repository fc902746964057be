package kernel_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"go.opentelemetry.io/otel/baggage"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience"
)

// TenantInflight is a limit of our own: at most PerTenant calls of one
// tenant (the caller's baggage member "tenant") run at once. It is a
// resilience.Limit: Acquire admits the call or turns it away. What it
// hands out is a permit of the tenant's count, a resilience.Releaser that
// takes it back when the call ends; a tenant with no call running is
// forgotten, so a flood of tenants holds no memory.
type TenantInflight struct {
	PerTenant int
	mu        sync.Mutex
	running   map[string]*tenantCalls
}

// tenantCalls counts one tenant's running calls (under TenantInflight.mu).
type tenantCalls struct {
	l      *TenantInflight
	tenant string
	n      int
}

func (l *TenantInflight) Acquire(_ context.Context, inv *pipeline.Invocation) (resilience.Permit, error) {
	tenant, _ := inv.Baggage("tenant")
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.running[tenant]
	if c == nil {
		c = &tenantCalls{l: l, tenant: tenant}
		l.running[tenant] = c
	}
	if c.n >= l.PerTenant {
		return resilience.Permit{}, pipeline.NewError(pipeline.KindUnavailable, "APP_TENANT_BUSY_001",
			fmt.Sprintf("Tenant %q has %d calls running; retry later.", tenant, l.PerTenant))
	}
	c.n++
	return resilience.NewPermit(c), nil
}

// Release implements resilience.Releaser.
func (c *tenantCalls) Release(resilience.Outcome) {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	if c.n--; c.n == 0 {
		delete(c.l.running, c.tenant)
	}
}

// newTenantInflight builds the limit from its configuration object.
func newTenantInflight(_ string, raw json.RawMessage) (resilience.Limit, error) {
	l := &TenantInflight{running: map[string]*tenantCalls{}}
	if err := json.Unmarshal(raw, l); err != nil {
		return nil, err
	}
	if l.PerTenant < 1 {
		return nil, fmt.Errorf("PerTenant must be at least 1, got %d", l.PerTenant)
	}
	return l, nil
}

// A limit of your own, plugged in by configuration: register its kind
// with kernel.WithLimitKind, then name it in an operation's Limits. It
// runs after the built-in limits, right before the handler. Here the
// handler of tenant acme's first call makes a second call for acme while
// it runs, which its tenant's limit turns away, and one for globex, which
// goes through.
func Example_customLimit() {
	reg := operations.NewRegistry()
	var k *kernel.Kernel
	type In struct{ Nested string }
	err := operations.Register(reg, operations.Descriptor{ID: "reports.build"}, func(ctx context.Context, in In) (string, error) {
		if in.Nested != "" {
			o := k.Operations()[0].Invoke(withTenant(in.Nested), kernel.Unary{Input: &In{}})
			return fmt.Sprintf("nested call for %s: %v %s", in.Nested, pipelinetest.KindOf(o.Err), pipelinetest.CodeOf(o.Err)), nil
		}
		return "built", nil
	})
	if err != nil {
		panic(err)
	}
	k, err = kernel.New(kernel.WithRegistry(reg),
		kernel.WithLimitKind("tenant-inflight", newTenantInflight),
		kernel.WithConfigJSON([]byte(`{"Sundial":{"Kernel":{"Resilience":{"Operations":{
			"reports.build":{"Limits":{"tenant-inflight":{"PerTenant":1}}}}}}}}`)))
	if err != nil {
		panic(err)
	}
	defer k.Close()
	for _, nested := range []string{"acme", "globex"} {
		o := k.Operations()[0].Invoke(withTenant("acme"), kernel.Unary{Input: &In{Nested: nested}})
		fmt.Println(o.Output, o.Err)
	}
	// Output:
	// nested call for acme: UNAVAILABLE APP_TENANT_BUSY_001 <nil>
	// nested call for globex: OK  <nil>
}

// withTenant returns a context whose baggage names the tenant.
func withTenant(tenant string) context.Context {
	m, _ := baggage.NewMemberRaw("tenant", tenant)
	b, _ := baggage.New(m)
	return baggage.ContextWithBaggage(context.Background(), b)
}
