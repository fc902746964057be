package resilience

import (
	"context"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience/deadline"
	"github.com/sundial-go/sundial/resilience/internal/breaker"
	"github.com/sundial-go/sundial/resilience/internal/deadlinectx"
)

// BreakerState is the state of an operation's circuit breaker.
type BreakerState uint8

// The breaker states. An operation without a breaker is always
// BreakerClosed.
const (
	// BreakerClosed: calls pass; consecutive failures are counted.
	BreakerClosed BreakerState = iota
	// BreakerOpen: calls are rejected with KERNEL_UNAVAILABLE_004 until
	// the break is over.
	BreakerOpen
	// BreakerHalfOpen: the break is over; the next call (or the one
	// running) is the single probe that closes or re-opens the breaker.
	BreakerHalfOpen
)

// String returns "closed", "open" or "half-open".
func (s BreakerState) String() string { return breaker.State(s).String() }

// breakerLimit is the circuit breaker as a [Limit]. It opens after
// FailureThreshold consecutive failures. Then it turns every call away
// for BreakSeconds with KERNEL_UNAVAILABLE_004 and a retry-after: the
// time until it half-opens. Then exactly one call, the probe, goes
// through. Its success closes the breaker and its failure re-opens it. A
// neutral end frees the half-open slot for the next call. A probe is judged at the
// end of its context if its handler has not returned by then. Calls still
// running when the breaker changed state do not change it when they end.
type breakerLimit struct {
	b   *breaker.Breaker
	rej *rejections
}

func (l *Limits) breakerOf(old *chain, p Policy) *breakerLimit {
	if p.FailureThreshold <= 0 {
		return nil
	}
	var b *breaker.Breaker
	switch {
	case old.breaker == nil:
		b = breaker.New(p.FailureThreshold, p.BreakDuration)
	default:
		b = old.breaker.b
		if th, bd := b.Thresholds(); th != min(p.FailureThreshold, breaker.MaxThreshold) || bd != p.BreakDuration {
			b = breaker.Carry(b, p.FailureThreshold, p.BreakDuration)
		}
	}
	return &breakerLimit{b: b, rej: &l.circuitOpen}
}

// TryAcquire implements the optional method of [Limit]: the breaker never waits.
func (bl *breakerLimit) TryAcquire(*pipeline.Invocation) (Permit, bool, error) {
	t, ok, retry := bl.b.Allow()
	if !ok {
		return Permit{}, false, bl.rej.get(retry)
	}
	p := newTokenPermit(bl, t.Token())
	if t.Probe() {
		p = p.ReleasedAtContextEnd()
	}
	return p, false, nil
}

// Acquire implements [Limit].
func (bl *breakerLimit) Acquire(_ context.Context, inv *pipeline.Invocation) (Permit, error) {
	p, _, err := bl.TryAcquire(inv)
	return p, err
}

// release gives back the ticket token with the call's verdict.
func (bl *breakerLimit) release(token uint64, o Outcome) {
	bl.b.Done(breaker.TicketOf(token), breaker.Result(o.Verdict))
}

// The codes of a stream's own ends (package stream, which imports this
// one, defines them). The caller's throttling, a drain, a broken
// connection and the caller's silence say nothing of the operation.
const (
	codeStreamIdle      = "KERNEL_TIMEOUT_003"
	codeStreamRate      = "KERNEL_UNAVAILABLE_011"
	codeStreamDrained   = "KERNEL_UNAVAILABLE_012"
	codeStreamTransport = "KERNEL_UNAVAILABLE_013"
	detailSilent        = "silent"
)

// verdictOf judges the outcome err of an invocation inv that ran under the
// handler's context ctx. The verdict says what err tells of the
// operation's health, for every limit. The rules are in docs/pipeline.md,
// "Circuit breaker".
func verdictOf(ctx context.Context, inv *pipeline.Invocation, err error) Verdict {
	if inv.Reply().Replayed() || err != nil && pipeline.AsError(deadline.Original(err)).Code() == codeIdempotencyStore {
		// Nothing ran: neutral, even when the deadline passed while the
		// store was asked (a hung store must not open the breaker).
		return Neutral
	}
	if ctx.Err() != nil {
		return endedVerdict(ctx, inv)
	}
	if err == nil {
		return Success
	}
	e := pipeline.AsError(err)
	switch e.Code() {
	case CodeRateLimited, CodeConcurrencyLimited, CodeShed, codeIdempotencyStore,
		codeStreamRate, codeStreamDrained, codeStreamTransport:
		return Neutral
	case codeStreamIdle:
		if e.Details()[detailSilent] == "caller" {
			return Neutral
		}
		return Failure
	}
	switch e.Kind() {
	case pipeline.KindValidation, pipeline.KindUnauthenticated, pipeline.KindForbidden,
		pipeline.KindNotFound, pipeline.KindConflict, pipeline.KindUnprocessable, pipeline.KindCanceled:
		return Neutral
	case pipeline.KindTimeout:
		if deadlinectx.CallerBound(err) {
			return deadlineVerdict(inv)
		}
	}
	return Failure
}

// endedVerdict judges an invocation whose context ctx has ended: by its
// deadline, as deadlineVerdict says; by cancellation, neutral.
func endedVerdict(ctx context.Context, inv *pipeline.Invocation) Verdict {
	if deadline.Attribute(ctx).Kind() == pipeline.KindTimeout {
		return deadlineVerdict(inv)
	}
	return Neutral
}

// ownDeadline reports whether the invocation's context ctx was ended by
// its operation's own deadline or the kernel's cap, not its caller's.
func ownDeadline(ctx context.Context, inv *pipeline.Invocation) bool {
	return ctx.Err() != nil && endedVerdict(ctx, inv) == Failure
}

// deadlineVerdict judges an invocation stopped by its deadline: a failure
// when the deadline was the operation's own or the kernel's cap, neutral
// when it was the caller's.
func deadlineVerdict(inv *pipeline.Invocation) Verdict {
	switch inv.Timing().Source {
	case pipeline.DeadlineOperation, pipeline.DeadlineKernel:
		return Failure
	}
	return Neutral
}
