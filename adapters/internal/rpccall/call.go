// Package rpccall is what the gRPC and Connect adapters do for every call
// of a method: its parent context and deadline, its caller's trace
// context, baggage, priority and idempotency key, its status, and its
// call log record.
package rpccall

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundial-go/sundial/adapters/internal/header"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/kernel/logs"
	kprop "github.com/sundial-go/sundial/kernel/propagation"
	"github.com/sundial-go/sundial/pipeline"
)

// Config configures a Server.
type Config struct {
	// Logger receives the call log; nil: the kernel's.
	Logger *slog.Logger
	// Domain is the google.rpc.ErrorInfo domain; "": DefaultDomain.
	Domain string
	// Tolerance is how close to the deadline a cancellation counts as the
	// deadline.
	Tolerance time.Duration
	// BaggageLimit bounds the baggage metadata, all values together.
	BaggageLimit int
	// Propagator extracts the trace context when OwnPropagator is set;
	// nil then extracts none. Otherwise the kernel's propagator extracts
	// the trace context and the baggage.
	Propagator    propagation.TextMapPropagator
	OwnPropagator bool
	// Protocol is the calls' protocol.
	Protocol pipeline.Protocol
}

// Server answers the calls of one adapter. Create it with New.
type Server struct {
	K          *kernel.Kernel
	Logger     *slog.Logger // the call log
	Canceled   *Canceled    // calls canceled by their clients
	Domain     string
	cfg        Config
	baggageLog *slog.Logger // Logger, sampled: records of dropped baggage
}

// New returns the Server of k's calls.
func New(k *kernel.Kernel, cfg Config) *Server {
	s := &Server{K: k, Logger: cmp.Or(cfg.Logger, k.Logger()), Domain: cmp.Or(cfg.Domain, DefaultDomain), cfg: cfg}
	s.Canceled = NewCanceled(s.Logger, k.MeterProvider())
	s.baggageLog = logs.Sampled(s.Logger, slog.LevelWarn, MsgBaggageDropped)
	return s
}

// Defaults of the adapters' options.
const (
	// DefaultTolerance is the default of Config.Tolerance.
	DefaultTolerance = 10 * time.Millisecond
	// DefaultBaggageLimit is the default of Config.BaggageLimit: 8192
	// bytes, the W3C limit.
	DefaultBaggageLimit = 8192
)

// Enter prepares a call of the method full whose server context is ctx
// and whose request metadata are md. It fills in c and returns the
// invocation's parent context (see Inbound and Prepare). Call stop once
// the kernel has answered.
func (s *Server) Enter(ctx context.Context, md Carrier, full string, c *kernel.Caller) (parent context.Context, stop func()) {
	parent, stop = s.Inbound(ctx)
	return s.Prepare(md, parent, full, c), stop
}

// Answer logs a call of full with msg and returns the status of its
// outcome: nil on success.
func (s *Server) Answer(ctx context.Context, full string, o kernel.Outcome, start time.Time, msg string) *status.Status {
	st := Status(o.Err, s.Domain)
	s.LogCall(ctx, full, o, st, start, msg)
	return st
}

// Header returns the HTTP request headers h of a call of the operation op
// ("" for none) and method full as its metadata. Baggage over the limit
// is hidden.
func (s *Server) Header(ctx context.Context, h http.Header, op, full string) Header {
	return Header{H: h, NoBaggage: s.BaggageOver(ctx, h.Values(MDBaggage), op, full)}
}

// Carrier is a call's request metadata.
type Carrier interface {
	propagation.TextMapCarrier
	// Values returns every value of key.
	Values(key string) []string
}

// Metadata keys the adapters read.
const (
	MDBaggage        = "baggage"
	MDIdempotencyKey = "idempotency-key"
	MDPriority       = "sundial-priority" // kernel.Caller.Priority
)

// Prepare fills in c for a call of the method full whose request metadata
// are md: the protocol, the route (full), the caller's priority and
// idempotency key. It returns parent carrying md's trace context and
// baggage (see Extract).
func (s *Server) Prepare(md Carrier, parent context.Context, full string, c *kernel.Caller) context.Context {
	parent = s.Extract(parent, md)
	c.Protocol = s.cfg.Protocol
	if c.Route == "" {
		c.Route = full
	}
	if c.Transport.RPCMethod == "" {
		c.Transport = kernel.Transport{RPCMethod: full, Status: StatusCode}
	}
	// A repeated priority names no class: KERNEL_VALIDATION_009.
	if vs := md.Values(MDPriority); len(vs) == 1 {
		c.Priority = vs[0]
	} else if len(vs) > 1 {
		c.Priority = strings.Join(vs, ", ")
	}
	// A repeated key is malformed; the kernel checks a single one's
	// grammar. A malformed key is InvalidArgument KERNEL_VALIDATION_005 on
	// an operation that takes keys, and ignored on one that does not.
	if vs := md.Values(MDIdempotencyKey); len(vs) == 1 {
		c.IdempotencyKey = vs[0]
	} else if len(vs) > 1 {
		c.BadIdempotencyKey = true
	}
	return parent
}

// Inbound returns the invocation's parent context for a call whose server
// context is ctx. The kernel reads the caller's deadline from it.
//
// Without a deadline the parent is ctx itself. With one, the parent keeps
// ctx's values but not its cancellation. When ctx ends, the parent ends
// with a cause that says which token fired. It is the deadline when ctx's
// own deadline fired. It is the deadline too when the cancellation arrived
// no earlier than the tolerance before the deadline: a client's deadline
// timer, seen from the server. Otherwise it is the caller's cancellation.
// The kernel attributes the outcome from that cause. stop releases the
// parent; call it once the kernel has answered.
func (s *Server) Inbound(ctx context.Context) (parent context.Context, stop func()) {
	d, ok := ctx.Deadline()
	if !ok {
		return ctx, func() {}
	}
	base, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	withDeadline, cancelDeadline := context.WithDeadline(base, d)
	tolerance := s.cfg.Tolerance
	after := context.AfterFunc(ctx, func() {
		if ctx.Err() == context.DeadlineExceeded || !time.Now().Before(d.Add(-tolerance)) {
			cancel(ErrCallerDeadline)
			return
		}
		cancel(context.Cause(ctx))
	})
	return withDeadline, func() {
		after()
		cancelDeadline()
		cancel(nil)
	}
}

// ErrCallerDeadline is the cause of a parent context ended by the
// caller's deadline. It wraps context.DeadlineExceeded, which is what the
// kernel attributes as TIMEOUT. Its text, and MsgBaggageDropped, name the
// gRPC adapter on Connect calls too: the logs read the same.
var ErrCallerDeadline = fmt.Errorf("grpcadapter: the caller's deadline passed: %w", context.DeadlineExceeded)

// MsgBaggageDropped is the message of the record of dropped baggage
// metadata.
const MsgBaggageDropped = "grpcadapter: baggage metadata dropped"

// BaggageOver reports whether the baggage values vs are over the limit,
// and then logs a warning, sampled: callers send such metadata at will.
func (s *Server) BaggageOver(ctx context.Context, vs []string, op, full string) bool {
	size := 0
	for _, v := range vs {
		size += len(v)
	}
	if size <= s.cfg.BaggageLimit {
		return false
	}
	s.baggageLog.LogAttrs(ctx, slog.LevelWarn, MsgBaggageDropped,
		slog.String("operation", cmp.Or(op, full)), slog.Int("bytes", size), slog.Int("limit", s.cfg.BaggageLimit))
	return true
}

// Extract returns parent carrying the W3C baggage of md, which the kernel
// copies into the invocation, and what the propagator extracts from it
// (by default the W3C trace context, which the invocation's span
// continues).
func (s *Server) Extract(parent context.Context, md Carrier) context.Context {
	if !s.cfg.OwnPropagator {
		return kprop.Propagator().Extract(parent, md) // trace context and baggage
	}
	parent = propagation.Baggage{}.Extract(parent, md)
	if p := s.cfg.Propagator; p != nil {
		parent = p.Extract(parent, md)
	}
	return parent
}

// LogCall writes the call log record of one call of full, answered with
// status st, with the message msg: Info, or Error for an UNEXPECTED
// outcome (whose internal text is logged, never sent). Calls their
// clients canceled are counted, and only a few get a record each (see
// Canceled).
func (s *Server) LogCall(ctx context.Context, full string, o kernel.Outcome, st *status.Status, start time.Time, msg string) {
	kind, code := pipeline.KindOK, ""
	if e := pipeline.AsError(o.Err); e != nil {
		kind, code = e.Kind(), e.Code()
	}
	if kind == pipeline.KindCanceled && ctx.Err() != nil && !s.Canceled.Add(ctx, false) {
		return
	}
	level := slog.LevelInfo
	if kind == pipeline.KindUnexpected {
		level = slog.LevelError
	}
	if !s.Logger.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 7)
	attrs = append(attrs,
		slog.String("operation", cmp.Or(o.Invocation.Name(), full)),
		slog.String("method", full),
		slog.String("grpcCode", st.Code().String()),
		slog.String("code", code),
		slog.Float64("durationMs", float64(time.Since(start).Microseconds())/1000),
		slog.String("traceId", o.TraceID),
	)
	if kind == pipeline.KindUnexpected {
		attrs = append(attrs, slog.String("error", pipeline.ErrorText(o.Err)))
	}
	s.Logger.LogAttrs(ctx, level, msg, attrs...)
}

// CodeUnknownMethod is the code of a call to a method the server does not
// serve.
const CodeUnknownMethod = "GRPC_NOT_FOUND_001"

// UnknownRoute names the invocations of calls to unknown methods.
const UnknownRoute = "(unknown)"

// Unknown answers a call of the unknown method full, whose request
// metadata are md, through the kernel. known reports whether a service is
// served. It returns the outcome and the status of the answer.
func (s *Server) Unknown(parent context.Context, md Carrier, full string, known func(service string) bool) (kernel.Outcome, *status.Status) {
	svc, _, _ := strings.Cut(strings.TrimPrefix(full, "/"), "/")
	msg := fmt.Sprintf("unknown service %s", svc)
	if known(svc) {
		msg = fmt.Sprintf("unknown method %s", full)
	}
	e := pipeline.NewError(pipeline.KindNotFound, CodeUnknownMethod, msg).WithDetail("method", full)
	c := kernel.Caller{Route: UnknownRoute,
		Transport: kernel.Transport{RPCMethod: full, RPCUnknown: true, Status: unimplemented}}
	parent = s.Prepare(md, parent, full, &c)
	return s.K.Reject(parent, c, e), status.New(codes.Unimplemented, msg)
}

// unimplemented is the gRPC code of every call to an unknown method
// (kernel.Transport.Status).
func unimplemented(error) int { return int(codes.Unimplemented) }

// Header is a call's HTTP request headers as its metadata.
type Header struct {
	H http.Header
	// NoBaggage hides the baggage (see BaggageOver).
	NoBaggage bool
}

// Values returns the values of key.
func (m Header) Values(key string) []string {
	if m.NoBaggage && strings.EqualFold(key, MDBaggage) {
		return nil
	}
	return m.H.Values(key)
}

// Get returns the first value of key, or "".
func (m Header) Get(key string) string { return First(m.Values(key)) }

// Set does nothing: Extract only reads.
func (Header) Set(string, string) {}

// Keys returns the keys, lower-cased.
func (m Header) Keys() []string {
	keys := make([]string, 0, len(m.H))
	for k := range m.H {
		if k = strings.ToLower(k); !m.NoBaggage || k != MDBaggage {
			keys = append(keys, k)
		}
	}
	return keys
}

// First returns the first of vs, or "".
func First(vs []string) string {
	if len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// OwnedHeader reports whether a handler may not set the header name on a
// gRPC or Connect answer. Those the server owns on every protocol
// (header.Owned) are refused, and Accept-Encoding. So is any name the
// protocols frame the answer with (content-, grpc-, connect-, trailer-,
// a pseudo-header), and any of Sundial's own (sundial-).
func OwnedHeader(name string) bool {
	if header.Owned(name) || strings.EqualFold(name, "accept-encoding") {
		return true
	}
	n := strings.ToLower(name)
	for _, p := range []string{":", "content-", "grpc-", "connect-", "trailer-", "sundial-"} {
		if strings.HasPrefix(n, p) {
			return true
		}
	}
	return false
}
