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
	return o.k.stream(ctx, o.c, &c)
}

// streamKinds maps an operation's kind to its stream's.
var streamKinds = [...]stream.Kind{
	operations.ServerStream: stream.Server,
	operations.ClientStream: stream.Client,
	operations.BidiStream:   stream.Bidi,
}

// streamRun is one streaming call between its admission and its end.
type streamRun struct {
	k    *Kernel
	c    *compiled
	call *StreamCall
	res  stream.Result // how the stream ended; Reason EndNone: it never opened
}

// stream runs one streaming call (see Op.Stream).
func (k *Kernel) stream(ctx context.Context, c *compiled, sc *StreamCall) Outcome {
	r, e := k.beginStream(ctx, c, sc)
	if e.h == nil {
		return e.end(nil, e.reject, time.Time{})
	}
	out, err := k.run(e.ctx, &e)
	return r.end(&e, out, err)
}

// end ends the observation of the call e with its result out and err,
// and returns its outcome. Like beginStream, it keeps its frame off the
// stack while the stream is open.
//
//go:noinline
func (r *streamRun) end(e *edge, out any, err error) Outcome {
	if res := r.res; res.Reason != stream.EndNone {
		e.obs.Stream(observe.StreamEnd{Reason: res.Reason.String(), Sent: res.Sent, Received: res.Received})
	}
	return e.end(out, err, time.Time{})
}

// beginStream admits a streaming call (Kernel.begin). Its frame is gone
// once it returns: the frames below an open stream's handler stay small,
// and so does the stack of the goroutine that holds it.
//
//go:noinline
func (k *Kernel) beginStream(ctx context.Context, c *compiled, sc *StreamCall) (*streamRun, edge) {
	r := &streamRun{k: k, c: c, call: sc}
	u := Unary{Caller: sc.Caller, Input: sc.Input, Decode: sc.Decode, Handler: r.handle}
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
	e := k.begin(ctx, c, &u, reject, "")
	e.lat = nil // a stream's lifetime is no latency sample
	return r, e
}

// handle is the terminal of a streaming call's chain: it opens the stream
// under the chain's context, runs the handler, and closes the stream.
// The outcome is the stream's: the handler's when it returned first.
func (r *streamRun) handle(ctx context.Context, inv *pipeline.Invocation) (any, error) {
	s := r.open(ctx, inv)
	if !r.k.openStream(r.c, s) {
		s.Drain(drainRetryAfter)
	}
	r.c.obs.StreamOpened(ctx, 1)
	defer r.c.obs.StreamOpened(ctx, -1)
	defer r.c.open.remove(s)
	sh := r.c.desc.StreamHandler()
	h := recoverHandler(func(ctx context.Context, inv *pipeline.Invocation) (any, error) {
		return sh(ctx, inv, &opStream{Stream: s, resume: r.call.Resume})
	}, r.c.onPanic)
	out, err := h(s.Context(), inv)
	r.res = s.Close(err)
	if r.res.Reason != stream.EndCompleted || r.res.Err != nil {
		return nil, r.res.Err
	}
	return out, nil
}

// open opens the call's stream. Its frame, with the stream's
// configuration, is gone once it returns (see beginStream).
//
//go:noinline
func (r *streamRun) open(ctx context.Context, inv *pipeline.Invocation) *stream.Stream {
	return stream.Open(ctx, r.call.Raw, r.config(inv))
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
