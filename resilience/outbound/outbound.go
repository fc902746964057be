package outbound

import (
	"context"
	"crypto/rand"
	mrand "math/rand/v2"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience/internal/breaker"
)

// baggageIdempotencyKey is the baggage key of a caller's idempotency key
// (propagation.BaggageIdempotencyKey, which resilience may not import).
const baggageIdempotencyKey = "sundial.idempotency-key"

// baggageRetried is the baggage key of the retry mark
// (propagation.BaggageRetried): a tier above retries the call.
const baggageRetried = "sundial.retried"

// CodeDependencyUnavailable is the code of the UNAVAILABLE outcome of a call
// whose last attempt got no answer. Nothing was sent, or the connection was
// refused, reset or closed. A gRPC Unavailable status without details
// (grpc-go's own, for a connection that failed) is one too. The outcome wraps
// the attempt's error and keeps its retry-after.
const CodeDependencyUnavailable = "KERNEL_UNAVAILABLE_009"

// CodeDependencyOpen is the code of the UNAVAILABLE outcome of a call that a
// dependency's open breaker turned away before any attempt. Its retry-after
// is the time until the breaker half-opens.
const CodeDependencyOpen = "KERNEL_UNAVAILABLE_007"

// Dependency runs the calls to one dependency under its [Policy]. Its
// retry budget and its breaker are shared by every call made through it.
// It is safe for concurrent use and starts no goroutine of its own (a
// hedged call runs its attempts in goroutines that end with the call).
type Dependency struct {
	name   string
	cur    atomic.Pointer[state]
	jitter func() float64 // in [0, 1); tests replace it
	coin   func() float64 // in [0, 1), the throttle's draws; tests replace it
	lat    latencies      // of successful attempts, for HedgeQuantile
	count  counters
}

type state struct {
	p        Policy
	budget   *budget
	breaker  *breaker.Breaker // nil: none
	throttle *throttle        // nil: none
}

// New returns the Dependency name under p, or the errors of p. Each error
// names its field (eg "Attempts: 0 is out of range (1 to 10)").
func New(name string, p Policy) (*Dependency, error) {
	d := &Dependency{name: name, jitter: mrand.Float64, coin: mrand.Float64}
	if err := d.Reconfigure(p); err != nil {
		return nil, err
	}
	return d, nil
}

// Reconfigure changes the policy in place, for calls that start after it. The
// budget keeps its balance (capped by the new reserve) and the breaker its
// state. The inbound breaker does the same on a reload. An invalid p changes
// nothing.
func (d *Dependency) Reconfigure(p Policy) error {
	if err := p.validate(); err != nil {
		return err
	}
	old := d.cur.Load()
	s := &state{p: p}
	var ob *breaker.Breaker
	var ot *throttle
	if old != nil {
		s.budget, ob, ot = old.budget.carry(p.BudgetRatio, p.BudgetMin), old.breaker, old.throttle
	} else {
		s.budget = newBudget(p.BudgetRatio, p.BudgetMin)
	}
	if p.Throttle {
		s.throttle = ot.carry(p.ThrottleWindow)
	}
	if p.FailureThreshold > 0 {
		s.breaker = breaker.Carry(ob, p.FailureThreshold, p.BreakDuration)
		if ob != nil {
			if th, bd := ob.Thresholds(); th == min(p.FailureThreshold, breaker.MaxThreshold) && bd == p.BreakDuration {
				s.breaker = ob
			}
		}
	}
	d.cur.Store(s)
	return nil
}

// tracerName names the tracer of the attempts' spans.
const tracerName = "github.com/sundial-go/sundial/resilience/outbound"

// Do runs one call. It calls attempt with a context derived from ctx, with
// the same deadline (or a shorter one with AttemptTimeout). The context has
// the same baggage, with the idempotency key (or one made once by CreateKey).
// Do calls attempt again, after a backoff, while the outcome is retryable
// (see the package doc) and attempts are left. The budget must have a token,
// and the breaker must be closed. What remains of the deadline after the
// sleep must still hold a MinAttemptTimeout. A downstream's retry-after
// replaces a shorter backoff. One that would end past the deadline ends the
// call at once.
//
// The context of the attempt whose success Do returns is not cancelled when
// Do returns, so a response body read afterwards still reads. That context
// ends with the call's, or at AttemptTimeout. Every other attempt's context
// is cancelled (a hedge that lost) or over.
//
// Each attempt has a child span "outbound <name>" of the caller's span, with
// attributes sundial.dependency, sundial.attempt and sundial.hedge.
//
// Do returns the last attempt's error as it is (nil on success): the
// downstream's answer. Only when no attempt ran does Do make its own. An
// open breaker gives UNAVAILABLE [CodeDependencyOpen] and the throttle
// [CodeDependencyThrottled], each with a retry-after. A deadline too close
// for MinAttemptTimeout gives TIMEOUT [CodeBudgetExhausted]. A last
// attempt that got no answer at all (refused, reset, nothing sent) gives
// UNAVAILABLE [CodeDependencyUnavailable], wrapping its error.
//
// A call that carries the retry mark makes one attempt (see the package doc).
// A nil *Dependency (Kernel.Dependency of an unknown name) runs attempt once
// with no policy, so a client given one through an interface does not panic.
func (d *Dependency) Do(ctx context.Context, attempt func(context.Context) error) error {
	if d == nil {
		return attempt(ctx)
	}
	s := d.cur.Load()
	if s.p.Attempts > 1 {
		if retriedAbove(ctx) {
			once := *s // the same budget and breaker
			once.p.Attempts = 1
			return d.do(ctx, &once, attempt)
		}
		ctx = withMember(ctx, baggageRetried, "1")
	}
	return d.do(ctx, s, attempt)
}

// retriedAbove reports whether ctx carries the retry mark.
func retriedAbove(ctx context.Context) bool {
	return baggage.FromContext(ctx).Member(baggageRetried).Value() != ""
}

// DoOnce runs one call of a single attempt: Do under the policy with
// Attempts 1. The breaker, the counts, the span and the budget's deposit
// apply; nothing is retried or hedged. Use it for a request that cannot
// be sent twice, such as an HTTP body that can be read only once.
func (d *Dependency) DoOnce(ctx context.Context, attempt func(context.Context) error) error {
	if d == nil {
		return attempt(ctx)
	}
	once := *d.cur.Load() // the same budget and breaker
	once.p.Attempts = 1
	return d.do(ctx, &once, attempt)
}

// do runs one call under s.
func (d *Dependency) do(ctx context.Context, s *state, attempt func(context.Context) error) error {
	keyed := baggage.FromContext(ctx).Member(baggageIdempotencyKey).Value() != ""
	if !keyed && s.p.CreateKey {
		ctx, keyed = withNewKey(ctx)
	}
	c := &call{d: d, s: s, ctx: ctx, keyed: keyed}
	if err := c.refusal(time.Now()); err != nil {
		return err
	}
	s.budget.deposit()
	if s.p.HedgeDelay > 0 && s.p.Attempts > 1 && (c.keyed || s.p.SafeToHedge) {
		return c.unavailable(c.hedged(attempt))
	}
	return c.unavailable(c.sequential(attempt))
}

// withNewKey returns ctx with a fresh idempotency key ("sundial-" and 26
// random base32 characters) in its baggage, or ctx and false when the
// baggage cannot take one more member.
func withNewKey(ctx context.Context) (context.Context, bool) {
	next := withMember(ctx, baggageIdempotencyKey, "sundial-"+rand.Text())
	return next, next != ctx
}

// withMember returns ctx with the baggage member key=value, or ctx itself
// when the baggage cannot take it.
func withMember(ctx context.Context, key, value string) context.Context {
	m, err := baggage.NewMemberRaw(key, value)
	if err != nil {
		return ctx
	}
	b, err := baggage.FromContext(ctx).SetMember(m)
	if err != nil {
		return ctx
	}
	return baggage.ContextWithBaggage(ctx, b)
}

// call is one Do.
type call struct {
	d     *Dependency
	s     *state
	ctx   context.Context
	keyed bool
	n     int // attempts started
}

// refusal returns the outcome of a first attempt that cannot start.
func (c *call) refusal(now time.Time) error {
	if err := c.ctx.Err(); err != nil {
		return err
	}
	if !c.fits(now) {
		dl, _ := c.ctx.Deadline()
		return (&BudgetExhaustedError{Stage: "outbound", Dependency: c.d.name, Remaining: dl.Sub(now)}).Outcome()
	}
	if b := c.s.breaker; b != nil && b.State() == breaker.Open {
		return c.openError(b.OpenFor())
	}
	return c.throttled()
}

// unavailable returns the outcome of a call that ended with err: err as
// it is, unless the dependency gave no answer while the call's own
// context was live (see unanswered). Then it is UNAVAILABLE
// [CodeDependencyUnavailable], naming the dependency and wrapping err.
func (c *call) unavailable(err error) error {
	if err == nil || c.ctx.Err() != nil || !unanswered(err) {
		return err
	}
	return pipeline.Wrap(pipeline.KindUnavailable, CodeDependencyUnavailable,
		"The dependency '"+c.d.name+"' is unavailable.", err).WithDetail("dependency", c.d.name)
}

// openError is the outcome of a call the breaker turned away.
func (c *call) openError(retryAfter time.Duration) error {
	return pipeline.NewError(pipeline.KindUnavailable, CodeDependencyOpen, "The dependency '"+c.d.name+"' is failing; its circuit breaker is open.").
		WithDetail("dependency", c.d.name).WithRetryAfter(retryAfter)
}

// fits reports whether an attempt starting at may start: MinAttemptTimeout
// (at least 1ns) remains of the deadline.
func (c *call) fits(at time.Time) bool {
	dl, ok := c.ctx.Deadline()
	return !ok || dl.Sub(at) >= max(c.s.p.MinAttemptTimeout, 1)
}

// sequential runs the attempts one after the other.
func (c *call) sequential(attempt func(context.Context) error) error {
	var last error
	for {
		t, err := c.admit()
		if err != nil {
			if last != nil {
				return last // the breaker refused a retry: the last answer stands
			}
			return err
		}
		err = c.run(attempt, c.n, false, c.ctx, t)
		if !c.again(err) {
			return err
		}
		last = err
	}
}

// final reports whether the outcome err of an attempt ends the call.
func (c *call) final(err error) bool {
	cl, _, _ := classify(err)
	return cl == final || c.ctx.Err() != nil || cl == ambiguous && !c.keyed
}

// again decides after the failed attempt err whether to retry, and sleeps
// the backoff when it does.
func (c *call) again(err error) bool {
	if c.final(err) || c.n >= c.s.p.Attempts {
		return false
	}
	_, ra, hasRA := classify(err)
	wait := c.backoff()
	if hasRA && ra > wait {
		wait = ra
	}
	if !c.fits(time.Now().Add(wait)) || !c.withdraw(false) {
		return false // no sleep outlasts the deadline; an empty budget ends the call
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.ctx.Done():
		return false
	}
}

// backoff returns the sleep before retry number c.n (1 for the first).
func (c *call) backoff() time.Duration {
	p := c.s.p
	b := p.BackoffBase
	for i := 1; i < c.n && b < p.BackoffMax; i++ {
		b *= 2
	}
	b = min(b, p.BackoffMax)
	return b/2 + time.Duration(c.d.jitter()*float64(b-b/2))
}

// admit asks the throttle (for a retry or a hedge) and the breaker to let
// attempt number c.n+1 start, and counts it. A refusal is their outcome.
func (c *call) admit() (breaker.Ticket, error) {
	var ticket breaker.Ticket
	if c.n > 0 {
		if err := c.throttled(); err != nil {
			return ticket, err // the first attempt met the throttle in refusal
		}
	}
	if b := c.s.breaker; b != nil {
		t, ok, retry := b.Allow()
		if !ok {
			return t, c.openError(retry)
		}
		ticket = t
	}
	c.n++
	return ticket, nil
}

// run makes attempt number n, admitted with ticket, under actx (the
// call's context, or a hedge's cancellable child), in a child span, and
// tells the breaker and the throttle how it ended.
func (c *call) run(attempt func(context.Context) error, n int, hedge bool, actx context.Context, ticket breaker.Ticket) (err error) {
	if t := c.s.p.AttemptTimeout; t > 0 {
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeout(actx, t)
		defer func() {
			if err != nil {
				cancel() // a success's context stays live (for its body) until its timer ends
			}
		}()
	}
	// The caller's span's provider: an attempt's span is its child, and
	// a call without a span gets none.
	tracer := trace.SpanFromContext(c.ctx).TracerProvider().Tracer(tracerName)
	actx, span := tracer.Start(actx, "outbound "+c.d.name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("sundial.dependency", c.d.name),
			attribute.Int("sundial.attempt", n), attribute.Bool("sundial.hedge", hedge)))
	c.counted(n, hedge)
	began := time.Now()
	err = attempt(actx)
	if err != nil {
		span.SetStatus(codes.Error, pipeline.ErrorText(err))
	} else if q := c.s.p.HedgeQuantile; q > 0 {
		c.d.lat.record(time.Since(began), q)
	}
	span.End()
	if c.s.breaker == nil && c.s.throttle == nil {
		return err
	}
	v := c.verdict(actx, err)
	if b := c.s.breaker; b != nil {
		b.Done(ticket, v)
	}
	if t := c.s.throttle; t != nil {
		t.record(v)
	}
	return err
}

// verdict judges an attempt for the breaker: a failure when the downstream
// failed it, neutral when the call's own context ended (the caller left,
// or its deadline passed) or the caller was at fault.
func (c *call) verdict(actx context.Context, err error) breaker.Result {
	if err == nil {
		return breaker.Success
	}
	if c.ctx.Err() != nil || actx.Err() == context.Canceled {
		return breaker.Neutral
	}
	if cl, _, _ := classify(err); cl == final {
		return breaker.Neutral
	}
	return breaker.Failure
}
