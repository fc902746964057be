package telemetry_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/codes"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/kernel/telemetry"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/samples/shop/app"
)

// TestShopThreeOrders is the scripted run: three orders.create calls
// against the shop's default config (PermitLimit 2 per 60 s) give two OK
// and one rate-limit rejection, in the spans and in the metrics.
func TestShopThreeOrders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		reg := operations.NewRegistry()
		if err := app.New().Register(reg); err != nil {
			t.Fatal(err)
		}
		k := h.kernel(t, reg, string(app.DefaultConfig))
		for i := range 3 {
			_, err := kernel.Call[app.CreateOrder, app.Order](context.Background(), k, "orders.create", app.CreateOrder{Name: "widget", Amount: 1})
			if want := i == 2; (pipeline.CodeOf(err) == pipeline.CodeRateLimited) != want {
				t.Fatalf("order %d: err = %v, want rate limited: %v", i+1, err, want)
			}
		}
		rm := h.collect(t)
		tests := []struct {
			metric string
			attrs  map[string]string
			want   float64
		}{
			{telemetry.MetricInvocationCount, map[string]string{"operation": "orders.create", "protocol": "inprocess", "kind": "OK"}, 2},
			{telemetry.MetricInvocationCount, map[string]string{"operation": "orders.create", "kind": "UNAVAILABLE", "code": pipeline.CodeRateLimited}, 1},
			{telemetry.MetricInvocationDuration, map[string]string{"operation": "orders.create", "kind": "OK"}, 2},
			{telemetry.MetricRejectionCount, map[string]string{"operation": "orders.create", "reason": "rate"}, 1},
			{telemetry.MetricQueueDepth, map[string]string{"operation": "orders.create", "queue": "rate"}, 0},
			{telemetry.MetricQueueDepth, map[string]string{"operation": "orders.create", "queue": "concurrency"}, 0},
			{telemetry.MetricConcurrencyActive, map[string]string{"operation": "orders.create"}, 0},
			{telemetry.MetricBreakerState, map[string]string{"operation": "billing.charge"}, 0},
		}
		for _, tt := range tests {
			if got, ok := valueOf(rm, tt.metric, tt.attrs); !ok || got != tt.want {
				t.Errorf("%s%v = %v (present %v), want %v", tt.metric, tt.attrs, got, ok, tt.want)
			}
		}
		if n := len(points(rm, telemetry.MetricInvocationCount)); n != 2 {
			t.Errorf("%s has %d points, want 2 (OK and the rejection)", telemetry.MetricInvocationCount, n)
		}
		// orders.create has no breaker: no breaker-state point for it.
		if _, ok := valueOf(rm, telemetry.MetricBreakerState, map[string]string{"operation": "orders.create"}); ok {
			t.Errorf("%s reports orders.create, which has no breaker", telemetry.MetricBreakerState)
		}
		spans := h.spans.Ended()
		if len(spans) != 3 {
			t.Fatalf("spans = %d, want 3", len(spans))
		}
		if a := spanAttrs(spans[2]); a[telemetry.AttrOutcomeCode] != pipeline.CodeRateLimited {
			t.Errorf("third span %v, want code %s", a, pipeline.CodeRateLimited)
		}
		ev, ok := findEvent(spans[2], telemetry.EventRejection)
		if a := kvs(ev.Attributes); !ok || a[telemetry.AttrRejectionLimit] != "rate" || a[telemetry.AttrRetryAfter] != "60" {
			t.Errorf("third span's rejection event = %v (found %v), want limit rate, retry after 60", a, ok)
		}
	})
}

// limitsRegistry registers operations for the real limiters.
func limitsRegistry(t *testing.T, release <-chan struct{}) *operations.Registry {
	t.Helper()
	reg := testRegistry(t)
	if err := operations.Register(reg, operations.Descriptor{ID: "test.hold"}, func(ctx context.Context, _ in) (out, error) {
		select {
		case <-release:
			return out{}, nil
		case <-ctx.Done():
			return out{}, ctx.Err()
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := operations.Register(reg, operations.Descriptor{ID: "test.downstream-timeout"}, func(context.Context, in) (out, error) {
		return out{}, pipeline.ErrTimeout()
	}); err != nil {
		t.Fatal(err)
	}
	return reg
}

const limitsConfig = `{"Sundial": {"Kernel": {"Resilience": {"Operations": {
	"test.ok":                 {"PermitLimit": 1, "WindowSeconds": 10},
	"test.hold":               {"ConcurrencyLimit": 1, "ConcurrencyQueueLimit": 1},
	"test.fail":               {"FailureThreshold": 1, "BreakSeconds": 30},
	"test.cancelled":          {"FailureThreshold": 1, "BreakSeconds": 30},
	"test.downstream-timeout": {"FailureThreshold": 1, "BreakSeconds": 30}
}}}}}`

// TestRealRejections: each per-operation limit's rejection, as the
// resilience limiters produce it, gives its span attributes, event and
// metric.
func TestRealRejections(t *testing.T) {
	tests := []struct {
		name, op, code, reason, retry string
		// setup uses the limit up (it may leave a call running).
		setup func(t *testing.T, k *kernel.Kernel)
	}{
		{"rate", "test.ok", pipeline.CodeRateLimited, "rate", "10", func(t *testing.T, k *kernel.Kernel) {
			invoke(k, context.Background(), "test.ok", nil)
		}},
		{"concurrency", "test.hold", pipeline.CodeConcurrencyLimited, "concurrency", "", func(t *testing.T, k *kernel.Kernel) {
			for range 2 { // one runs, one waits in the queue
				go invoke(k, context.Background(), "test.hold", nil)
			}
			synctest.Wait()
		}},
		{"breaker", "test.fail", pipeline.CodeCircuitOpen, "breaker", "30", func(t *testing.T, k *kernel.Kernel) {
			invoke(k, context.Background(), "test.fail", nil)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t)
				release := make(chan struct{})
				k := h.kernel(t, limitsRegistry(t, release), limitsConfig)
				tt.setup(t, k)
				_, err := invoke(k, context.Background(), tt.op, nil)
				close(release)
				synctest.Wait()
				if pipeline.CodeOf(err) != tt.code {
					t.Fatalf("Invoke(%s) = %v, want %s", tt.op, err, tt.code)
				}
				var s = h.spans.Ended()
				rejected := s[len(s)-1]
				for _, sp := range s {
					if spanAttrs(sp)[telemetry.AttrOutcomeCode] == tt.code {
						rejected = sp
					}
				}
				a := spanAttrs(rejected)
				if a[telemetry.AttrOutcomeKind] != "UNAVAILABLE" || a[telemetry.AttrOutcomeCode] != tt.code || rejected.Status().Code != codes.Error {
					t.Errorf("rejected span attributes %v status %v, want UNAVAILABLE/%s, Error", a, rejected.Status(), tt.code)
				}
				ev, ok := findEvent(rejected, telemetry.EventRejection)
				ea := kvs(ev.Attributes)
				if !ok || ea[telemetry.AttrRejectionLimit] != tt.reason || ea[telemetry.AttrRetryAfter] != tt.retry {
					t.Errorf("rejection event %v (found %v), want limit %s retry %q", ea, ok, tt.reason, tt.retry)
				}
				if v, _ := valueOf(h.collect(t), telemetry.MetricRejectionCount, map[string]string{"operation": tt.op, "reason": tt.reason}); v != 1 {
					t.Errorf("%s{%s,%s} = %v, want 1", telemetry.MetricRejectionCount, tt.op, tt.reason, v)
				}
			})
		})
	}
}

// TestBreakerCountedOriginal: the handler returns CANCELLED after the
// deadline fired. The span, the access log and the metrics say TIMEOUT (the
// attributed outcome), while the breaker counted the original CANCELLED —
// not a failure — and stays closed (FailureThreshold 1). A TIMEOUT the
// handler reports from a downstream, with no deadline fired, is a failure
// and opens the breaker: the state gauge shows both.
func TestBreakerCountedOriginal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		k := h.kernel(t, limitsRegistry(t, nil), limitsConfig)
		inv, err := invoke(k, context.Background(), "test.cancelled", func(inv *pipeline.Invocation) {
			inv.SetDeadline(time.Now().Add(100 * time.Millisecond))
		})
		if pipeline.CodeOf(err) != pipeline.CodeTimeout || pipeline.CodeOf(inv.OriginalOutcome()) != pipeline.CodeCancelled {
			t.Fatalf("outcome %v, original %v; want TIMEOUT attributed over the original CANCELLED", err, inv.OriginalOutcome())
		}
		if a := spanAttrs(h.onlySpan(t)); a[telemetry.AttrOutcomeCode] != pipeline.CodeTimeout || a[telemetry.AttrOriginalCode] != pipeline.CodeCancelled {
			t.Errorf("span %v, want code %s and original code %s", a, pipeline.CodeTimeout, pipeline.CodeCancelled)
		}
		if l := h.logLines(t); len(l) != 1 || l[0]["kind"] != "TIMEOUT" || l[0]["original_kind"] != "CANCELLED" {
			t.Errorf("access log %v, want kind TIMEOUT, original_kind CANCELLED", l)
		}
		if st := k.Limits("test.cancelled").BreakerState(); st != resilience.BreakerClosed {
			t.Errorf("test.cancelled breaker = %v, want closed: it counted the original CANCELLED", st)
		}
		if _, err := invoke(k, context.Background(), "test.downstream-timeout", nil); pipeline.CodeOf(err) != pipeline.CodeTimeout {
			t.Fatalf("test.downstream-timeout = %v, want TIMEOUT", err)
		}
		rm := h.collect(t)
		for op, want := range map[string]float64{"test.cancelled": 0, "test.downstream-timeout": 2, "test.fail": 0} {
			if v, ok := valueOf(rm, telemetry.MetricBreakerState, map[string]string{"operation": op}); !ok || v != want {
				t.Errorf("%s{%s} = %v (present %v), want %v", telemetry.MetricBreakerState, op, v, ok, want)
			}
		}
		if v, _ := valueOf(rm, telemetry.MetricInvocationCount, map[string]string{"operation": "test.cancelled", "kind": "TIMEOUT"}); v != 1 {
			t.Errorf("%s{test.cancelled, TIMEOUT} = %v, want 1", telemetry.MetricInvocationCount, v)
		}
	})
}

// TestQueueGauges: one call holds the only concurrency slot and one waits
// in the queue; the observable instruments report them.
func TestQueueGauges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		release := make(chan struct{})
		k := h.kernel(t, limitsRegistry(t, release), limitsConfig)
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() { invoke(k, context.Background(), "test.hold", nil) })
		}
		synctest.Wait()
		rm := h.collect(t)
		close(release)
		wg.Wait()
		if v, _ := valueOf(rm, telemetry.MetricQueueDepth, map[string]string{"operation": "test.hold", "queue": "concurrency"}); v != 1 {
			t.Errorf("%s{test.hold, concurrency} = %v, want 1", telemetry.MetricQueueDepth, v)
		}
		if v, _ := valueOf(rm, telemetry.MetricConcurrencyActive, map[string]string{"operation": "test.hold"}); v != 1 {
			t.Errorf("%s{test.hold} = %v, want 1", telemetry.MetricConcurrencyActive, v)
		}
		if _, ok := valueOf(rm, telemetry.MetricQueueDepth, map[string]string{"operation": "test.hold", "queue": "rate"}); ok {
			t.Errorf("%s reports a rate queue for test.hold, which has no rate limit", telemetry.MetricQueueDepth)
		}
		if v, _ := valueOf(h.collect(t), telemetry.MetricConcurrencyActive, map[string]string{"operation": "test.hold"}); v != 0 {
			t.Errorf("after both finished, %s{test.hold} = %v, want 0", telemetry.MetricConcurrencyActive, v)
		}
	})
}
