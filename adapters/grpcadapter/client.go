package grpcadapter

import (
	"context"
	"io"
	"math"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/sundial-go/sundial/adapters/internal/outclock"
	"github.com/sundial-go/sundial/kernel/propagation"
	"github.com/sundial-go/sundial/pipeline"
)

// Outbound deadlines need little help: grpc-go already sends what remains
// of the call's context deadline as grpc-timeout, so a handler that passes
// its invocation context to a client call propagates the invocation's
// deadline downstream. The client interceptors add a per-call cap and turn
// failures into outcomes.

// WithCallTimeout returns a call option that caps one call at d,
// overriding the interceptor's per-call timeout for that call. d <= 0
// removes the cap for the call (the context's deadline still applies). It
// has an effect only with UnaryClientInterceptor or
// StreamClientInterceptor installed.
func WithCallTimeout(d time.Duration) grpc.CallOption { return callTimeout{d: d} }

type callTimeout struct {
	grpc.EmptyCallOption
	d time.Duration
}

// Dependency runs the attempts of one outbound call under a dependency's
// policies; the *outbound.Dependency that Kernel.Dependency returns is one.
type Dependency interface {
	Do(ctx context.Context, attempt func(context.Context) error) error
}

// WithCallDependency returns a call option that runs the call through d
// (see outbound.Dependency.Do): retries within d's budget, hedging, d's
// breaker. Give it per call, or per connection with
// grpc.WithDefaultCallOptions. Each attempt has the same metadata,
// baggage (so the same idempotency key) and trace, a child span of its
// own and the per-call cap, and its failure is an outcome (FromStatus),
// retried or not by its kind. A proto reply is filled by the winning
// attempt only, so hedged attempts never share it; hedge only calls whose
// reply is a proto message. It has an effect with UnaryClientInterceptor
// installed, and on server streams with StreamClientInterceptor.
func WithCallDependency(d Dependency) grpc.CallOption { return callDependency{d: d} }

type callDependency struct {
	grpc.EmptyCallOption
	d Dependency
}

// dependencyFor returns the last WithCallDependency among opts, or nil.
func dependencyFor(opts []grpc.CallOption) Dependency {
	var d Dependency
	for _, o := range opts {
		if cd, ok := o.(callDependency); ok {
			d = cd.d
		}
	}
	return d
}

// capFor returns the per-call timeout of one call: the last WithCallTimeout
// among opts, else def.
func capFor(def time.Duration, opts []grpc.CallOption) time.Duration {
	for _, o := range opts {
		if ct, ok := o.(callTimeout); ok {
			def = ct.d
		}
	}
	return def
}

// capped returns ctx bounded by timeout: its deadline is min(now+timeout,
// ctx's deadline) — never later than ctx's own. timeout <= 0 adds no cap.
func capped(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if timeout <= 0 {
		return ctx, func() {}
	}
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= timeout {
		return ctx, func() {} // what remains is already shorter: nothing to add
	}
	return context.WithTimeout(ctx, timeout)
}

// UnaryClientInterceptor returns a client interceptor that caps each call
// at min(timeout, what remains of the call's context). It can only shorten
// a deadline, never extend it. It converts a failed call's status to an
// outcome with FromStatus. So the handler making the call can return the
// error as it is. A downstream DeadlineExceeded is a TIMEOUT. An
// Unavailable is UNAVAILABLE, with the downstream's retry hint as its
// retry-after. timeout <= 0 adds no cap; WithCallTimeout overrides it per
// call.
//
// grpc-go sends the resulting deadline downstream as grpc-timeout. The
// interceptor adds the W3C trace context and baggage of the call's context
// to the outgoing metadata. So the server's span continues the trace.
func UnaryClientInterceptor(timeout time.Duration) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if d := dependencyFor(opts); d != nil {
			return unaryThrough(ctx, d, timeout, method, req, reply, cc, invoker, opts)
		}
		ctx, cancel := capped(ctx, capFor(timeout, opts))
		defer cancel()
		return FromStatus(invoker(withTraceMetadata(ctx), method, req, reply, cc, opts...))
	}
}

// unaryThrough makes a unary call through d; each attempt of a proto
// reply gets a fresh message, and the first success is merged into reply.
func unaryThrough(ctx context.Context, d Dependency, timeout time.Duration, method string, req, reply any,
	cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption) error {
	pm, isProto := reply.(proto.Message)
	var (
		mu   sync.Mutex
		done bool
	)
	return d.Do(ctx, func(actx context.Context) error {
		actx, cancel := capped(actx, capFor(timeout, opts))
		defer cancel()
		r := reply
		if isProto && pm.ProtoReflect().IsValid() { // not a typed nil
			r = pm.ProtoReflect().New().Interface()
		}
		var trailer metadata.MD
		err := invoker(withTraceMetadata(actx), method, req, r, cc, append(opts[:len(opts):len(opts)], grpc.Trailer(&trailer))...)
		if err != nil {
			return withPushback(FromStatus(err), trailer)
		}
		if r != reply {
			mu.Lock()
			defer mu.Unlock()
			if !done {
				proto.Reset(pm)
				proto.Merge(pm, r.(proto.Message))
				done = true
			}
		}
		return nil
	})
}

// pushbackKey is the trailer in which a server tells a retrying client
// how long to wait (gRFC A6, "Pushback").
const pushbackKey = "grpc-retry-pushback-ms"

// withPushback applies the server's grpc-retry-pushback-ms trailer to the
// outcome err of an attempt, as gRFC A6 says. A whole number of
// milliseconds (0 or more) is the retry-after of the outcome, replacing
// any other. A negative or unreadable one asks the client not to retry;
// the outcome is marked so for the dependency. An outcome that is not a
// *pipeline.Error, or no trailer, leaves err as it is.
func withPushback(err error, trailer metadata.MD) error {
	v := trailer.Get(pushbackKey)
	e, ok := err.(*pipeline.Error)
	if len(v) == 0 || !ok {
		return err
	}
	ms, perr := strconv.ParseInt(v[0], 10, 64)
	if perr != nil || ms < 0 || ms > math.MaxInt64/int64(time.Millisecond) {
		return noRetry{e}
	}
	return e.WithRetryAfter(time.Duration(ms) * time.Millisecond)
}

// noRetry marks an outcome whose server asked not to be retried;
// outbound.Dependency reads the mark through the NoRetry method, without
// this package importing it.
type noRetry struct{ e *pipeline.Error }

func (n noRetry) Error() string { return n.e.Error() }
func (n noRetry) Unwrap() error { return n.e }
func (noRetry) NoRetry() bool   { return true }

// StreamClientInterceptor is UnaryClientInterceptor for streams: the cap
// bounds the whole stream, and it is released when the stream ends (a
// receive returns an error, including io.EOF) or the cap expires. Errors
// from creating the stream, sending, receiving (except io.EOF) and Header
// are converted with FromStatus. WithStreamClocks adds an idle and a
// send-stall clock to a stream.
//
// With WithCallDependency, a server stream is retried until its first
// response message, and never after it. Its first RecvMsg opens the
// attempts through the dependency, each sending the caller's request
// again. A Header before the first RecvMsg commits the stream once its
// headers arrive. Client and bidi streams go out once: their messages are
// not kept to be sent again.
func StreamClientInterceptor(timeout time.Duration) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		ctx, cancel := capped(ctx, capFor(timeout, opts))
		if d := dependencyFor(opts); d != nil && desc.ServerStreams && !desc.ClientStreams {
			return &retryStream{ctx: ctx, cancel: cancel, d: d, ready: make(chan struct{}), open: func(actx context.Context) (*clientStream, error) {
				// done ends the attempt's stream: a failed one is released at once.
				actx, end := context.WithCancel(actx)
				return openStream(actx, end, desc, cc, method, streamer, opts)
			}}, nil
		}
		return openStream(ctx, cancel, desc, cc, method, streamer, opts)
	}
}

// openStream opens one stream with the clocks of opts; cancel releases
// ctx's cap when the stream ends.
func openStream(ctx context.Context, cancel context.CancelFunc, desc *grpc.StreamDesc, cc *grpc.ClientConn,
	method string, streamer grpc.Streamer, opts []grpc.CallOption) (*clientStream, error) {
	var clocks *outclock.Clocks
	if c, ok := clocksFor(opts); ok {
		cctx, stop := context.WithCancelCause(ctx)
		capCancel := cancel
		ctx, cancel = cctx, func() { stop(nil); capCancel() }
		clocks = outclock.Start(c.idle, c.stall, stop)
		// A caller that ends the stream by cancelling its context,
		// as grpc-go allows, stops the clocks' timer too.
		context.AfterFunc(cctx, clocks.Stop)
	}
	cs, err := streamer(withTraceMetadata(ctx), desc, cc, method, opts...)
	if err != nil {
		if clocks != nil {
			clocks.Stop()
		}
		cancel()
		return nil, outclock.Outcome(ctx, FromStatus(err))
	}
	return &clientStream{ClientStream: cs, ctx: ctx, cancel: cancel, clocks: clocks}, nil
}

// clientStream releases the cap's timer when the stream ends, and runs
// the clocks of WithStreamClocks (nil: none).
type clientStream struct {
	grpc.ClientStream
	ctx    context.Context
	once   sync.Once
	cancel context.CancelFunc
	clocks *outclock.Clocks
}

func (s *clientStream) done() {
	s.once.Do(func() {
		if s.clocks != nil {
			s.clocks.Stop()
		}
		s.cancel()
	})
}

func (s *clientStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err == nil {
		if s.clocks != nil {
			s.clocks.Touch()
		}
		return nil
	}
	failed := outclock.Outcome(s.ctx, err)
	s.done()
	if err == io.EOF {
		return err
	}
	if failed != err {
		return failed // a clock ended the stream
	}
	return FromStatus(err)
}

func (s *clientStream) SendMsg(m any) error {
	if s.clocks != nil {
		s.clocks.Sending(true)
	}
	err := s.ClientStream.SendMsg(m)
	if s.clocks != nil {
		s.clocks.Sending(false)
		if err == nil {
			s.clocks.Touch()
		}
	}
	if err == nil {
		return nil
	}
	failed := outclock.Outcome(s.ctx, err)
	if err == io.EOF && failed == err {
		return err // the real status comes from RecvMsg
	}
	s.done()
	if failed != err {
		return failed
	}
	return FromStatus(err)
}

func (s *clientStream) Header() (md metadata.MD, err error) {
	md, err = s.ClientStream.Header()
	if err != nil {
		s.done()
		return md, FromStatus(err)
	}
	return md, nil
}

// withTraceMetadata adds the W3C trace context and baggage of ctx
// (traceparent, tracestate, baggage; see propagation.InjectGRPC) to its
// outgoing metadata, so the server's span continues the caller's trace. A
// context with neither is returned as it is.
func withTraceMetadata(ctx context.Context) context.Context {
	if !trace.SpanContextFromContext(ctx).IsValid() && baggage.FromContext(ctx).Len() == 0 {
		return ctx
	}
	md, _ := metadata.FromOutgoingContext(ctx)
	md = md.Copy()
	propagation.InjectGRPC(ctx, md)
	return metadata.NewOutgoingContext(ctx, md)
}
