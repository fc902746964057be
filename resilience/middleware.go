package resilience

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience/internal/breaker"
)

// OperationLimits is the ResilienceMiddleware of one operation: the second
// built-in of the Resilience stage, right inside [DeadlineMiddleware].
// Create it with [NewResilienceMiddleware], once per operation ID per
// process; the kernel does this at kernel.New.
//
// Each invocation meets, in this order:
//
//  1. the circuit breaker (FailureThreshold, BreakSeconds). It opens after
//     FailureThreshold consecutive failures and rejects every call for
//     BreakSeconds with KERNEL_UNAVAILABLE_004 and details.retryAfter, the
//     seconds until it half-opens. Then exactly one call — the probe —
//     goes through while the others are rejected; the probe's success
//     closes the breaker, its failure re-opens it, and a probe that did
//     not finish (its caller left, its deadline fired, a limiter turned
//     it away) frees the half-open slot so that the next call probes: a
//     lost probe never leaves the breaker stuck half-open.
//  2. the fixed-window rate limit (PermitLimit, WindowSeconds,
//     QueueLimit); see [FixedWindow]. Rejection: KERNEL_UNAVAILABLE_002
//     with details.retryAfter, the seconds until the next window.
//  3. the concurrency limit (ConcurrencyLimit, ConcurrencyQueueLimit); see
//     [ConcurrencyLimiter]. Rejection: KERNEL_UNAVAILABLE_003. The slot is
//     released on every exit path, panics included.
//
// Limits that are not configured are skipped. A rejection is an
// UNAVAILABLE outcome with details.id, the operation ID, and a readable
// message; it never reaches later middleware or the handler. A wait in a
// queue ends when the call may proceed, at the invocation's deadline
// (KERNEL_TIMEOUT_001) or when the caller cancels (KERNEL_CANCELLED_001),
// and leaves nothing behind.
//
// What the breaker counts is the outcome the handler (and the middleware
// inside this one) returned, before the DeadlineMiddleware attributed it:
//
//   - success, and outcomes that are the caller's fault (VALIDATION,
//     NOT_FOUND, FORBIDDEN, UNAUTHENTICATED, CONFLICT), count as
//     successes: they reset the failure count and close a half-open
//     breaker;
//   - TIMEOUT, UNAVAILABLE, UNEXPECTED, any error that is not a
//     *pipeline.Error, and panics count as failures;
//   - CANCELLED, and a TIMEOUT or CANCELLED returned after the
//     invocation's own context ended (see [IsOwnCancellation]: the
//     caller's deadline or departure, not the operation's failure), count
//     as nothing. A TIMEOUT the handler reports while its context is still
//     alive — a downstream call timed out — is a failure;
//   - a rejection by a limiter (KERNEL_UNAVAILABLE_002 or _003, including
//     those of application limiters built on [RateLimited] and
//     [ConcurrencyLimited]) counts as nothing: the operation did not run,
//     and a per-tenant limit must not open the breaker for every tenant.
//
// Calls still running when the breaker changed state do not change it when
// they finish. An invocation whose deadline had passed on arrival is ended
// by the DeadlineMiddleware and never reaches the breaker.
//
// The limits are per process: with N replicas an operation admits N times
// PermitLimit calls per window. OperationLimits is safe for concurrent use;
// a nil *OperationLimits reports a closed breaker and empty queues.
type OperationLimits struct {
	id      string
	policy  Policy
	breaker *breaker.Breaker    // nil: no breaker
	window  *FixedWindow        // nil: no rate limit
	conc    *ConcurrencyLimiter // nil: no concurrency limit

	rateLimited  rejections
	circuitOpen  rejections
	concLimitErr *pipeline.Error
}

// NewResilienceMiddleware returns the ResilienceMiddleware of the
// operation id under policy p, or nil when p configures no breaker, rate
// limit or concurrency limit: such an operation passes straight through
// and the kernel adds no middleware for it. Values ParseOptions would
// refuse (a non-positive window or break, a negative queue) are replaced
// by their defaults.
func NewResilienceMiddleware(id string, p Policy) *OperationLimits {
	if !p.Limited() {
		return nil
	}
	if p.Window <= 0 {
		p.Window = DefaultWindow
	}
	if p.BreakDuration <= 0 {
		p.BreakDuration = DefaultBreakDuration
	}
	p.QueueLimit = max(p.QueueLimit, 0)
	p.ConcurrencyQueueLimit = max(p.ConcurrencyQueueLimit, 0)
	l := &OperationLimits{
		id:           id,
		policy:       p,
		rateLimited:  newRejections(id, RateLimited, p.Window),
		circuitOpen:  newRejections(id, CircuitOpen, p.BreakDuration),
		concLimitErr: ConcurrencyLimited(id),
	}
	if p.FailureThreshold > 0 {
		l.breaker = breaker.New(p.FailureThreshold, p.BreakDuration)
	}
	if p.PermitLimit > 0 {
		l.window = newOperationWindow(p.PermitLimit, p.Window, p.QueueLimit)
	}
	if p.ConcurrencyLimit > 0 {
		l.conc = newConcurrencyLimiter(p.ConcurrencyLimit, p.ConcurrencyQueueLimit)
	}
	return l
}

// Invoke implements pipeline.Middleware. It reads the deadline-bounded
// context from inv.Context(), so it must run inside the DeadlineMiddleware
// (or use [Stage], which runs both as one).
func (l *OperationLimits) Invoke(inv *pipeline.Invocation, next pipeline.Handler) error {
	a, rejected := l.admitNow()
	if rejected != nil {
		return rejected
	}
	return l.proceed(inv, next, a)
}

// admission is what the limits hold for one call.
type admission struct {
	ticket breaker.Ticket
	// window and conc report that a permit and a slot are held; when one
	// is not and its limit is configured, the call must wait in its queue
	// (proceed does).
	window, conc bool
}

// admitNow takes what needs no waiting, in order: the breaker's ticket, a
// permit of a window without a queue, a slot of a concurrency limit
// without a queue. It stops at the first limit with a queue, which
// proceed waits on with the call's context, and returns the rejection of
// a limit that turns the call away.
func (l *OperationLimits) admitNow() (a admission, rejected error) {
	if l.breaker != nil {
		var ok bool
		var retry time.Duration
		if a.ticket, ok, retry = l.breaker.Allow(); !ok {
			return a, l.circuitOpen.get(retry)
		}
	}
	if l.window != nil {
		if l.window.nq == nil {
			return a, nil
		}
		ok, retry := l.window.nq.take(time.Since(l.window.origin))
		if !ok {
			l.neutral(a.ticket)
			return a, l.rateLimited.get(retry)
		}
		a.window = true
	}
	if l.conc != nil && l.conc.queueLimit == 0 {
		// Without a queue Acquire never waits, whatever the context.
		if l.conc.Acquire(context.Background()) != nil {
			l.neutral(a.ticket)
			return a, l.concLimitErr
		}
		a.conc = true
	}
	return a, nil
}

// proceed waits in the queues admitNow left, with the call's context, then
// runs next and releases what the call holds.
func (l *OperationLimits) proceed(inv *pipeline.Invocation, next pipeline.Handler, a admission) (err error) {
	ctx := inv.Context()
	if l.window != nil && !a.window {
		if _, retry, werr := l.window.wait(ctx); werr != nil {
			l.neutral(a.ticket)
			if werr == ErrLimited {
				return l.rateLimited.get(retry)
			}
			return attributeDone(ctx)
		}
	}
	if l.conc != nil && !a.conc {
		if cerr := l.conc.Acquire(ctx); cerr != nil {
			l.neutral(a.ticket)
			if cerr == ErrLimited {
				return l.concLimitErr
			}
			return attributeDone(ctx)
		}
	}
	finished := false
	defer func() {
		if l.conc != nil {
			l.conc.Release()
		}
		if l.breaker != nil {
			r := breaker.Failure // next panicked
			if finished {
				r = breakerResult(ctx, err)
			}
			l.breaker.Done(a.ticket, r)
		}
	}()
	err = next(inv)
	finished = true
	return err
}

func (l *OperationLimits) neutral(t breaker.Ticket) {
	if l.breaker != nil {
		l.breaker.Done(t, breaker.Neutral)
	}
}

// breakerResult classifies an outcome for the breaker (see
// OperationLimits).
func breakerResult(ctx context.Context, err error) breaker.Result {
	if err == nil {
		return breaker.Success
	}
	if IsOwnCancellation(ctx, err) {
		return breaker.Neutral
	}
	if pe, ok := errors.AsType[*pipeline.Error](err); ok && pe != nil && (pe.Code == pipeline.CodeRateLimited || pe.Code == pipeline.CodeConcurrencyLimited) {
		return breaker.Neutral
	}
	switch k := pipeline.KindOf(err); {
	case k == pipeline.KindCancelled:
		return breaker.Neutral
	case k.IsBreakerFailure():
		return breaker.Failure
	}
	return breaker.Success
}

// ID returns the operation ID.
func (l *OperationLimits) ID() string {
	if l == nil {
		return ""
	}
	return l.id
}

// Policy returns the policy the limits were built from.
func (l *OperationLimits) Policy() Policy {
	if l == nil {
		return Policy{}
	}
	return l.policy
}

// BreakerState returns the state of the operation's circuit breaker:
// BreakerClosed when it has none. An open breaker whose break is over
// reports BreakerHalfOpen (the next call probes).
func (l *OperationLimits) BreakerState() BreakerState {
	if l == nil || l.breaker == nil {
		return BreakerClosed
	}
	return BreakerState(l.breaker.State())
}

// RateQueueDepth returns the number of calls waiting for the next rate
// limit window.
func (l *OperationLimits) RateQueueDepth() int {
	if l == nil || l.window == nil {
		return 0
	}
	return l.window.QueueDepth()
}

// ConcurrencyQueueDepth returns the number of calls waiting for a
// concurrency slot.
func (l *OperationLimits) ConcurrencyQueueDepth() int {
	if l == nil || l.conc == nil {
		return 0
	}
	return l.conc.QueueDepth()
}

// InFlight returns the number of calls holding a concurrency slot, or 0
// when the operation has no concurrency limit.
func (l *OperationLimits) InFlight() int {
	if l == nil || l.conc == nil {
		return 0
	}
	return l.conc.InFlight()
}

// RateLimited returns the outcome of a call turned away by a rate limit:
// UNAVAILABLE, KERNEL_UNAVAILABLE_002, details "id" (the operation ID) and
// "retryAfter" (retryAfter in whole seconds, rounded up, at least 1), e.g.
// "Operation 'orders.create' is rate limited; retry after 60 seconds.".
// The breaker does not count it as a failure.
func RateLimited(id string, retryAfter time.Duration) *pipeline.Error {
	n := RetryAfterSeconds(retryAfter)
	return rejection(pipeline.CodeRateLimited, id, n,
		fmt.Sprintf("Operation '%s' is rate limited; retry after %s.", id, seconds(n)))
}

// CircuitOpen returns the outcome of a call turned away by an open circuit
// breaker: UNAVAILABLE, KERNEL_UNAVAILABLE_004, details "id" and
// "retryAfter" (seconds until the breaker half-opens, rounded up, at least
// 1).
func CircuitOpen(id string, retryAfter time.Duration) *pipeline.Error {
	n := RetryAfterSeconds(retryAfter)
	return rejection(pipeline.CodeCircuitOpen, id, n,
		fmt.Sprintf("Operation '%s' is unavailable: its circuit breaker is open; retry after %s.", id, seconds(n)))
}

// ConcurrencyLimited returns the outcome of a call turned away by a
// concurrency limit: UNAVAILABLE, KERNEL_UNAVAILABLE_003, details "id".
// The breaker does not count it as a failure.
func ConcurrencyLimited(id string) *pipeline.Error {
	return &pipeline.Error{
		Kind:    pipeline.KindUnavailable,
		Code:    pipeline.CodeConcurrencyLimited,
		Message: fmt.Sprintf("Operation '%s' has too many calls in progress; retry later.", id),
		Details: map[string]any{"id": id},
	}
}

func rejection(code, id string, retryAfter int, msg string) *pipeline.Error {
	return &pipeline.Error{
		Kind:    pipeline.KindUnavailable,
		Code:    code,
		Message: msg,
		Details: map[string]any{"id": id, "retryAfter": retryAfter},
	}
}

// RetryAfterSeconds rounds d up to whole seconds, at least 1: the
// retryAfter of a rejection.
func RetryAfterSeconds(d time.Duration) int {
	if d <= time.Second {
		return 1
	}
	return int((d + time.Second - 1) / time.Second)
}

func seconds(n int) string {
	if n == 1 {
		return "1 second"
	}
	return fmt.Sprintf("%d seconds", n)
}

// maxCachedRetry bounds the rejections cached per operation and kind.
const maxCachedRetry = 120

// rejections caches the rejection outcomes of one operation by retryAfter
// second, so that a rejection allocates only the first time its value
// occurs. Values beyond maxCachedRetry share one slot holding the latest:
// they change once a second at most.
type rejections struct {
	id    string
	make  func(id string, retryAfter time.Duration) *pipeline.Error
	cache []atomic.Pointer[pipeline.Error] // index: retryAfter seconds
	last  atomic.Pointer[lastRejection]    // retryAfter >= len(cache)
}

type lastRejection struct {
	seconds int
	err     *pipeline.Error
}

func newRejections(id string, mk func(string, time.Duration) *pipeline.Error, longest time.Duration) rejections {
	return rejections{id: id, make: mk, cache: make([]atomic.Pointer[pipeline.Error], min(RetryAfterSeconds(longest), maxCachedRetry)+1)}
}

func (r *rejections) get(retryAfter time.Duration) *pipeline.Error {
	n := RetryAfterSeconds(retryAfter)
	if n >= len(r.cache) {
		if l := r.last.Load(); l != nil && l.seconds == n {
			return l.err
		}
		e := r.make(r.id, retryAfter)
		r.last.Store(&lastRejection{n, e})
		return e
	}
	if e := r.cache[n].Load(); e != nil {
		return e
	}
	e := r.make(r.id, retryAfter)
	r.cache[n].Store(e)
	return e
}
