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

// ResilienceMiddleware applies the limits of one operation: the second
// built-in of the Resilience stage, right inside [DeadlineMiddleware] (the
// kernel runs both as one middleware, see [WithLimits]). Create it with
// [NewResilienceMiddleware], once per operation ID per process; the kernel
// does this at kernel.New.
//
// Each invocation meets, in this order:
//
//  1. the circuit breaker (FailureThreshold, BreakSeconds). It opens after
//     FailureThreshold consecutive failures and rejects every call for
//     BreakSeconds with KERNEL_UNAVAILABLE_004 and a retry-after, the time
//     until it half-opens. Then exactly one call — the probe — goes
//     through while the others are rejected; the probe's success closes
//     the breaker, its failure re-opens it, and a probe that says nothing
//     about the operation's health (its caller left, a limiter turned it
//     away, the caller was at fault) frees the half-open slot so that the
//     next call probes: a lost probe never leaves the breaker stuck
//     half-open. A probe whose handler ignores its context is judged at
//     its deadline, and its slot freed then, not when the handler returns.
//  2. the fixed-window rate limit (PermitLimit, WindowSeconds,
//     QueueLimit); see [FixedWindow]. Rejection: KERNEL_UNAVAILABLE_002
//     with a retry-after, the time until the next window.
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
// The breaker counts what says something about the operation's health,
// and nothing else:
//
//   - success closes a half-open breaker and resets the run of failures;
//   - TIMEOUT returned while the handler's context is live (a downstream's
//     504), UNAVAILABLE other than a throttling rejection, UNEXPECTED, any
//     error that is not a *pipeline.Error, and panics are failures;
//   - an invocation whose deadline ended its context is a failure when
//     that deadline was the operation's own (TimeoutSeconds) or the
//     kernel's cap — the operation did not finish in the time it is
//     given — and neutral when it was the caller's: a caller's short
//     deadline must not open the breaker for everyone. This holds whatever
//     the handler returned;
//   - caller faults (VALIDATION, UNAUTHENTICATED, FORBIDDEN, NOT_FOUND,
//     CONFLICT, UNPROCESSABLE), throttling rejections (KERNEL_UNAVAILABLE_002 and _003,
//     including those of application limiters built on [RateLimited] and
//     [ConcurrencyLimited]), an idempotency store that did not answer
//     (KERNEL_UNAVAILABLE_006), replayed outcomes (an idempotency key's
//     stored outcome: nothing ran) and cancellations are neutral: they neither
//     count, nor reset the run of failures, nor close a half-open breaker.
//     A bad request says nothing of the operation's health — it must
//     neither keep the breaker closed while valid calls fail nor close an
//     open one as a probe — and a per-tenant limit must not open the
//     breaker for every tenant.
//
// Calls still running when the breaker changed state do not change it when
// they finish. An invocation whose deadline had passed on arrival is ended
// by the DeadlineMiddleware and never reaches the breaker.
//
// Invoke receives the handler's context, bounded by the invocation's
// deadline: the ResilienceMiddleware must run inside a DeadlineMiddleware.
//
// The limits are per process — with N replicas an operation admits N
// times PermitLimit calls per window — unless the kernel hands a shared
// window and shared slots (Policy.Scope cluster; [WithSharedWindow],
// [WithSharedSlots]). The breaker is always per process. ResilienceMiddleware is safe for
// concurrent use; a nil *ResilienceMiddleware reports a closed breaker and
// empty queues.
type ResilienceMiddleware struct {
	id string
	// cur is the limits in force; a call loads it once, on arrival, and
	// keeps what it loaded to its end. Update replaces it (a reload).
	cur atomic.Pointer[limitSet]

	rateLimited  rejections
	circuitOpen  rejections
	concLimitErr *pipeline.Error
	concRejected atomic.Int64
}

// limitSet is the limits of one operation under one policy. Limiters are
// shared between the sets of successive policies when they are changed
// in place (see Update).
type limitSet struct {
	policy  Policy
	breaker *breaker.Breaker    // nil: no breaker
	window  *FixedWindow        // nil: no rate limit
	conc    *ConcurrencyLimiter // nil: no concurrency limit

	// A WindowSeconds change takes effect at the next boundary: from
	// switchAt on, calls take their permits in next.
	next     *FixedWindow
	switchAt time.Time

	// With Scope cluster, the window and the slots are counted elsewhere
	// (WithSharedWindow, WithSharedSlots) and window/conc stay nil.
	sharedWindow SharedWindow
	sharedSlots  SharedSlots
}

// limited reports whether s has any limit to apply.
func (s *limitSet) limited() bool {
	return s.breaker != nil || s.window != nil || s.conc != nil || s.sharedWindow != nil || s.sharedSlots != nil
}

// windowAt returns the window calls arriving at now take their permits in.
func (s *limitSet) windowAt(now time.Time) *FixedWindow {
	if s.next != nil && !now.Before(s.switchAt) {
		return s.next
	}
	return s.window
}

// NewResilienceMiddleware returns the ResilienceMiddleware of the
// operation id under policy p. It never returns nil: when p configures no
// breaker, rate limit or concurrency limit, the middleware passes every
// call straight through. Values the configuration would refuse (a
// non-positive window or break, a negative queue) are replaced by their
// defaults. Options hand in a window and slots counted outside the
// process (Scope cluster).
func NewResilienceMiddleware(id string, p Policy, opts ...Option) *ResilienceMiddleware {
	p = normalize(p)
	l := &ResilienceMiddleware{id: id}
	l.rateLimited = newRejections(id, RateLimited, p.Window)
	l.circuitOpen = newRejections(id, CircuitOpen, p.BreakDuration)
	l.concLimitErr = ConcurrencyLimited(id)
	l.cur.Store(newLimitSet(nil, p, time.Now(), opts))
	return l
}

func normalize(p Policy) Policy {
	if p.Window <= 0 {
		p.Window = DefaultWindow
	}
	if p.BreakDuration <= 0 {
		p.BreakDuration = DefaultBreakDuration
	}
	p.QueueLimit = max(p.QueueLimit, 0)
	p.ConcurrencyQueueLimit = max(p.ConcurrencyQueueLimit, 0)
	return p
}

// newLimitSet builds the limits of policy p, taking over those of old
// (nil: none) in place where it can (see Update).
func newLimitSet(old *limitSet, p Policy, now time.Time, opts []Option) *limitSet {
	s := &limitSet{policy: p}
	if !p.Limited() {
		return s
	}
	for _, o := range opts {
		if o != nil {
			o.apply(s)
		}
	}
	if p.PermitLimit == 0 {
		s.sharedWindow = nil
	}
	if p.ConcurrencyLimit == 0 {
		s.sharedSlots = nil
	}
	if old == nil {
		old = &limitSet{}
	}
	if p.FailureThreshold > 0 {
		s.breaker = old.breaker
		if s.breaker == nil {
			s.breaker = breaker.New(p.FailureThreshold, p.BreakDuration)
		} else if th, bd := s.breaker.Thresholds(); th != min(p.FailureThreshold, breaker.MaxThreshold) || bd != p.BreakDuration {
			s.breaker = breaker.Carry(old.breaker, p.FailureThreshold, p.BreakDuration)
		}
	}
	if p.PermitLimit > 0 && s.sharedWindow == nil {
		if w := old.windowAt(now); w != nil {
			s.window, s.next, s.switchAt = w.reconfigure(now, p.PermitLimit, p.Window, p.QueueLimit)
		} else {
			s.window = newOperationWindow(p.PermitLimit, p.Window, p.QueueLimit)
		}
	}
	if p.ConcurrencyLimit > 0 && s.sharedSlots == nil {
		if s.conc = old.conc; s.conc != nil {
			s.conc.setLimits(p.ConcurrencyLimit, p.ConcurrencyQueueLimit)
		} else {
			s.conc = newConcurrencyLimiter(p.ConcurrencyLimit, p.ConcurrencyQueueLimit)
		}
	}
	return s
}

// Update puts policy p in force for the calls that arrive from now on,
// keeping what the limiters know (a reload; docs/resilience.md, "Changing
// limits at run time"):
//
//   - the fixed window keeps its origin and the permits taken in the
//     current window; a new PermitLimit applies at once (a lower one admits
//     nothing more in this window once the permits taken reach it), a new
//     WindowSeconds from the next boundary on, a new QueueLimit to
//     arrivals; queued calls keep their place and are admitted no faster
//     than the new limit allows;
//   - the concurrency limit keeps the calls in flight; a lower limit
//     admits nobody until fewer are in flight; a shorter queue turns its
//     newest excess waiters away with KERNEL_UNAVAILABLE_003;
//   - the breaker keeps its state and its counts; when FailureThreshold
//     or BreakSeconds change, a closed breaker keeps its run of failures
//     (the next failure opens it if the run already reaches the new
//     threshold), an open one stays open until its current break ends
//     and a half-open one lets the next call probe;
//   - a limit the policy gains starts empty; a limit it loses is dropped
//     (calls holding its permits or slots finish normally).
//
// Options hand in the shared window and slots of Scope cluster, as for
// NewResilienceMiddleware; a policy moving between scopes starts the
// limits of its new scope. Calls already admitted, or waiting in a queue,
// keep the limits they met. Update is safe for concurrent use with
// calls; concurrent Updates are not (the kernel serialises reloads).
func (l *ResilienceMiddleware) Update(p Policy, opts ...Option) {
	p = normalize(p)
	old := l.cur.Load()
	if (p.Scope == ScopeCluster) != (old.policy.Scope == ScopeCluster) {
		old = &limitSet{breaker: old.breaker}
	}
	l.cur.Store(newLimitSet(old, p, time.Now(), opts))
}

// limited reports whether l has any limit to apply now.
func (l *ResilienceMiddleware) limited() bool {
	return l != nil && l.cur.Load().limited()
}

// Invoke implements pipeline.Middleware. ctx must be the handler's
// context, bounded by the invocation's deadline: run it inside a
// [DeadlineMiddleware] (or with [WithLimits]).
func (l *ResilienceMiddleware) Invoke(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
	a, rejected := l.admitNow(inv)
	if rejected != nil {
		return nil, rejected
	}
	return l.proceed(ctx, inv, next, a)
}

// admission is what the limits hold for one call.
type admission struct {
	set    *limitSet    // nil: no limit applies
	win    *FixedWindow // not nil: wait in this window's queue
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
//
// The window counts the call at its arrival (the kernel's reading of the
// clock, [pipeline.Invocation.Arrival]; the clock when it is not known).
func (l *ResilienceMiddleware) admitNow(inv *pipeline.Invocation) (a admission, rejected error) {
	s := l.cur.Load()
	if !s.limited() {
		return a, nil
	}
	a.set = s
	if s.breaker != nil {
		var ok bool
		var retry time.Duration
		if a.ticket, ok, retry = s.breaker.Allow(); !ok {
			return a, l.circuitOpen.get(retry)
		}
	}
	if s.sharedWindow != nil {
		return a, nil // proceed takes it, then the slot
	}
	if s.window != nil {
		now, known := inv.Arrival()
		if !known {
			now = time.Now()
		}
		w := s.windowAt(now)
		if w.nq == nil {
			a.win = w
			return a, nil
		}
		since := max(now.Sub(w.origin), 0)
		ok, retry, index := w.nq.take(since)
		if s.policy.RateLimitHeaders {
			inv.SetQuota(w.nq.quotaOf(index, since))
		}
		if !ok {
			s.neutral(a.ticket)
			return a, l.rateLimited.get(retry)
		}
		a.window = true
	}
	if s.conc != nil && s.conc.queueLimit.Load() == 0 {
		// Without a queue Acquire never waits, whatever the context.
		if s.conc.Acquire(context.Background()) != nil {
			s.neutral(a.ticket)
			return a, l.concRejection()
		}
		a.conc = true
	}
	return a, nil
}

// callerEnd returns the TIMEOUT or CANCELLED outcome when a shared
// limiter's failure err is the caller's own end, else nil: ctx has ended,
// or the limiter saw the deadline pass before ctx's timer fired and
// returned the context's error for it (a shared limiter compares the
// deadline with the clock, to spend no round trip on a call that cannot
// run). Without the second case such a call was told it was rate or
// concurrency limited.
func callerEnd(ctx context.Context, err error) *pipeline.Error {
	if e := Attribute(ctx); e != nil {
		return e
	}
	if d, ok := ctx.Deadline(); ok && errors.Is(err, context.DeadlineExceeded) && !time.Now().Before(d) {
		return pipeline.ErrTimeout()
	}
	return nil
}

// proceed waits in the queues admitNow left, with the call's context, then
// runs next and releases what the call holds.
func (l *ResilienceMiddleware) proceed(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler, a admission) (out any, err error) {
	s := a.set
	if s == nil {
		return next(ctx, inv)
	}
	if w := a.win; w != nil && !a.window {
		_, retry, werr := w.wait(ctx)
		if s.policy.RateLimitHeaders {
			inv.SetQuota(w.quota())
		}
		if werr != nil {
			s.neutral(a.ticket)
			if werr == ErrLimited {
				return nil, l.rateLimited.get(retry)
			}
			return nil, Attribute(ctx)
		}
	}
	var release func()
	for attempt := 1; s.sharedWindow != nil || s.sharedSlots != nil; attempt++ {
		var until time.Time
		if s.sharedWindow != nil {
			q, werr := s.sharedWindow.Take(ctx, inv)
			if q.Reset > 0 {
				until = time.Now().Add(q.Reset)
			}
			if s.policy.RateLimitHeaders {
				inv.SetQuota(q)
			}
			if werr != nil {
				s.neutral(a.ticket)
				if e := callerEnd(ctx, werr); e != nil {
					return nil, e
				}
				retry := s.policy.Window
				if le, ok := werr.(*LimitedError); ok {
					retry = le.RetryAfter
				}
				return nil, l.rateLimited.get(retry)
			}
		}
		if s.sharedSlots != nil {
			var cerr error
			if release, cerr = s.sharedSlots.Acquire(ctx, inv); cerr != nil {
				s.neutral(a.ticket)
				if e := callerEnd(ctx, cerr); e != nil {
					return nil, e
				}
				return nil, l.concRejection()
			}
		}
		// A call runs in the window that admitted it: the shared window
		// reports, conservatively, how long its window lasts from Take's
		// return (Quota.Reset; 0 when it does not say, as a degraded
		// store's local fallback). When the slot took longer than that, the
		// permit is left unused and the call asks the window again, so
		// that no window's calls spill into the next one.
		if until.IsZero() || time.Now().Before(until) {
			break
		}
		if release != nil {
			release()
			release = nil
		}
		if attempt == maxSharedAttempts {
			s.neutral(a.ticket)
			return nil, l.rateLimited.get(s.policy.Window)
		}
	}
	if s.conc != nil && !a.conc {
		if cerr := s.conc.Acquire(ctx); cerr != nil {
			s.neutral(a.ticket)
			if cerr == ErrLimited {
				return nil, l.concRejection()
			}
			return nil, Attribute(ctx)
		}
	}
	var probe *probeWatch
	if s.breaker != nil && a.ticket.Probe() {
		probe = s.watchProbe(ctx, inv, a.ticket)
	}
	finished := false
	defer func() {
		if s.conc != nil {
			s.conc.Release()
		}
		if release != nil {
			release()
		}
		if s.breaker != nil {
			r := breaker.Failure // next panicked
			if finished {
				r = breakerResult(ctx, inv, err)
			}
			if probe == nil || probe.claim() {
				s.breaker.Done(a.ticket, r)
			}
		}
	}()
	out, err = next(ctx, inv)
	finished = true
	return out, err
}

// maxSharedAttempts bounds how often a call asks a shared window again
// because its slot came after its window had ended.
const maxSharedAttempts = 3

// probeWatch judges a half-open probe at the end of its context, when that
// comes before its handler returns: a probe whose handler ignores its
// context must not hold the half-open slot — and keep every other call
// rejected — until it returns. Done is called once per ticket, by
// whichever of the two comes first.
type probeWatch struct {
	claimed atomic.Bool
	stop    func() bool
}

// watchProbe arms a probeWatch for the probe t running under ctx.
func (s *limitSet) watchProbe(ctx context.Context, inv *pipeline.Invocation, t breaker.Ticket) *probeWatch {
	w := new(probeWatch)
	w.stop = context.AfterFunc(ctx, func() {
		if w.claimed.CompareAndSwap(false, true) {
			s.breaker.Done(t, endedResult(ctx, inv))
		}
	})
	return w
}

// claim stops the watch and reports whether the caller is the one to call
// Done (false: the watch did, at the end of the context).
func (w *probeWatch) claim() bool {
	w.stop()
	return w.claimed.CompareAndSwap(false, true)
}

func (l *ResilienceMiddleware) concRejection() *pipeline.Error {
	l.concRejected.Add(1)
	return l.concLimitErr
}

func (s *limitSet) neutral(t breaker.Ticket) {
	if s.breaker != nil {
		s.breaker.Done(t, breaker.Neutral)
	}
}

// breakerResult classifies the outcome err of an invocation inv that ran
// under the handler's context ctx, for the circuit breaker. The breaker
// counts what says something about the operation's health, and nothing
// else:
//
//   - A context that has ended is judged by how it ended, whatever the
//     handler returned, success included (what the caller sees is the
//     TIMEOUT or CANCELLED the DeadlineMiddleware attributes; a half-open
//     probe whose handler ignores its context is judged the same way at
//     the end of its context): at the invocation's deadline, a
//     failure when the binding deadline was the operation's own
//     ([pipeline.DeadlineOperation] or [pipeline.DeadlineKernel]: the
//     operation did not finish in the time it is given, e.g. a downstream
//     that hangs while handlers honour their context), neutral when it was
//     the caller's ([pipeline.DeadlineCaller]: a caller's short deadline
//     must not open the breaker for everyone); by cancellation, neutral.
//     The same holds for a [BudgetExhaustedError] bounded by the
//     invocation's deadline: the handler stopped early for the reason the
//     deadline would have stopped it.
//   - Success (err is nil) closes a half-open breaker and resets the run
//     of failures: the operation worked.
//   - Neutral — neither counted, nor resetting the run of failures, nor
//     closing a half-open breaker (a neutral probe frees the slot for the
//     next call): a replayed outcome (an idempotency key's stored outcome:
//     nothing ran, and one client retrying a failed call's key must not
//     open the breaker for everyone); an idempotency store that did not
//     answer (KERNEL_UNAVAILABLE_006: nothing ran); throttling rejections
//     (KERNEL_UNAVAILABLE_002 and _003,
//     including those of application limiters built on [RateLimited] and
//     [ConcurrencyLimited]: the operation did not run, and a per-tenant
//     limit must not open the breaker for every tenant); caller faults
//     (VALIDATION, UNAUTHENTICATED, FORBIDDEN, NOT_FOUND, CONFLICT: a bad
//     request says nothing of the operation's health, so it must neither
//     keep a breaker closed while valid calls fail nor close an open one as
//     a probe); CANCELLED (the caller left).
//   - Failure: TIMEOUT returned while the context is still live (a
//     downstream's 504), UNAVAILABLE other than throttling, UNEXPECTED,
//     any error that is not a *pipeline.Error (typed nils included), and
//     panics (the caller of breakerResult counts those).
func breakerResult(ctx context.Context, inv *pipeline.Invocation, err error) breaker.Result {
	if inv.Replayed() || err != nil && pipeline.CodeOf(Original(err)) == pipeline.CodeIdempotencyStore {
		// Nothing ran: neutral, even when the deadline passed while the
		// store was asked (a hung store must not open the breaker).
		return breaker.Neutral
	}
	if ctx.Err() != nil {
		return endedResult(ctx, inv)
	}
	if err == nil {
		return breaker.Success
	}
	e := pipeline.AsError(err)
	switch e.Code() {
	case pipeline.CodeRateLimited, pipeline.CodeConcurrencyLimited, pipeline.CodeIdempotencyStore:
		return breaker.Neutral
	}
	switch e.Kind() {
	case pipeline.KindValidation, pipeline.KindUnauthenticated, pipeline.KindForbidden,
		pipeline.KindNotFound, pipeline.KindConflict, pipeline.KindUnprocessable, pipeline.KindCanceled:
		return breaker.Neutral
	case pipeline.KindTimeout:
		if callerBoundBudget(err) {
			return deadlineResult(inv)
		}
	}
	return breaker.Failure
}

// endedResult classifies an invocation whose context ctx has ended (see
// breakerResult): by its deadline, as deadlineResult says; by
// cancellation, neutral.
func endedResult(ctx context.Context, inv *pipeline.Invocation) breaker.Result {
	if Attribute(ctx).Kind() == pipeline.KindTimeout {
		return deadlineResult(inv)
	}
	return breaker.Neutral
}

// deadlineResult classifies an invocation stopped by its deadline: a
// failure when the deadline was the operation's own or the kernel's cap,
// neutral when it was the caller's.
func deadlineResult(inv *pipeline.Invocation) breaker.Result {
	switch inv.DeadlineSource() {
	case pipeline.DeadlineOperation, pipeline.DeadlineKernel:
		return breaker.Failure
	}
	return breaker.Neutral
}

// ID returns the operation ID.
func (l *ResilienceMiddleware) ID() string {
	if l == nil {
		return ""
	}
	return l.id
}

// Policy returns the policy the limits were built from.
func (l *ResilienceMiddleware) Policy() Policy {
	if l == nil {
		return Policy{}
	}
	return l.cur.Load().policy
}

// BreakerState returns the state of the operation's circuit breaker:
// BreakerClosed when it has none. An open breaker whose break is over
// reports BreakerHalfOpen (the next call probes).
func (l *ResilienceMiddleware) BreakerState() BreakerState {
	if l == nil || l.cur.Load().breaker == nil {
		return BreakerClosed
	}
	return BreakerState(l.cur.Load().breaker.State())
}

// BreakerOpenFor returns how long the operation's breaker stays open before
// it half-opens (0 when it is not open or there is none).
func (l *ResilienceMiddleware) BreakerOpenFor() time.Duration {
	if l == nil || l.cur.Load().breaker == nil {
		return 0
	}
	return l.cur.Load().breaker.OpenFor()
}

// WindowQuota returns the current state of the operation's fixed window —
// permits left and time to reset — and false when it has no rate limit in
// this process (none configured, or Scope cluster: the shared window's
// state is in the store).
func (l *ResilienceMiddleware) WindowQuota() (Quota, bool) {
	if l == nil || l.cur.Load().window == nil {
		return Quota{}, false
	}
	return l.cur.Load().windowAt(time.Now()).quota(), true
}

// Rejections counts the calls each limit turned away since the process
// started.
type Rejections struct {
	Rate, Concurrency, Breaker int64
}

// Rejections returns the calls the operation's limits turned away.
func (l *ResilienceMiddleware) Rejections() Rejections {
	if l == nil {
		return Rejections{}
	}
	return Rejections{Rate: l.rateLimited.count.Load(), Concurrency: l.concRejected.Load(), Breaker: l.circuitOpen.count.Load()}
}

// RateQueueDepth returns the number of calls waiting for the next rate
// limit window.
func (l *ResilienceMiddleware) RateQueueDepth() int {
	if l == nil || l.cur.Load().window == nil {
		return 0
	}
	s := l.cur.Load()
	n := s.window.QueueDepth()
	if s.next != nil {
		n += s.next.QueueDepth()
	}
	return n
}

// ConcurrencyQueueDepth returns the number of calls waiting for a
// concurrency slot.
func (l *ResilienceMiddleware) ConcurrencyQueueDepth() int {
	if l == nil {
		return 0
	}
	s := l.cur.Load()
	if s.sharedSlots != nil {
		if q, ok := s.sharedSlots.(interface{ QueueDepth() int }); ok {
			return q.QueueDepth() // this process's waiters
		}
	}
	if s.conc == nil {
		return 0
	}
	return s.conc.QueueDepth()
}

// InFlight returns the number of calls holding a concurrency slot, or 0
// when the operation has no concurrency limit.
func (l *ResilienceMiddleware) InFlight() int {
	if l == nil || l.cur.Load().conc == nil {
		return 0
	}
	return l.cur.Load().conc.InFlight()
}

// RateLimited returns the outcome of a call turned away by a rate limit:
// UNAVAILABLE, KERNEL_UNAVAILABLE_002, detail "id" (the operation ID) and
// a retry-after of retryAfter rounded up to whole seconds (at least 1),
// e.g. "Operation 'orders.create' is rate limited; retry after 60
// seconds.". The breaker does not count it.
func RateLimited(id string, retryAfter time.Duration) *pipeline.Error {
	n := pipeline.RetryAfterSeconds(retryAfter)
	return rejection(pipeline.CodeRateLimited, id, n,
		fmt.Sprintf("Operation '%s' is rate limited; retry after %s.", id, seconds(n)))
}

// CircuitOpen returns the outcome of a call turned away by an open circuit
// breaker: UNAVAILABLE, KERNEL_UNAVAILABLE_004, detail "id" and a
// retry-after of retryAfter (the time until the breaker half-opens)
// rounded up to whole seconds (at least 1).
func CircuitOpen(id string, retryAfter time.Duration) *pipeline.Error {
	n := pipeline.RetryAfterSeconds(retryAfter)
	return rejection(pipeline.CodeCircuitOpen, id, n,
		fmt.Sprintf("Operation '%s' is unavailable: its circuit breaker is open; retry after %s.", id, seconds(n)))
}

// ConcurrencyLimited returns the outcome of a call turned away by a
// concurrency limit: UNAVAILABLE, KERNEL_UNAVAILABLE_003, detail "id".
// The breaker does not count it.
func ConcurrencyLimited(id string) *pipeline.Error {
	return pipeline.NewError(pipeline.KindUnavailable, pipeline.CodeConcurrencyLimited,
		fmt.Sprintf("Operation '%s' has too many calls in progress; retry later.", id)).
		WithDetail("id", id)
}

func rejection(code, id string, retryAfter int64, msg string) *pipeline.Error {
	return pipeline.NewError(pipeline.KindUnavailable, code, msg).
		WithDetail("id", id).
		WithRetryAfter(time.Duration(retryAfter) * time.Second)
}

func seconds(n int64) string {
	if n == 1 {
		return "1 second"
	}
	return fmt.Sprintf("%d seconds", n)
}

// maxCachedRetry bounds the rejections cached per operation and kind.
const maxCachedRetry = 120

// rejections caches the rejection outcomes of one operation by retryAfter
// second, so that a rejection allocates only the first time its value
// occurs (an *pipeline.Error cannot change, so sharing it is safe). Values beyond maxCachedRetry share one slot holding the latest:
// they change once a second at most.
type rejections struct {
	count atomic.Int64 // rejections handed out
	id    string
	make  func(id string, retryAfter time.Duration) *pipeline.Error
	cache []atomic.Pointer[pipeline.Error] // index: retryAfter seconds
	last  atomic.Pointer[lastRejection]    // retryAfter >= len(cache)
}

type lastRejection struct {
	seconds int64
	err     *pipeline.Error
}

func newRejections(id string, mk func(string, time.Duration) *pipeline.Error, longest time.Duration) rejections {
	return rejections{id: id, make: mk, cache: make([]atomic.Pointer[pipeline.Error], min(pipeline.RetryAfterSeconds(longest), maxCachedRetry)+1)}
}

func (r *rejections) get(retryAfter time.Duration) *pipeline.Error {
	r.count.Add(1)
	n := pipeline.RetryAfterSeconds(retryAfter)
	if n >= int64(len(r.cache)) {
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
