package kernel

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/sundial-go/sundial/kernel/internal/config"
	"github.com/sundial-go/sundial/kernel/internal/observe"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/resilience/stream"
)

// StreamCall is one streaming call of an operation.
type StreamCall struct {
	Caller
	// Input is a server stream's request, decoded; nil for the other
	// kinds.
	Input any
	// Decode, when not nil, decodes a server stream's request instead of
	// Input, as for Unary.
	Decode func(deadline time.Time) (any, error)
	// Resume is the caller's resume cursor, such as SSE's Last-Event-ID;
	// "" when none. The handler reads it with operations.Sender.Resume.
	Resume string
	// Raw is the transport's stream.
	Raw stream.Raw
}

// Stream runs one streaming call on the calling goroutine and returns its
// outcome. Admission is as for a unary call: the breaker, the rate limit
// and the priority. The stream then holds a slot of the operation's
// stream pool until it ends. The stream's clocks and bounds come from
// the operation's configuration (docs/streaming.md). Stream returns when
// the handler has returned; a clock or bound ends its context first.
//
// The Outcome's Output is a client stream's reply. A unary operation
// takes no stream: its outcome is UNEXPECTED, and nothing runs.
func (o *Op) Stream(ctx context.Context, c StreamCall) Outcome {
	return o.k.stream(ctx, o.c, &c).outcome
}

// stream runs one streaming call (see Op.Stream). It returns the call's
// run, which holds the outcome: a frame that returns an Outcome is large,
// and this one is under the handler's.
func (k *Kernel) stream(ctx context.Context, c *compiled, sc *StreamCall) *streamRun {
	r := k.beginStream(ctx, c, sc)
	r.serve()
	r.end()
	return r
}

// streamKinds maps an operation's kind to its stream's.
var streamKinds = [...]stream.Kind{
	operations.ServerStream: stream.Server,
	operations.ClientStream: stream.Client,
	operations.BidiStream:   stream.Bidi,
}

// streamRun is one streaming call between its admission and its end. It
// lives on the heap. The frames that run its handler hold little but a
// pointer to it: an open stream's goroutine parks on a shallow stack,
// which the collector can shrink.
type streamRun struct {
	k     *Kernel
	c     *compiled
	e     edge
	call  *StreamCall                           // until the stream opens; nil after
	op    opStream                              // the handler's stream
	state uint8                                 // runBegun, runOpen, runClosed
	done  func(out any, err error) (any, error) // the limits' end (flat); nil: none
	// ended is how the stream ended; EndNone: it never opened.
	ended          stream.Reason
	sent, received int64 // the messages of the ended stream
	// outcome is the call's once it ended. Until then its Output and Err
	// are the call's result.
	outcome Outcome
}

// The states of a streamRun, in order.
const (
	runBegun  uint8 = iota // admitted by the kernel; the stream is not open
	runOpen                // the stream is open: its handler runs
	runClosed              // the stream is closed
)

// serve runs the call. With no middleware but the operation's limits, it
// runs the handler itself, a frame or two above the goroutine's root.
// The admission, the stream's opening and its end run in frames gone
// while the handler runs. Otherwise the handler runs at the end of the
// operation's chain (handle). A panic, the handler's or a limit's, is the
// UNEXPECTED outcome, as in a chain.
func (r *streamRun) serve() {
	if r.e.h == nil {
		return // rejected
	}
	l, flat := r.c.flatLimits()
	if !flat {
		r.outcome.Output, r.outcome.Err = r.k.run(r.e.ctx, &r.e)
		return
	}
	defer r.recover(&r.outcome.Output, &r.outcome.Err)
	if r.admit(l) {
		out, err := r.c.desc.StreamHandler()(r.op.Context(), r.e.inv, &r.op)
		r.close(out, err)
	}
}

// flatLimits returns the operation's limits, nil when it has none, and
// whether they are its only middleware.
func (c *compiled) flatLimits() (*resilience.Limits, bool) {
	switch len(c.mws) {
	case 0:
		return nil, true
	case 1:
		l, ok := c.mws[0].(*resilience.Limits)
		return l, ok
	}
	return nil, false
}

// end ends the observation of the call with its result, and sets its
// outcome.
//
//go:noinline
func (r *streamRun) end() {
	if r.e.h == nil {
		r.outcome = r.e.end(nil, r.e.reject, time.Time{})
		return
	}
	if r.ended != stream.EndNone {
		r.e.obs.Stream(observe.StreamEnd{Reason: r.ended.String(), Sent: r.sent, Received: r.received})
	}
	r.outcome = r.e.end(r.outcome.Output, r.outcome.Err, time.Time{})
}

// beginStream admits a streaming call (Kernel.begin). Its frame is gone
// once it returns.
//
//go:noinline
func (k *Kernel) beginStream(ctx context.Context, c *compiled, sc *StreamCall) *streamRun {
	// r holds sc until the stream opens. So sc is on the heap, and so is
	// Op.Stream's copy of the call: off the caller's stack.
	r := &streamRun{k: k, c: c, call: sc, op: opStream{resume: sc.Resume}}
	u := Unary{Caller: sc.Caller, Input: sc.Input, Decode: sc.Decode, Handler: runsDirect, direct: true}
	if _, flat := c.flatLimits(); !flat {
		u.Handler, u.direct = r.handle, false
	}
	var reject error
	if c.desc.Kind() == operations.Unary {
		reject = pipeline.NewError(pipeline.KindUnexpected, pipeline.CodeUnexpected,
			fmt.Sprintf("operation %q is unary; it takes no stream", c.desc.ID))
	} else if sc.Raw == nil {
		reject = pipeline.NewError(pipeline.KindUnexpected, pipeline.CodeUnexpected,
			fmt.Sprintf("kernel: stream of %q without a transport", c.desc.ID))
	} else if k.draining.Load() {
		reject = errDraining
	}
	r.e = k.begin(ctx, c, &u, reject, "")
	r.e.lat = nil // a stream's lifetime is no latency sample
	return r
}

// runsDirect is the handler of a streaming call whose serve runs its
// handler itself. It marks the call admitted; it never runs.
func runsDirect(context.Context, *pipeline.Invocation) (any, error) {
	panic("kernel: a direct stream's chain ran")
}

// recover turns a panic in serve or handle into the UNEXPECTED outcome.
// The handler's panic closes the stream with it.
func (r *streamRun) recover(out *any, err *error) {
	v := recover()
	if v == nil {
		return
	}
	*out, *err = nil, recovered(r.e.inv, v, r.c.onPanic)
	if r.state == runOpen {
		*out, *err = r.closeStream(nil, *err)
	}
	if done := r.done; done != nil {
		r.done = nil
		*out, *err = done(*out, *err)
	}
}

// admit admits the call under the limits l (nil: none), and opens its
// stream. It reports false, and sets the outcome, when the limits refuse
// the call.
//
//go:noinline
func (r *streamRun) admit(l *resilience.Limits) bool {
	var ctx context.Context = r.e.ctx
	if l != nil {
		lctx, done, err := l.Admit(ctx, r.e.inv)
		if err != nil {
			r.outcome.Output, r.outcome.Err = nil, err
			return false
		}
		r.done, ctx = done, &streamParent{Context: ctx, limits: lctx}
	}
	r.openStream(ctx, r.e.inv)
	return true
}

// streamParent is the parent of a stream's context: the limits' context
// (Limits.Admit) for its deadline and values, the caller's for its end.
// The stream's own timer ends it at the deadline. So a lazy limits'
// context (deadlinectx.Lazy) is never armed by the stream.
type streamParent struct {
	context.Context // the caller's
	limits          context.Context
}

// Deadline returns the limits' context's deadline.
func (p *streamParent) Deadline() (time.Time, bool) { return p.limits.Deadline() }

// Value returns the limits' context's value for key.
func (p *streamParent) Value(key any) any { return p.limits.Value(key) }

// AfterFunc arranges to call f when the caller's context ends. Package
// context uses it to end the stream's context with the caller's: the
// values' context may hold a timer's context of its own, which is not
// the caller's, and context would then start a goroutine to follow it.
func (p *streamParent) AfterFunc(f func()) (stop func() bool) {
	return context.AfterFunc(p.Context, f)
}

// close closes the stream after the handler returned out and err, and
// gives back what the call holds. The outcome is the stream's: the
// handler's when it returned first.
//
//go:noinline
func (r *streamRun) close(out any, err error) {
	out, err = r.closeStream(out, err)
	if done := r.done; done != nil {
		r.done = nil
		out, err = done(out, err)
	}
	r.outcome.Output, r.outcome.Err = out, err
}

// handle is the terminal of a streaming call's chain, when the operation
// has middleware besides its limits: it opens the stream under the
// chain's context, runs the handler, and closes the stream.
func (r *streamRun) handle(ctx context.Context, inv *pipeline.Invocation) (out any, err error) {
	defer r.recover(&out, &err)
	r.openStream(ctx, inv)
	out, err = r.c.desc.StreamHandler()(r.op.Context(), inv, &r.op)
	return r.closeStream(out, err)
}

// openStream opens the call's stream under ctx and records it as open.
//
//go:noinline
func (r *streamRun) openStream(ctx context.Context, inv *pipeline.Invocation) {
	s := stream.Open(ctx, r.call.Raw, r.config(inv))
	r.call = nil
	r.op.Stream = s
	if !r.k.openStream(r.c, s) {
		s.Drain(drainRetryAfter)
	}
	r.c.obs.StreamOpened(ctx, 1)
	r.state = runOpen
}

// closeStream closes the call's stream after the handler returned out and
// err, and forgets it. The outcome is the stream's: the handler's when it
// returned first.
//
//go:noinline
func (r *streamRun) closeStream(out any, err error) (any, error) {
	r.state = runClosed
	s := r.op.Stream
	res := s.Close(err)
	r.ended, r.sent, r.received = res.Reason, res.Sent, res.Received
	r.c.open.remove(s)
	r.c.obs.StreamOpened(s.Context(), -1)
	if res.Reason != stream.EndCompleted || res.Err != nil {
		return nil, res.Err
	}
	return out, nil
}

// config returns the bounds of the call's stream: the operation's, with
// the invocation's deadline.
func (r *streamRun) config(inv *pipeline.Invocation) stream.Config {
	sc := r.c.stream.Load()
	cfg := stream.Config{
		Kind: streamKinds[r.c.desc.Kind()],
		Idle: sc.Idle, SendStall: sc.SendStall,
		MessagesPerSecond: sc.MessagesPerSecond, HardRate: sc.HardRate,
		MaxMessages: int64(sc.MaxMessages), MaxBytes: int64(sc.MaxBytes),
		Heartbeat: sc.Heartbeat, MaxAge: jittered(sc.MaxAge, sc.MaxAgeJitter),
	}
	if cfg.SendStall == 0 && r.k.settings.UseBuiltInMiddleware {
		cfg.SendStall = config.DefaultSendStall // no Stream object configured
	}
	if d, ok := inv.Deadline(); ok {
		cfg.Deadline, cfg.DeadlineSource = d, inv.Timing().Source
	}
	if r.c.checked || implementsValidator(r.c.desc) {
		cfg.Check = r.c.checkMessage
	}
	return cfg
}

// checkMessage checks one of the caller's messages as a unary input is
// checked: its constraints, then its Validate method.
func (c *compiled) checkMessage(m any) error {
	if c.checked {
		if err := c.desc.CheckConstraints(m); err != nil {
			return err
		}
	}
	if v, ok := m.(operations.Validator); ok && v != nil {
		if err := v.Validate(); err != nil {
			return validationError(err)
		}
	}
	return nil
}

// opStream is the stream a streaming handler gets.
type opStream struct {
	*stream.Stream
	resume string
}

// Resume returns the caller's resume cursor (operations.Sender.Resume).
func (s *opStream) Resume() string { return s.resume }

// streamFor returns the stream configuration of the operation id in force.
func (k *Kernel) streamFor(id string) config.Stream {
	if !k.settings.UseBuiltInMiddleware {
		return config.Stream{}
	}
	return k.live.Load().policies.Resolve(id).Stream
}

// limitsPolicy returns the policy the limits of the operation d enforce.
// A streaming operation's concurrency limit is its MaxStreams pool: held
// for a stream's life, static, without a queue, and never adaptive, since
// a stream's lifetime says nothing of its latency.
func limitsPolicy(d *operations.Descriptor, p resilience.Policy, s config.Stream) resilience.Policy {
	if d != nil && d.Kind() != operations.Unary {
		p.ConcurrencyLimit, p.ConcurrencyQueueLimit, p.Adaptive = s.MaxStreams, 0, resilience.Adaptive{}
	}
	return p
}

// jittered returns a stream's maximum age: age less a random part of up
// to jitter of it, so that the streams opened together end apart.
func jittered(age time.Duration, jitter float64) time.Duration {
	if age <= 0 || jitter <= 0 {
		return age
	}
	return age - time.Duration(rand.Float64()*jitter*float64(age))
}

// drainRetryAfter is the retry-after of a stream drained at shutdown.
const drainRetryAfter = time.Second

// errDraining refuses a stream once DrainStreams was called.
var errDraining = pipeline.NewError(pipeline.KindUnavailable, stream.CodeDrained,
	"The server is shutting down; reconnect.").WithRetryAfter(drainRetryAfter)

// openStreams is the open streams of one operation.
type openStreams struct {
	mu sync.Mutex
	m  map[*stream.Stream]struct{}
}

// remove forgets s.
func (o *openStreams) remove(s *stream.Stream) {
	o.mu.Lock()
	delete(o.m, s)
	o.mu.Unlock()
}

// len returns the number of open streams.
func (o *openStreams) len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.m)
}

// openStream records s as open in c. It reports false once the kernel
// drains its streams: s must then be drained too.
func (k *Kernel) openStream(c *compiled, s *stream.Stream) bool {
	c.open.mu.Lock()
	defer c.open.mu.Unlock()
	if c.open.m == nil {
		c.open.m = make(map[*stream.Stream]struct{})
	}
	c.open.m[s] = struct{}{}
	return !k.draining.Load()
}

// DrainStreams ends every open stream, and every stream opened after it,
// with UNAVAILABLE, KERNEL_UNAVAILABLE_012 and a retry-after of one
// second. Each handler's context ends; each stream gets its outcome in
// band. Call it when a graceful shutdown starts, before the servers wait
// for their calls to end.
func (k *Kernel) DrainStreams() {
	k.draining.Store(true)
	for _, c := range k.all {
		c.open.mu.Lock()
		for s := range c.open.m {
			s.Drain(drainRetryAfter)
		}
		c.open.mu.Unlock()
	}
}
