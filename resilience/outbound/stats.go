package outbound

import (
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/sundial-go/sundial/resilience"
)

// Stats is what a [Dependency] has done since it was made: the kernel's
// metrics report it per dependency (docs/observability.md).
type Stats struct {
	// Attempts counts every attempt; Retries and Hedges the ones that
	// were not a call's first.
	Attempts, Retries, Hedges int64
	// BudgetRefusals counts retries and hedges the budget did not allow.
	BudgetRefusals int64
	// HasBreaker reports whether the policy has a breaker, and Breaker
	// its state.
	HasBreaker bool
	Breaker    resilience.BreakerState
	// Throttled counts calls and retries the throttle refused. HasThrottle
	// reports whether the policy throttles. WindowRequests and WindowAccepts
	// are its window's counts, and Rejection its probability of refusing now.
	Throttled                     int64
	HasThrottle                   bool
	WindowRequests, WindowAccepts int64
	Rejection                     float64
}

// counters are a Dependency's Stats counts, kept across reloads.
type counters struct {
	attempts, retries, hedges, refusals, throttled atomic.Int64
}

// Stats returns what d has done; a nil d has done nothing.
func (d *Dependency) Stats() Stats {
	if d == nil {
		return Stats{}
	}
	s := Stats{Attempts: d.count.attempts.Load(), Retries: d.count.retries.Load(),
		Hedges: d.count.hedges.Load(), BudgetRefusals: d.count.refusals.Load(), Throttled: d.count.throttled.Load()}
	cur := d.cur.Load()
	if b := cur.breaker; b != nil {
		s.HasBreaker, s.Breaker = true, resilience.BreakerState(b.State())
	}
	if t := cur.throttle; t != nil {
		s.HasThrottle = true
		s.WindowRequests, s.WindowAccepts, s.Rejection = t.window(cur.p.ThrottleK)
	}
	return s
}

// counted counts attempt number n (a hedge or not).
func (c *call) counted(n int, hedge bool) {
	c.d.count.attempts.Add(1)
	switch {
	case hedge:
		c.d.count.hedges.Add(1)
	case n > 1:
		c.d.count.retries.Add(1)
	}
}

// withdraw takes a budget token for a retry or a hedge; a refusal is
// counted and added to the caller's span as an event.
func (c *call) withdraw(hedge bool) bool {
	if c.s.budget.withdraw() {
		return true
	}
	c.d.count.refusals.Add(1)
	trace.SpanFromContext(c.ctx).AddEvent("sundial.outbound.budget_refused", trace.WithAttributes(
		attribute.String("sundial.dependency", c.d.name), attribute.Bool("sundial.hedge", hedge)))
	return false
}
