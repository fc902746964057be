package grpcadapter

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sundial-go/sundial/adapters/internal/rpcschema"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/pipeline"
)

// buildExplicit validates WithMethodOperations.
func (a *Adapter) buildExplicit() error {
	if len(a.cfg.methodOps) == 0 {
		return nil
	}
	a.explicit = make(map[string]*kernel.Op, len(a.cfg.methodOps))
	for full, id := range a.cfg.methodOps {
		if !rpcschema.IsFullMethod(full) {
			return fmt.Errorf("grpcadapter: WithMethodOperations: %q is not a full method name such as \"/acme.orders.v1.Orders/Place\"", full)
		}
		op, ok := a.ops[id]
		if !ok {
			return fmt.Errorf("grpcadapter: WithMethodOperations: method %s: operation %q is not registered", full, id)
		}
		if pol, _ := op.Idempotency(); pol.Enabled {
			// The application's method answers in its own types, which a
			// stored outcome cannot give back: its keyed calls would all be
			// refused (KERNEL_VALIDATION_006). Said at start-up instead.
			return fmt.Errorf("grpcadapter: WithMethodOperations: method %s: operation %q takes idempotency keys, which an application's own method cannot honour (its answer cannot be replayed); serve %q through the adapter's service, or turn its Idempotency off", full, id, id)
		}
		a.explicit[full] = op
	}
	return nil
}

// resolve returns the operation an application method runs under, or nil
// for none. It looks in the WithMethodOperations map first, then the
// adapter's own method names. Then it reads the convention backwards, when
// that operation is registered. Service "Orders" and method "ExportCsv" in
// any package are operation "orders.export-csv".
func (a *Adapter) resolve(full string) *kernel.Op {
	if op, ok := a.explicit[full]; ok {
		return op
	}
	if v, ok := a.resolved.Load(full); ok {
		return v.(*kernel.Op)
	}
	var d *kernel.Op
	if m, ok := a.methods[full]; ok {
		d = m.Op
	} else if svc, name := splitFull(full); svc != "" && name != "" {
		if i := strings.LastIndexByte(svc, '.'); i >= 0 {
			svc = svc[i+1:]
		}
		d = a.ops[kebab(svc)+"."+kebab(name)]
	}
	// Method names come from the client when the server has an
	// UnknownServiceHandler: bound what they can make the cache hold.
	if a.cached.Add(1) <= maxResolved {
		a.resolved.Store(full, d)
	}
	return d
}

// maxResolved bounds the interceptors' cache of resolved method names.
const maxResolved = 4096

// kebab inverts operations.GRPCNames for one-segment names:
// "ExportCsv" -> "export-csv", "Orders" -> "orders".
func kebab(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 4)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' {
			if i > 0 {
				b.WriteByte('-')
			}
			c += 'a' - 'A'
		}
		b.WriteByte(c)
	}
	return b.String()
}

// passThrough reports whether a method is infrastructure the interceptors
// leave alone: gRPC's own services (health, reflection, channelz, ...),
// whose package starts with "grpc.".
func passThrough(full string) bool { return strings.HasPrefix(full, "/grpc.") }

// UnaryServerInterceptor returns an interceptor that runs the
// application's own unary methods through the kernel. Those are methods
// generated from .proto files and registered on the same *grpc.Server.
// They get the same deadline, attribution, breaker, limits, middleware,
// telemetry and call log as the adapter's methods.
//
// A method runs under an operation's pipeline when WithMethodOperations
// maps it to one. It does too when its service and method name, read
// backwards through the naming convention, are a registered operation:
// /acme.v1.Orders/Create, in any package, runs under orders.create. It
// then has that operation's deadline, breaker and limits. The
// application's handler takes the registered one's place. Any other method
// runs through the kernel's host pipeline, named by its full method name.
// That gives it the deadline and application middleware, but no
// per-operation limits. The adapter's own methods pass straight through,
// as do gRPC's services (health, reflection: package "grpc.*").
//
// The handler receives the invocation's context, which carries the
// effective deadline. Middleware sees the request message as the
// invocation's input. The answer leaves by that deadline whatever the
// handler does. A handler that ignores its context is answered
// DeadlineExceeded at the deadline and runs on; the kernel logs its late
// result. An error the handler returns with a gRPC status goes back to the
// client unchanged. That holds unless the pipeline replaced the outcome,
// with a deadline or a cancellation. Its code also decides the outcome's
// kind, as FromStatus maps it. So an Unavailable counts as a breaker
// failure. Any other outcome is converted with Status.
//
//go:noinline
func (a *Adapter) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if _, own := info.Server.(*service); own {
			return handler(ctx, req)
		}
		d := a.resolve(info.FullMethod)
		if d == nil && passThrough(info.FullMethod) {
			return handler(ctx, req)
		}
		start := time.Now()
		o := a.invoke(ctx, info.FullMethod, d, req, func(ctx context.Context, _ *pipeline.Invocation) (any, error) {
			resp, err := handler(ctx, req)
			if err != nil {
				return nil, fromHandler(err)
			}
			return resp, nil
		})
		if err := a.answer(ctx, info.FullMethod, o, start); err != nil {
			return nil, err
		}
		return o.Output, nil
	}
}

// StreamServerInterceptor is UnaryServerInterceptor for streaming methods.
// The whole stream is one invocation: the deadline, breaker and limits of
// its operation apply to the stream as a whole, and the handler's stream
// reports the invocation's context from Context. Once the call has been
// answered — at the deadline, for a handler that ignores its context — the
// handler's stream refuses to send or receive.
func (a *Adapter) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if _, own := srv.(*service); own {
			return handler(srv, ss)
		}
		d := a.resolve(info.FullMethod)
		if d == nil && passThrough(info.FullMethod) {
			return handler(srv, ss)
		}
		start := time.Now()
		s := &stream{ServerStream: ss}
		o := a.invoke(ss.Context(), info.FullMethod, d, nil, func(ctx context.Context, _ *pipeline.Invocation) (any, error) {
			s.ctx = ctx
			return nil, fromHandler(handler(srv, s))
		})
		s.answered.Store(true)
		return a.answer(ss.Context(), info.FullMethod, o, start)
	}
}

// stream is a ServerStream whose context is the invocation's. Once the
// interceptor has returned, grpc-go ends the stream: a handler still
// running (one that ignored its context) must not use it any more, and
// gets an error instead.
type stream struct {
	grpc.ServerStream
	ctx      context.Context // set before the handler runs, on its goroutine
	answered atomic.Bool
}

func (s *stream) Context() context.Context { return s.ctx }

// errAnswered is what a stream's methods return once the call has been
// answered.
var errAnswered = status.Error(codes.Canceled, "grpcadapter: the call has been answered; the stream is closed")

func (s *stream) SendMsg(m any) error {
	if s.answered.Load() {
		return errAnswered
	}
	return s.ServerStream.SendMsg(m)
}

func (s *stream) RecvMsg(m any) error {
	if s.answered.Load() {
		return errAnswered
	}
	return s.ServerStream.RecvMsg(m)
}

func (s *stream) SetHeader(md metadata.MD) error {
	if s.answered.Load() {
		return errAnswered
	}
	return s.ServerStream.SetHeader(md)
}

func (s *stream) SendHeader(md metadata.MD) error {
	if s.answered.Load() {
		return errAnswered
	}
	return s.ServerStream.SendHeader(md)
}

func (s *stream) SetTrailer(md metadata.MD) {
	if !s.answered.Load() {
		s.ServerStream.SetTrailer(md)
	}
}
