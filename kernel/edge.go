package kernel

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sundial-go/sundial/kernel/internal/observe"
	"github.com/sundial-go/sundial/kernel/internal/priority"
	"github.com/sundial-go/sundial/kernel/propagation"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience/deadline"
	"github.com/sundial-go/sundial/resilience/idempotency"
)

// Outcome is what the kernel hands back for one call.
type Outcome struct {
	// Output is the handler's result (nil on failure).
	Output any
	// Err is nil on success, else always a non-nil *pipeline.Error: a
	// typed nil or a foreign error the handler returned is UNEXPECTED.
	Err error
	// TraceID is the trace ID to report (Problem Details "traceId", access
	// logs): the invocation's span's when an SDK tracer is installed, else
	// the caller's (an incoming traceparent), else "".
	TraceID string
	// Invocation is the invocation that ran (never nil).
	Invocation *pipeline.Invocation
	// Expired reports an answer given at the deadline (or when the caller
	// went away) without the chain's outcome: the handler ignored its
	// context and still runs. Err is then TIMEOUT or CANCELLED. An HTTP/1
	// adapter closes the connection after such an answer.
	Expired bool
}

// CodeOverloaded is the code of the answer to every call while too many
// invocations still run after their answer left (UNAVAILABLE).
const CodeOverloaded = observe.CodeOverloaded

// errOverloaded is the answer to every call while MaxStragglers
// invocations still run after their answer left.
var errOverloaded = pipeline.NewError(pipeline.KindUnavailable, CodeOverloaded,
	"The server has too many calls still running after their deadline; retry after 1 second.").WithRetryAfter(time.Second)

// settleWindow is how long the guard waits, once the invocation's context
// has ended, for the chain's own outcome before it answers without it (a
// handler that ignores its context). A handler that honours its context
// returns within microseconds, and its outcome carries more than the
// guard's. It bounds how late after the deadline the answer can leave.
const settleWindow = 5 * time.Millisecond

// lateWarnAfter is how late after the answer a discarded result must be
// for its log record to be a warning rather than information.
const lateWarnAfter = 10 * time.Millisecond

// edge is one invocation at the kernel's edge, between its arrival and
// its answer.
type edge struct {
	ctx     context.Context // the caller's, with the invocation's span
	inv     *pipeline.Invocation
	h       pipeline.Handler // the chain to run; nil when rejected
	obs     *observe.Call    // nil: not observed
	lat     *latency         // nil: not recorded (host endpoints)
	strag   *atomic.Int64    // the chain's straggler count; nil for an unknown operation
	reject  error            // the outcome when nothing runs
	traceID string
	clock   *arrivalClock // the kernel's, for the end of an observed call
}

// begin does what every entry does on arrival, once: it checks the
// idempotency key, computes the effective deadline and its source, copies
// the baggage, makes the invocation and starts its observation. c is the
// operation's chain, k.host for a host endpoint, or nil for the unknown
// operation named unknown (Call). A non-nil reject is the adapter's
// rejection: nothing runs.
func (k *Kernel) begin(ctx context.Context, c *compiled, u *Unary, reject error, unknown string) edge {
	if ctx == nil {
		ctx = context.Background()
	}
	now := u.Arrival
	if now.IsZero() {
		now = k.clock.now()
	}
	e := edge{clock: &k.clock}
	op, name := k.find(c, u, unknown, &e)
	e.reject = k.admission(c, u, reject, e.reject)
	caller, deadline, source := k.deadlines(ctx, u, c, now)
	input := u.Input
	if u.Decode != nil && e.reject == nil {
		var err error
		if input, err = u.Decode(deadline); err != nil {
			e.reject = pipeline.AsError(err)
		}
	}
	// The invocation's baggage is the context's W3C baggage, bounded; an
	// idempotency key from a protocol header goes into the context's
	// baggage too, so that downstream calls carry it (the invocation takes
	// a key from the baggage itself when no header sent one).
	bag := propagation.Baggage(ctx, k.baggageLog)
	key := u.IdempotencyKey
	if key != "" && propagation.IdempotencyKey(ctx) != key {
		ctx, _ = propagation.WithIdempotencyKey(ctx, key)
	}
	if key == "" {
		key = bag[propagation.BaggageIdempotencyKey]
	}
	prio := k.priority(u, c, op, bag, &e)
	if (prio < c.priority() || prio == pipeline.PrioritySheddable) && bag[propagation.BaggagePriority] != prio.String() {
		ctx = propagation.WithPriority(ctx, prio)
	}
	e.inv = pipeline.NewInvocation(pipeline.Spec{
		Operation:      op,
		Protocol:       u.Protocol,
		Route:          u.Route,
		Input:          input,
		CallerDeadline: caller,
		Deadline:       deadline,
		DeadlineSource: source,
		Baggage:        bag,
		IdempotencyKey: key,
		Arrival:        now,
		Priority:       prio,
		ReplayMark:     &k.replay,
	})
	if e.reject == nil && u.Handler != nil && op != nil && refusesKeys(c, e.inv) {
		e.reject = errKeysUnsupported()
	}
	k.observe(ctx, &u.Transport, c, name, now, &e)
	if e.reject == nil {
		switch {
		case u.direct:
			e.h = u.Handler
		case u.Handler != nil:
			e.h = c.chain(u.Handler)
		default:
			e.h = c.handler
		}
	}
	return e
}

// priority returns the call's effective class: its operation's, lowered by
// the caller's header (req.Priority) and by the baggage's sundial.priority
// member, never raised. A header naming no class is the call's rejection
// (KERNEL_VALIDATION_009): the caller said something we cannot honour. A
// baggage member naming none is ignored: it may come from a service far
// up the chain of calls, which this caller cannot fix.
func (k *Kernel) priority(u *Unary, c *compiled, op pipeline.Operation, bag map[string]string, e *edge) pipeline.Priority {
	p := c.priority()
	if op == nil {
		return p
	}
	if v, ok := bag[propagation.BaggagePriority]; ok {
		if b, valid := priority.Parse(v); valid {
			p = min(p, b)
		}
	}
	if u.Priority != "" {
		h, valid := priority.Parse(u.Priority)
		switch {
		case valid:
			p = min(p, h)
		case e.reject == nil:
			e.reject = errBadPriority()
		}
	}
	return p
}

// codeBadPriority is errBadPriority's code.
const codeBadPriority = "KERNEL_VALIDATION_009"

// errBadPriority is the 400 of a priority header, metadata entry or flag
// that names no class: VALIDATION, KERNEL_VALIDATION_009. It does not
// echo the value, which may be large.
func errBadPriority() *pipeline.Error {
	return pipeline.NewError(pipeline.KindValidation, codeBadPriority,
		"The priority must be critical, default or sheddable; it can only lower the operation's own class.")
}

// find returns the call's operation (nil for a host endpoint) and its
// name; an unknown operation (c nil) is e's rejection.
func (k *Kernel) find(c *compiled, u *Unary, unknown string, e *edge) (op pipeline.Operation, name string) {
	switch c {
	case k.host:
		e.strag = &k.host.stragglers
		return nil, u.Route
	case nil:
		e.reject = notRegistered(unknown)
		return nil, unknown
	}
	e.lat, e.strag = c.lat, &c.stragglers
	return c.desc, c.desc.ID
}

// admission returns the call's rejection before anything runs: a
// malformed idempotency key on an operation that takes keys, else the
// adapter's rejection (reject), else the overload answer while too many
// handlers still run after their answer left (shed new calls until some
// return, rather than pile up more), else found (an unknown operation).
func (k *Kernel) admission(c *compiled, u *Unary, reject, found error) error {
	if err := checkKey(c, &u.Caller); err != nil {
		return err
	}
	if reject != nil {
		return reject
	}
	if k.overloaded(c, int64(k.live.Load().maxStragglers)) {
		return errOverloaded
	}
	return found
}

// checkKey checks the caller's idempotency key against the grammar. A
// malformed key is dropped: it is not passed on as baggage either. It is
// the call's rejection (KERNEL_VALIDATION_005) only on an operation that
// takes keys, since many clients send keys of their own form everywhere.
func checkKey(c *compiled, caller *Caller) *pipeline.Error {
	if !caller.BadIdempotencyKey && (caller.IdempotencyKey == "" || idempotency.ValidKey(caller.IdempotencyKey)) {
		return nil
	}
	caller.IdempotencyKey, caller.BadIdempotencyKey = "", false
	if c != nil && c.idem.Enabled {
		return idempotency.ErrKeyMalformed()
	}
	return nil
}

// overloaded reports whether a call to c (nil: no operation) is shed for
// the stragglers: when c's own, plus every other chain's up to half of
// limit each, reach limit. One operation may use the whole allowance for
// itself, but takes at most half of it from the others, so its
// stragglers alone never shed them. The sum is taken only when the
// stragglers in all reach limit.
func (k *Kernel) overloaded(c *compiled, limit int64) bool {
	if k.stragglers.Load() < limit {
		return false
	}
	half, n := limit/2, int64(0)
	for _, o := range k.all {
		s := o.stragglers.Load()
		if o != c {
			s = min(s, half)
		}
		n += s
	}
	return n >= limit
}

// deadlines returns the caller's deadline (the earlier of the protocol's
// and the context's) and the effective one with its source: the earliest
// of the caller's, the operation's TimeoutSeconds and the kernel's cap.
func (k *Kernel) deadlines(ctx context.Context, u *Unary, c *compiled, now time.Time) (caller, deadline time.Time, source pipeline.DeadlineSource) {
	caller = u.Deadline
	if pd, ok := ctx.Deadline(); ok && (caller.IsZero() || pd.Before(caller)) {
		caller = pd
	}
	deadline = caller
	if !caller.IsZero() {
		source = pipeline.DeadlineCaller
	}
	if !k.settings.UseBuiltInMiddleware {
		return caller, deadline, source
	}
	// The shorter of the operation's timeout and the cap (the operation's
	// on a tie), then the earlier of now plus it and the caller's: one
	// addition to the clock's reading rather than one per candidate.
	d, s := c.operationTimeout(), pipeline.DeadlineOperation
	if limit := k.live.Load().maxTimeout; limit > 0 && (d <= 0 || limit < d) {
		d, s = limit, pipeline.DeadlineKernel
	}
	if d > 0 {
		if t := now.Add(d); deadline.IsZero() || t.Before(deadline) {
			deadline, source = t, s
		}
	}
	return caller, deadline, source
}

// refusesKeys reports whether a call to an application's own handler (a
// gRPC method it registered) must be refused for its idempotency key. Such
// a handler answers in types of its own — a protobuf message, a gRPC
// status with details — which a stored outcome cannot give back: a replay
// would not be what the first call answered. Its keyed calls are refused,
// never run unprotected.
func refusesKeys(c *compiled, inv *pipeline.Invocation) bool {
	return c.idem.Enabled && (c.idem.Required || inv.IdempotencyKey() != "")
}

// observe starts the call's observation, when telemetry is on: e.ctx is
// then the call's context with its span.
func (k *Kernel) observe(ctx context.Context, tr *Transport, c *compiled, name string, now time.Time, e *edge) {
	var o *observe.Op
	if c != nil && c.obs != nil {
		o = c.obs
	} else if k.tel != nil {
		o = k.tel.Route(name)
	}
	e.ctx = ctx
	if o != nil {
		e.ctx, e.obs = o.StartTransport(ctx, e.inv, now, (*observe.Transport)(tr))
	}
}

// run runs the chain under ctx. A panic in a middleware (the handler's own
// are recovered inside the chain) becomes an UNEXPECTED outcome here.
func (k *Kernel) run(ctx context.Context, e *edge) (out any, err error) {
	defer func() {
		if v := recover(); v != nil {
			out, err = nil, recovered(e.inv, v, k.host.onPanic)
		}
	}()
	return e.h(ctx, e.inv)
}

// end ends the observation of e with err, at the time given or (the zero
// time) now, and returns the outcome.
func (e *edge) end(out any, err error, at time.Time) Outcome {
	out, err = e.finish(out, err, at)
	return Outcome{Output: out, Err: err, TraceID: e.trace(), Invocation: e.inv}
}

// finish ends the observation of e with err (see end) and returns the
// result and the outcome as a caller gets them: the error, when there is
// one, as a non-nil *pipeline.Error.
func (e *edge) finish(out any, err error, at time.Time) (any, error) {
	var pe error
	if err != nil {
		pe = pipeline.AsError(err)
		out = nil
	}
	if e.obs != nil {
		if at.IsZero() {
			at = e.clock.now() // the clock is read only for an observed call
		}
		e.obs.End(pe, at)
		if arrival := e.inv.Timing().Arrival; !arrival.IsZero() {
			e.lat.observe(at, at.Sub(arrival)) // for Status
		}
	}
	return out, pe
}

// call is invoke for Call, which needs no trace ID and no Outcome.
func (k *Kernel) call(ctx context.Context, c *compiled, u *Unary, unknown string) (any, error) {
	e := k.begin(ctx, c, u, nil, unknown)
	if e.h == nil {
		return e.finish(nil, e.reject, time.Time{})
	}
	out, err := k.run(e.ctx, &e)
	return e.finish(out, err, time.Time{})
}

// trace returns the trace ID to report for e.
func (e *edge) trace() string {
	if e.traceID == "" {
		if id := e.obs.TraceID(); id != "" {
			e.traceID = id
		} else if sc := trace.SpanContextFromContext(e.ctx); sc.HasTraceID() {
			e.traceID = sc.TraceID().String()
		}
	}
	return e.traceID
}

// invoke runs one call on the caller's goroutine (see Op.Invoke).
func (k *Kernel) invoke(ctx context.Context, c *compiled, u *Unary, reject error, unknown string) Outcome {
	e := k.begin(ctx, c, u, reject, unknown)
	if e.h == nil {
		return e.end(nil, e.reject, time.Time{})
	}
	out, err := k.run(e.ctx, &e)
	return e.end(out, err, time.Time{})
}

// handle runs one call under the guard, its chain on a goroutine of its
// own (see Op.Handle).
func (k *Kernel) handle(ctx context.Context, c *compiled, u *Unary) Outcome {
	e := k.begin(ctx, c, u, nil, "")
	if e.h == nil {
		return e.end(nil, e.reject, time.Time{})
	}
	g := &guard{e: e, result: make(chan Outcome, 1), stragglers: &k.stragglers}
	k.running.Add(1)
	k.dispatch(g)
	return <-g.result
}

// serveCall runs one call under the guard, its chain on the calling
// goroutine (see Op.Serve).
func (k *Kernel) serveCall(ctx context.Context, c *compiled, u *Unary, respond func(Outcome)) {
	e := k.begin(ctx, c, u, nil, "")
	if e.h == nil {
		respond(e.end(nil, e.reject, time.Time{}))
		return
	}
	k.running.Add(1)
	k.serve(&guard{e: e, respond: respond, stragglers: &k.stragglers})
}

// serve runs the chain of g's invocation and answers it, once (see
// Serve); the caller has counted it in k.running.
func (k *Kernel) serve(g *guard) {
	defer k.running.Add(-1)
	if !g.arm() {
		// Nothing can end the call but the handler.
		out, err := k.run(g.e.ctx, &g.e)
		g.answer(g.e.end(out, err, time.Time{}))
		return
	}
	out, err := k.run(g, &g.e)
	if g.state.CompareAndSwap(guardArmed, guardOutcome) {
		// The chain came first (or within the settle window): its outcome
		// is the answer.
		g.cancel(context.Canceled)
		g.answer(g.e.end(out, err, time.Time{}))
		return
	}
	g.amu.Lock() // the guard answered: wait until it is done answering
	answered, sent := g.answered, g.sent
	g.amu.Unlock()
	k.stragglers.Add(-1) // counted by claim
	g.e.strag.Add(-1)
	k.logLate(&g.e, answered, sent, err)
}

// dispatch runs g on a goroutine of its own or, with WithWorkers, on a
// worker: an idle one when there is one, else a new one.
func (k *Kernel) dispatch(g *guard) {
	if k.workerIdle <= 0 {
		go k.serve(g)
		return
	}
	select {
	case k.jobs <- g:
	default:
		k.workers.Add(1)
		go k.work(g)
	}
}

// work serves g, then the calls dispatch hands it, until it has been idle
// for k.workerIdle or Wait hands it nil.
func (k *Kernel) work(g *guard) {
	defer k.workers.Add(-1)
	k.serve(g)
	idle := time.NewTimer(k.workerIdle)
	defer idle.Stop()
	for {
		select {
		case g = <-k.jobs:
			if g == nil {
				return
			}
			k.serve(g)
			idle.Reset(k.workerIdle)
		case <-idle.C:
			return
		}
	}
}

// msgLate and msgBaggageCut are the messages of two records callers
// cause at will, once per call: their records are sampled
// (logs.Sampled).
const (
	msgLate       = "kernel: late result discarded"
	msgBaggageCut = "sundial: baggage over the limit; members dropped"
)

// logLate logs, once, the result of a straggler whose answer left without
// it. A flood of calls to a handler that ignores its context makes a
// flood of them: the records are sampled.
func (k *Kernel) logLate(e *edge, answered time.Time, sent, got error) {
	own := deadline.Original(got)
	late := time.Since(answered)
	level := slog.LevelInfo
	if late >= lateWarnAfter {
		level = slog.LevelWarn
	}
	attrs := []slog.Attr{
		slog.String("operation", e.inv.Name()),
		slog.String("protocol", e.inv.Protocol().String()),
		slog.String("traceId", e.trace()),
		slog.Float64("lateByMs", float64(late.Microseconds())/1000),
		slog.String("code", codeOf(sent)),
		slog.String("handlerCode", codeOf(own)),
	}
	if own != nil && pipeline.AsError(own).Kind() == pipeline.KindUnexpected {
		attrs = append(attrs, slog.String("error", pipeline.ErrorText(own)))
	}
	k.lateLog.LogAttrs(context.Background(), level, msgLate, attrs...)
}

// waitPoll is how often Wait looks at the count of running invocations.
const waitPoll = 5 * time.Millisecond

// Running returns the number of guarded invocations (Op.Serve, Op.Handle) whose
// chain has not returned yet, stragglers included.
func (k *Kernel) Running() int { return int(k.running.Load()) }

// Wait blocks until every guarded invocation (Op.Serve, Op.Handle) has returned —
// stragglers whose answer left at their deadline included — and the idle
// workers of WithWorkers have exited, or ctx ends, and then returns an
// error wrapping ctx's. Call it at shutdown, after the
// servers stopped accepting calls, within the same grace period. It polls
// every few milliseconds: it is meant for shutdown, not the hot path.
func (k *Kernel) Wait(ctx context.Context) error {
	if k.running.Load() == 0 && k.workers.Load() == 0 {
		return nil
	}
	t := time.NewTicker(waitPoll)
	defer t.Stop()
	for k.running.Load() != 0 {
		select {
		case <-t.C:
		case <-ctx.Done():
			return fmt.Errorf("kernel: %d invocations still running: %w", k.running.Load(), ctx.Err())
		}
	}
	// Nothing runs: dismiss the idle workers (WithWorkers); a later call
	// starts anew.
	for k.workers.Load() > 0 {
		// An idle worker ready to take its dismissal wins over an ended
		// ctx: a select between ready cases would pick at random.
		select {
		case k.jobs <- nil:
			continue
		default:
		}
		select {
		case k.jobs <- nil:
		case <-t.C:
		case <-ctx.Done():
			return fmt.Errorf("kernel: %d idle workers still running: %w", k.workers.Load(), ctx.Err())
		}
	}
	return nil
}

// codeOf returns the code of an outcome, "" for nil.
func codeOf(err error) string {
	if err == nil {
		return ""
	}
	return pipeline.AsError(err).Code()
}
