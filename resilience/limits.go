package resilience

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience/deadline"
	"github.com/sundial-go/sundial/resilience/internal/deadlinectx"
)

// Limits applies the limits of one operation. It is the Resilience
// stage's built-in middleware: it runs the deadline middleware (package
// deadline) with the limits inside it. Create it with [NewLimits], once
// per operation ID per process; the kernel does this at kernel.New.
//
// Each call meets the operation's limits in order, then the handler:
// the circuit breaker, the fixed window ([FixedWindow]) and the
// concurrency limit ([ConcurrencyLimiter]). A ConcurrencyLimit of
// [AdaptiveLimit] moves with the latency ([Adaptive]). Each is a [Limit];
// limits that are not configured are not in the chain. A rejection never
// reaches later limits or the handler. What a call holds is given back on
// every exit path, panics included. A wait in a queue ends when the call
// may proceed, at the deadline (KERNEL_TIMEOUT_001), or when the caller
// cancels (KERNEL_CANCELLED_001). The codes and the breaker's rules are
// in docs/pipeline.md.
//
// The limits are per process: N replicas admit N times PermitLimit per
// window. With Policy.Scope cluster, the kernel hands a shared window and
// shared slots instead ([WithSharedWindow], [WithSharedSlots]). The
// breaker is always per process. With Policy.Shadow the built-ins still
// count and decide, but a call they would turn away runs. It is counted
// in LimitsState.Shadowed. Limits is safe for concurrent use. A nil
// *Limits reports a closed breaker and empty queues.
type Limits struct {
	id string
	// cur is the chain in force; a call loads it once, on arrival, and
	// keeps it to its end. Update replaces it (a reload).
	cur atomic.Pointer[chain]

	rateLimited  rejections
	circuitOpen  rejections
	concLimitErr *pipeline.Error
	// rejected counts the calls the built-ins turned away; shadowed those
	// they would have, in shadow mode.
	rejected, shadowed tally
	shedErr            [2]*pipeline.Error // of a sheddable call, of a default one
}

// inlineLimits is how many permits a call holds without allocating: the
// built-ins are at most four. A chain of more limits keeps the rest in a
// slice.
const inlineLimits = 4

// chain is the limits of one operation under one policy, in the order a
// call meets them. The limiters behind them are carried from chain to
// chain when a reload changes them in place (see Update).
type chain struct {
	policy Policy
	limits []Limit
	fast   []admitter // the leading limits with TryAcquire
	// builtins is how many of limits are built-ins (they come first): in
	// shadow mode their rejections let the call pass.
	builtins int

	// The built-ins, for status and for the next Update (nil: none).
	breaker *breakerLimit
	window  *windowLimit
	slots   *slotsLimit
	shared  *sharedLimit
	keyed   *keyedLimit
}

// NewLimits returns the Limits of the operation id under policy p. It
// never returns nil: when p configures no limit, every call passes
// straight through. Values the configuration would refuse (a non-positive
// window or break, a negative queue) are replaced by their defaults.
// Options hand in a window and slots counted outside the process (Scope
// cluster) and limits of your own ([WithLimit]).
func NewLimits(id string, p Policy, opts ...Option) *Limits {
	p = normalize(p)
	l := &Limits{id: id}
	l.rateLimited = newRejections(id, RateLimited, p.Window)
	l.circuitOpen = newRejections(id, CircuitOpen, p.BreakDuration)
	l.concLimitErr = ConcurrencyLimited(id)
	l.shedErr = [2]*pipeline.Error{Shed(id, pipeline.PrioritySheddable, shedRetryAfter), Shed(id, pipeline.PriorityDefault, shedRetryAfter)}
	l.cur.Store(l.build(&chain{}, p, time.Now(), opts))
	return l
}

func normalize(p Policy) Policy {
	if p.Window <= 0 {
		p.Window = DefaultWindow
	}
	if p.BreakDuration <= 0 {
		p.BreakDuration = DefaultBreakDuration
	}
	if p.ConcurrencyLimit < 0 {
		p.ConcurrencyLimit = AdaptiveLimit
		p.Adaptive.Shadow = false
	}
	p.QueueLimit = max(p.QueueLimit, 0)
	p.ConcurrencyQueueLimit = max(p.ConcurrencyQueueLimit, 0)
	if p.Shadow { // a shadow limit never makes a call wait
		p.QueueLimit, p.ConcurrencyQueueLimit, p.PerKey.QueueLimit = 0, 0, 0
	}
	return p
}

// Update puts policy p in force for the calls that arrive from now on. It
// keeps what the limiters know. This is a reload: see docs/resilience.md,
// "Changing limits at run time".
//
//   - The fixed window keeps its origin and the permits taken in the
//     current window. A new PermitLimit applies at once. A new
//     WindowSeconds applies from the next boundary on. A new QueueLimit
//     applies to arrivals. Queued calls keep their place.
//   - The concurrency limit keeps the calls in flight. A shorter queue
//     turns its newest excess waiters away with KERNEL_UNAVAILABLE_003.
//     An adaptive controller keeps the limit it learned, clamped to the
//     new bounds. A shadow switched to AdaptiveLimit enforces it.
//   - The breaker keeps its state and its counts. A half-open one lets
//     the next call probe.
//   - A limit the policy gains starts empty. A limit it loses is dropped;
//     calls holding its permits finish normally.
//
// Options are as for NewLimits. A policy moving between scopes starts the
// limits of its new scope. Calls already admitted, or waiting in a queue,
// keep the limits they met. Update is safe for concurrent use with calls.
// Concurrent Updates are not: the kernel serialises reloads.
func (l *Limits) Update(p Policy, opts ...Option) {
	p = normalize(p)
	old := l.cur.Load()
	if (p.Scope == ScopeCluster) != (old.policy.Scope == ScopeCluster) {
		old = &chain{breaker: old.breaker}
	}
	l.cur.Store(l.build(old, p, time.Now(), opts))
}

// build returns the chain of policy p, taking over the limiters of old in
// place where it can. Each kind of limit is one entry here.
func (l *Limits) build(old *chain, p Policy, now time.Time, opts []Option) *chain {
	c := &chain{policy: p}
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt.apply(&o)
		}
	}
	if p.Limited() {
		c.breaker = l.breakerOf(old, p)
		if p.PerKey.PermitLimit > 0 {
			c.keyed = l.keyedOf(old, p, o)
		}
		if p.PermitLimit > 0 && o.window == nil {
			c.window = l.windowOf(old, p, now)
		}
		c.shared = l.sharedOf(p, o)
		if runs, _ := p.adaptive(); runs || p.ConcurrencyLimit > 0 && o.slots == nil {
			c.slots = l.slotsOf(old, p, o.slots != nil, now)
		}
	}
	if c.breaker != nil {
		c.add(c.breaker)
	}
	if c.keyed != nil { // a key over its limit takes none of the operation's permits
		c.add(c.keyed)
	}
	if c.window != nil {
		c.add(c.window)
	}
	if c.shared != nil {
		c.add(c.shared)
	}
	if c.slots != nil {
		c.add(c.slots)
	}
	c.builtins = len(c.limits)
	for _, lim := range o.custom {
		c.add(lim)
	}
	return c
}

// add appends lim to the chain.
func (c *chain) add(lim Limit) {
	c.limits = append(c.limits, lim)
	if a, ok := lim.(admitter); ok && len(c.fast) == len(c.limits)-1 {
		c.fast = append(c.fast, a)
	}
}

// limited reports whether l has any limit to apply now.
func (l *Limits) limited() bool {
	return l != nil && len(l.cur.Load().limits) > 0
}

// Invoke implements pipeline.Middleware. It runs the deadline middleware
// (package deadline), with the limits inside it. The breaker and the
// limits without a queue decide before the handler's context exists. So
// a rejection costs no context and no timer. A nil *Limits runs the
// deadline alone.
func (l *Limits) Invoke(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
	d, ok, err := deadlinectx.Arrive(ctx, inv)
	if err != nil {
		return nil, err
	}
	var a admission
	if err := l.admitNow(inv, &a); err != nil {
		return nil, err
	}
	if !ok {
		// No deadline anywhere: only the caller can end the call.
		out, err := a.proceed(ctx, inv, next)
		return deadlinectx.Result(ctx, out, err)
	}
	return a.under(ctx, inv, next, d)
}

// under runs the call under a context derived from parent that ends at d.
// It is kept apart from Invoke, whose many returns would stop the
// compiler from open-coding the defer.
func (a *admission) under(parent context.Context, inv *pipeline.Invocation, next pipeline.Handler, d time.Time) (any, error) {
	s := deadlinectx.Enter(parent, inv, d, nil)
	defer s.End()
	a.lazy = s.Lazy
	out, err := a.proceed(s.Ctx, inv, next)
	return deadlinectx.Result(s.Ctx, out, err)
}

// admission is what one call holds of its chain's limits: a permit of each
// of limits[:n], the first inlineLimits inline, the others in more.
type admission struct {
	l       *Limits
	chain   *chain            // nil: no limit applies
	lazy    *deadlinectx.Lazy // the handler's context, when it is lazy: settled on return
	n       int
	watched int // permits held that are ReleasedAtContextEnd
	permits [inlineLimits]Permit
	more    []Permit
}

// hold records p as the permit of limits[a.n].
func (a *admission) hold(p Permit) {
	if p.watch && p.held() {
		a.watched++
	}
	if a.n < inlineLimits {
		a.permits[a.n] = p
	} else {
		a.more = append(a.more, p)
	}
	a.n++
}

// permit returns the permit of limits[i], i < a.n.
func (a *admission) permit(i int) Permit {
	if i < inlineLimits {
		return a.permits[i]
	}
	return a.more[i-inlineLimits]
}

// admitNow lets the chain's leading admitters decide on arrival, up to the
// first that says the call must wait. It returns the rejection of one
// that turns the call away.
func (l *Limits) admitNow(inv *pipeline.Invocation, a *admission) error {
	if l == nil {
		return nil
	}
	c := l.cur.Load()
	if len(c.limits) == 0 {
		return nil
	}
	a.l, a.chain = l, c
	decided := false
	defer func() {
		if !decided { // a limit panicked: give back what the call holds
			a.release(Outcome{Verdict: Neutral})
		}
	}()
	for a.n < len(c.fast) {
		p, wait, err := c.fast[a.n].TryAcquire(inv)
		if err != nil && l.passes(c, a.n, err) {
			a.hold(Permit{})
			continue
		}
		if err != nil {
			decided = true
			a.release(Outcome{Err: err, Verdict: Neutral})
			return err
		}
		if wait {
			decided = true
			return nil
		}
		a.hold(p)
	}
	decided = true
	return nil
}

// proceed acquires the limits admitNow left, with the call's context, then
// runs next and gives back what the call holds. Next never starts once
// the invocation's deadline has passed (deadlinectx.TooLate).
func (a *admission) proceed(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (out any, err error) {
	w, err := a.acquire(ctx, inv)
	if err != nil {
		return nil, err
	}
	if a.chain == nil {
		return next(ctx, inv)
	}
	finished := false
	defer func() { a.finish(ctx, inv, err, finished, w) }()
	out, err = next(ctx, inv)
	finished = true
	if a.lazy != nil {
		a.lazy.Settle()
	}
	return out, err
}

// acquire acquires the limits admitNow left, with the call's context. It
// returns the watch over the permits that ask for one. On an error, it
// has given back every permit. It refuses a call whose deadline has
// passed (deadlinectx.TooLate).
func (a *admission) acquire(ctx context.Context, inv *pipeline.Invocation) (*watch, error) {
	c := a.chain
	if c == nil {
		if deadlinectx.TooLate(inv) {
			return nil, pipeline.ErrTimeout()
		}
		return nil, nil
	}
	given := false // the permits were given back, or the call holds them
	defer func() {
		if !given { // a limit panicked before the handler ran
			a.release(Outcome{Verdict: Neutral})
		}
	}()
	for a.n < len(c.limits) {
		p, err := c.limits[a.n].Acquire(ctx, inv)
		if err != nil && a.l.passes(c, a.n, err) {
			a.hold(Permit{})
			continue
		}
		if err != nil {
			given = true
			a.release(Outcome{Err: err, Verdict: Neutral})
			return nil, err
		}
		a.hold(p)
	}
	if deadlinectx.TooLate(inv) {
		given = true
		a.release(Outcome{Err: pipeline.ErrTimeout(), Verdict: Neutral})
		return nil, pipeline.ErrTimeout()
	}
	var w *watch
	if a.watched > 0 {
		w = a.watchEnd(ctx, inv)
	}
	given = true
	return w, nil
}

// Admit admits one call as Invoke does, for a handler that runs outside
// a middleware chain, such as a stream's. It returns the handler's
// context, and the function to call once the handler returned. That
// function gives back what the call holds. It returns the outcome as
// Invoke would. A handler's panic must be recovered, and passed to it as
// an error. A rejected call holds nothing.
func (l *Limits) Admit(ctx context.Context, inv *pipeline.Invocation) (context.Context, func(out any, err error) (any, error), error) {
	d, ok, err := deadlinectx.Arrive(ctx, inv)
	if err != nil {
		return nil, nil, err
	}
	h := &held{}
	if err := l.admitNow(inv, &h.a); err != nil {
		return nil, nil, err
	}
	h.ctx = ctx
	if ok {
		h.s = deadlinectx.Enter(ctx, inv, d, nil)
		h.ctx, h.a.lazy = h.s.Ctx, h.s.Lazy
	}
	if h.w, err = h.acquireOrEnd(inv); err != nil {
		_, err = deadlinectx.Result(h.ctx, nil, err) // as Invoke attributes it
		h.end()
		return nil, nil, err
	}
	h.inv = inv
	return h.ctx, h.done, nil
}

// acquireOrEnd acquires the limits left (admission.acquire). A limit's
// panic ends the deadline's context before it goes on, as Invoke's does.
func (h *held) acquireOrEnd(inv *pipeline.Invocation) (w *watch, err error) {
	acquired := false
	defer func() {
		if !acquired {
			h.end()
		}
	}()
	w, err = h.a.acquire(h.ctx, inv)
	acquired = true
	return w, err
}

// held is a call that Admit admitted, until its handler returned.
type held struct {
	a   admission
	s   deadlinectx.Scope // the deadline's; zero: none
	ctx context.Context
	inv *pipeline.Invocation
	w   *watch
}

// done gives back what the call holds, after its handler returned out
// and err, and returns the call's outcome.
func (h *held) done(out any, err error) (any, error) {
	if h.a.chain != nil {
		if h.a.lazy != nil {
			h.a.lazy.Settle()
		}
		h.a.finish(h.ctx, h.inv, err, true, h.w)
	}
	out, err = deadlinectx.Result(h.ctx, out, err)
	h.end()
	return out, err
}

// end ends the deadline's context, when there is one.
func (h *held) end() {
	if h.s.Ctx != nil {
		h.s.End()
	}
}

// finish gives back every permit with the call's outcome: a panic (not
// finished) is a failure.
func (a *admission) finish(ctx context.Context, inv *pipeline.Invocation, err error, finished bool, w *watch) {
	o := Outcome{Err: err, Verdict: Failure, Ran: true}
	if finished {
		o.Verdict = verdictOf(ctx, inv, err)
	}
	o.TimedOut = o.Verdict == Failure && ownDeadline(ctx, inv)
	a.releaseAll(o, w != nil && !w.claim())
}

// release gives back the permits held, last first.
func (a *admission) release(o Outcome) { a.releaseAll(o, false) }

// releaseAll gives back the permits held, last first, but for those a
// watch gave back already when watched is true.
func (a *admission) releaseAll(o Outcome, watched bool) {
	for i := a.n - 1; i >= 0; i-- {
		if p := a.permit(i); p.held() && !(watched && p.watch) {
			p.release(o)
		}
	}
}

// watch gives back the permits that are ReleasedAtContextEnd when the
// call's context ends before its handler returns; whichever of the two
// comes first gives them back. The call returns only after they are
// given back, so a caller's next call never meets its own permits.
type watch struct {
	claimed  atomic.Bool
	stop     func() bool
	released chan struct{} // closed when the watch has given the permits back
}

// watchEnd arms a watch over the a.watched permits that ask for one
// (proceed calls it only when there is one).
func (a *admission) watchEnd(ctx context.Context, inv *pipeline.Invocation) *watch {
	watched := make([]Permit, 0, a.watched)
	for i := range a.n {
		if p := a.permit(i); p.watch && p.held() {
			watched = append(watched, p)
		}
	}
	w := &watch{released: make(chan struct{})}
	w.stop = context.AfterFunc(ctx, func() {
		if w.claimed.CompareAndSwap(false, true) {
			defer close(w.released)
			o := Outcome{Err: deadline.Attribute(ctx), Verdict: endedVerdict(ctx, inv), Ran: true, TimedOut: ownDeadline(ctx, inv)}
			for i := len(watched) - 1; i >= 0; i-- {
				watched[i].release(o)
			}
		}
	})
	return w
}

// claim stops the watch and reports whether the caller gives back the
// watched permits. When it returns false the watch has given them back,
// at the end of the context.
func (w *watch) claim() bool {
	w.stop()
	if w.claimed.CompareAndSwap(false, true) {
		return true
	}
	<-w.released
	return false
}

// Policy returns the policy the limits were built from.
func (l *Limits) Policy() Policy {
	if l == nil {
		return Policy{}
	}
	return l.cur.Load().policy
}

// LimitsState is a snapshot of one operation's limits in this process.
type LimitsState struct {
	// Breaker is the circuit breaker's state (BreakerClosed without one);
	// an open breaker whose break is over reports BreakerHalfOpen.
	Breaker BreakerState
	// BreakerOpenFor is how long an open breaker stays open.
	BreakerOpenFor time.Duration
	// Window is the fixed window's state: permits left, time to reset.
	// HasWindow is false when there is no rate limit in this process: none
	// is configured, or Scope is cluster and the state is in the store.
	Window    pipeline.Quota
	HasWindow bool
	// RateQueue and ConcurrencyQueue are the calls waiting for a window
	// and for a slot (with Scope cluster: this process's waiters).
	RateQueue, ConcurrencyQueue int
	// InFlight is the calls holding a slot of a concurrency limit counted
	// in this process.
	InFlight int
	// ConcurrencyLimit is the concurrency limit enforced in this process
	// (0: none): the static ConcurrencyLimit, or the adaptive limit in
	// force. AdaptiveLimit is the limit the adaptive controller computed
	// last (0: no controller): with Adaptive.Shadow, the one it would
	// apply.
	ConcurrencyLimit, AdaptiveLimit int
	// Rejections counts the calls each limit turned away.
	Rejections Rejections
	// Shadowed counts the calls each limit would have turned away in
	// shadow mode (Policy.Shadow), and let run.
	Shadowed Rejections
}

// State returns a snapshot of the operation's limits.
func (l *Limits) State() LimitsState {
	if l == nil {
		return LimitsState{}
	}
	c := l.cur.Load()
	st := LimitsState{Rejections: l.rejected.snapshot(), Shadowed: l.shadowed.snapshot()}
	if c.breaker != nil {
		st.Breaker, st.BreakerOpenFor = BreakerState(c.breaker.b.State()), c.breaker.b.OpenFor()
	}
	if c.window != nil {
		st.Window, st.HasWindow = c.window.at(time.Now()).Quota(), true
		st.RateQueue = c.window.queueDepth()
	}
	if c.slots != nil {
		st.ConcurrencyQueue, st.InFlight = c.slots.conc.QueueDepth(), c.slots.conc.InFlight()
		st.ConcurrencyLimit, st.AdaptiveLimit = c.slots.limits()
	}
	if c.shared != nil && c.shared.slots != nil {
		if q, ok := c.shared.slots.(interface{ QueueDepth() int }); ok {
			st.ConcurrencyQueue = q.QueueDepth()
		}
	}
	return st
}

// ID returns the operation ID.
func (l *Limits) ID() string {
	if l == nil {
		return ""
	}
	return l.id
}
