package observe_test

import (
	"context"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"sync"
	"testing"
	"time"

	"github.com/sundial-go/sundial/kernel/internal/observe"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
)

// limits is a LimitsFunc over a fixed table, changeable between
// collections.
type limits struct {
	mu sync.Mutex
	m  map[string]observe.LimitState
}

func (l *limits) set(id string, st observe.LimitState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]observe.LimitState{}
	}
	l.m[id] = st
}

func (l *limits) state(id string) (observe.LimitState, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st, ok := l.m[id]
	return st, ok
}

// TestShopThreeOrders is the scripted run: three orders.create calls
// under a rate limit of two per window give two OK and one rate-limit
// rejection, in the spans and in the metrics; the observable instruments
// report the configured limits and no breaker for orders.create.
func TestShopThreeOrders(t *testing.T) {
	h := newHarness(t)
	var l limits
	l.set("orders.create", observe.LimitState{RateLimited: true, ConcurrencyLimited: true})
	l.set("billing.charge", observe.LimitState{HasBreaker: true, Breaker: resilience.BreakerClosed})
	h.tel.ObserveLimits(l.state)
	o := h.tel.Operation(op("orders.create"))
	h.tel.Operation(op("billing.charge"))
	for i := range 3 {
		inv := pipeline.NewInvocation(pipeline.Spec{Operation: op("orders.create")})
		var err error
		if i == 2 {
			err = rejection(resilience.CodeRateLimited, "orders.create", 60*time.Second)
		}
		runCall(o, context.Background(), inv, t0, t0.Add(time.Millisecond), err)
	}
	rm := h.collect(t)
	tests := []struct {
		metric string
		attrs  map[string]string
		want   float64
	}{
		{observe.MetricInvocationDuration, map[string]string{"operation": "orders.create", "protocol": "inprocess", "kind": "OK"}, 2},
		{observe.MetricInvocationDuration, map[string]string{"operation": "orders.create", "kind": "UNAVAILABLE", "code": resilience.CodeRateLimited}, 1},
		{observe.MetricRejectionCount, map[string]string{"operation": "orders.create", "reason": "rate"}, 1},
		{observe.MetricQueueDepth, map[string]string{"operation": "orders.create", "queue": "rate"}, 0},
		{observe.MetricQueueDepth, map[string]string{"operation": "orders.create", "queue": "concurrency"}, 0},
		{observe.MetricConcurrencyActive, map[string]string{"operation": "orders.create"}, 0},
		{observe.MetricBreakerState, map[string]string{"operation": "billing.charge", "state": "closed"}, 1},
		{observe.MetricBreakerState, map[string]string{"operation": "billing.charge", "state": "open"}, 0},
	}
	for _, tt := range tests {
		if got, ok := valueOf(rm, tt.metric, tt.attrs); !ok || got != tt.want {
			t.Errorf("%s%v = %v (present %v), want %v", tt.metric, tt.attrs, got, ok, tt.want)
		}
	}
	if n := len(points(rm, observe.MetricInvocationDuration)); n != 2 {
		t.Errorf("%s has %d points, want 2 (OK and the rejection)", observe.MetricInvocationDuration, n)
	}
	// orders.create has no breaker: no breaker-state point for it.
	if _, ok := valueOf(rm, observe.MetricBreakerState, map[string]string{"operation": "orders.create"}); ok {
		t.Errorf("%s reports orders.create, which has no breaker", observe.MetricBreakerState)
	}
	spans := h.spans.Ended()
	if len(spans) != 3 {
		t.Fatalf("spans = %d, want 3", len(spans))
	}
	if a := spanAttrs(spans[2]); a[observe.AttrOutcomeCode] != resilience.CodeRateLimited {
		t.Errorf("third span %v, want code %s", a, resilience.CodeRateLimited)
	}
	ev, ok := findEvent(spans[2], observe.EventRejection)
	if a := kvs(ev.Attributes); !ok || a[observe.AttrRejectionLimit] != "rate" || a[observe.AttrRetryAfter] != "60" {
		t.Errorf("third span's rejection event = %v (found %v), want limit rate, retry after 60", a, ok)
	}
}

// TestBreakerStateGauge: the breaker gauge reports one point per state
// (state closed, half_open, open), 1 for the breaker's state and 0 for the
// others, and nothing for an operation without a breaker, one the
// LimitsFunc does not know, or before ObserveLimits.
func TestBreakerStateGauge(t *testing.T) {
	h := newHarness(t)
	for _, id := range []string{"test.closed", "test.half-open", "test.open", "test.none", "test.unknown"} {
		h.tel.Operation(op(id))
	}
	if n := len(points(h.collect(t), observe.MetricBreakerState)); n != 0 {
		t.Errorf("before ObserveLimits: %d breaker points, want 0", n)
	}
	var l limits
	l.set("test.closed", observe.LimitState{HasBreaker: true, Breaker: resilience.BreakerClosed})
	l.set("test.half-open", observe.LimitState{HasBreaker: true, Breaker: resilience.BreakerHalfOpen})
	l.set("test.open", observe.LimitState{HasBreaker: true, Breaker: resilience.BreakerOpen})
	l.set("test.none", observe.LimitState{})
	h.tel.ObserveLimits(l.state)
	check := func(rm metricdata.ResourceMetrics, id, in string) {
		t.Helper()
		for _, st := range []string{observe.BreakerClosed, observe.BreakerHalfOpen, observe.BreakerOpen} {
			want := 0.0
			if st == in {
				want = 1
			}
			if v, ok := valueOf(rm, observe.MetricBreakerState, map[string]string{"operation": id, "state": st}); !ok || v != want {
				t.Errorf("%s{%s,state=%s} = %v (present %v), want %v", observe.MetricBreakerState, id, st, v, ok, want)
			}
		}
	}
	rm := h.collect(t)
	check(rm, "test.closed", "closed")
	check(rm, "test.half-open", "half_open")
	check(rm, "test.open", "open")
	if n := len(points(rm, observe.MetricBreakerState)); n != 9 {
		t.Errorf("%s has %d points, want 9 (3 breakers x 3 states; no breaker, unknown: none)", observe.MetricBreakerState, n)
	}
	l.set("test.closed", observe.LimitState{HasBreaker: true, Breaker: resilience.BreakerOpen})
	check(h.collect(t), "test.closed", "open")
	h.tel.ObserveLimits(nil)
	if n := len(points(h.collect(t), observe.MetricBreakerState)); n != 0 {
		t.Errorf("after ObserveLimits(nil): %d breaker points, want 0", n)
	}
}

// TestQueueGauges: one call holds the only concurrency slot and one waits
// in the queue; the observable instruments report them, and no rate queue
// for an operation without a rate limit.
func TestQueueGauges(t *testing.T) {
	h := newHarness(t)
	h.tel.Operation(op("test.hold"))
	var l limits
	l.set("test.hold", observe.LimitState{ConcurrencyLimited: true, ConcurrencyQueueDepth: 1, InFlight: 1})
	h.tel.ObserveLimits(l.state)
	rm := h.collect(t)
	if v, _ := valueOf(rm, observe.MetricQueueDepth, map[string]string{"operation": "test.hold", "queue": "concurrency"}); v != 1 {
		t.Errorf("%s{test.hold, concurrency} = %v, want 1", observe.MetricQueueDepth, v)
	}
	if v, _ := valueOf(rm, observe.MetricConcurrencyActive, map[string]string{"operation": "test.hold"}); v != 1 {
		t.Errorf("%s{test.hold} = %v, want 1", observe.MetricConcurrencyActive, v)
	}
	if _, ok := valueOf(rm, observe.MetricQueueDepth, map[string]string{"operation": "test.hold", "queue": "rate"}); ok {
		t.Errorf("%s reports a rate queue for test.hold, which has no rate limit", observe.MetricQueueDepth)
	}
	l.set("test.hold", observe.LimitState{ConcurrencyLimited: true, RateLimited: true, RateQueueDepth: 3})
	rm = h.collect(t)
	if v, _ := valueOf(rm, observe.MetricConcurrencyActive, map[string]string{"operation": "test.hold"}); v != 0 {
		t.Errorf("after both finished, %s{test.hold} = %v, want 0", observe.MetricConcurrencyActive, v)
	}
	if v, _ := valueOf(rm, observe.MetricQueueDepth, map[string]string{"operation": "test.hold", "queue": "rate"}); v != 3 {
		t.Errorf("%s{test.hold, rate} = %v, want 3", observe.MetricQueueDepth, v)
	}
}

// TestConcurrencyLimitGauges: the limit enforced and the adaptive
// controller's are reported apart (a shadow's differs from the one
// enforced); an operation without either reports neither.
func TestConcurrencyLimitGauges(t *testing.T) {
	h := newHarness(t)
	h.tel.Operation(op("test.shadow"))
	h.tel.Operation(op("test.plain"))
	var l limits
	l.set("test.shadow", observe.LimitState{ConcurrencyLimited: true, ConcurrencyLimit: 100, AdaptiveLimit: 37})
	l.set("test.plain", observe.LimitState{RateLimited: true})
	h.tel.ObserveLimits(l.state)
	rm := h.collect(t)
	for name, want := range map[string]float64{observe.MetricConcurrencyLimit: 100, observe.MetricConcurrencyAdaptiveLimit: 37} {
		if v, _ := valueOf(rm, name, map[string]string{"operation": "test.shadow"}); v != want {
			t.Errorf("%s{test.shadow} = %v, want %v", name, v, want)
		}
		if _, ok := valueOf(rm, name, map[string]string{"operation": "test.plain"}); ok {
			t.Errorf("%s reports test.plain, which has no concurrency limit", name)
		}
	}
}

// TestShedRejectionsAndPriority: a shed call is counted under reason
// "shed" and its span's rejection event names the limit "shed" with the
// retry-after; every operation's span carries the call's class
// (sundial.priority); a host route's carries none.
func TestShedRejectionsAndPriority(t *testing.T) {
	h := newHarness(t)
	o := h.tel.Operation(op("shop.checkout"))
	for _, p := range []pipeline.Priority{pipeline.PriorityCritical, pipeline.PrioritySheddable} {
		inv := pipeline.NewInvocation(pipeline.Spec{Operation: op("shop.checkout"), Priority: p})
		var err error
		if p == pipeline.PrioritySheddable {
			err = resilience.Shed("shop.checkout", p, time.Second)
		}
		runCall(o, context.Background(), inv, t0, t0.Add(time.Millisecond), err)
	}
	runCall(h.tel.Route("GET /healthz"), context.Background(), pipeline.NewInvocation(pipeline.Spec{Route: "GET /healthz"}), t0, t0, nil)
	rm := h.collect(t)
	if got, ok := valueOf(rm, observe.MetricRejectionCount, map[string]string{"operation": "shop.checkout", "reason": observe.ReasonShed}); !ok || got != 1 {
		t.Errorf("%s{reason shed} = %v (present %v), want 1", observe.MetricRejectionCount, got, ok)
	}
	spans := h.spans.Ended()
	if len(spans) != 3 {
		t.Fatalf("spans = %d, want 3", len(spans))
	}
	for i, want := range []string{"critical", "sheddable"} {
		if a := spanAttrs(spans[i]); a[observe.AttrPriority] != want {
			t.Errorf("span %d: %s = %q, want %q", i, observe.AttrPriority, a[observe.AttrPriority], want)
		}
	}
	ev, ok := findEvent(spans[1], observe.EventRejection)
	if a := kvs(ev.Attributes); !ok || a[observe.AttrRejectionLimit] != observe.ReasonShed || a[observe.AttrRetryAfter] != "1" {
		t.Errorf("shed span's rejection event = %v (found %v), want limit shed, retry after 1", a, ok)
	}
	if a := spanAttrs(spans[2]); a[observe.AttrPriority] != "" {
		t.Errorf("host route's span has %s = %q, want none", observe.AttrPriority, a[observe.AttrPriority])
	}
}
