package grpcadapter

import (
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/sundial-go/sundial/adapters/internal/rpccall"
	"github.com/sundial-go/sundial/pipeline"
)

// defaultPackage is the proto package of the generated services when
// WithPackage is not given.
const defaultPackage = "sundial.v1"

// Option configures New. Every option may be given to New once; a later
// option of the same kind replaces an earlier one.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	pkg         string
	goPrefix    string
	rpc         rpccall.Config // logger, domain, tolerance, baggage, propagator
	methodOps   map[string]string
	recvTimeout time.Duration
	recvExact   bool // recvTimeout without its jitter (tests)
}

func defaultConfig() config {
	return config{
		pkg:         defaultPackage,
		rpc:         rpccall.Defaults(pipeline.ProtocolGRPC),
		recvTimeout: defaultRecvTimeout,
	}
}

// WithPackage sets the proto package of the services built from the
// operations, e.g. "shop.v1": operation orders.create is then method
// /shop.v1.Orders/Create. The default is "sundial.v1". New rejects a
// package that is not dot-separated protobuf identifiers.
func WithPackage(pkg string) Option {
	return optionFunc(func(c *config) { c.pkg = pkg })
}

// WithGoPackagePrefix gives every .proto file the adapter describes a
// go_package option under prefix, as buf's managed mode does with its
// go_package_prefix: file shop/v1/operations.proto (package shop.v1) gets
// "<prefix>/shop/v1;shopv1". protoc-gen-go then generates the files the
// reflection service exports without M flags. The default is no
// go_package. New rejects a prefix that is not a Go import path.
func WithGoPackagePrefix(prefix string) Option {
	return optionFunc(func(c *config) { c.goPrefix = prefix })
}

// WithDomain sets the domain of the google.rpc.ErrorInfo attached to every
// failed call. The default is "sundial"; "" keeps it.
func WithDomain(domain string) Option {
	return optionFunc(func(c *config) { c.rpc.SetDomain(domain) })
}

// WithLogger sets the logger of the call log (one record per call,
// message "grpc call"). The default is the kernel's logger; a nil logger is
// ignored.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.rpc.SetLogger(l) })
}

// WithDeadlineTolerance sets how close to the inbound deadline a client's
// cancellation may arrive and still count as the deadline: TIMEOUT rather
// than CANCELLED. gRPC gives the server no reason with a cancellation. A
// client whose deadline expires sends the same RST_STREAM CANCEL as one
// that gives up. The client's timer fires a network hop before the
// server's. Without a tolerance, a timed-out call would often be logged
// and counted as cancelled. The default is 10ms. 0 turns the tolerance
// off, and a negative d keeps the default.
func WithDeadlineTolerance(d time.Duration) Option {
	return optionFunc(func(c *config) { c.rpc.SetTolerance(d) })
}

// WithMethodOperations maps full gRPC method names of the application's
// own services ("/acme.orders.v1.Orders/Place") to operation IDs
// ("orders.create"), for the server interceptors: such a method runs under
// that operation's pipeline — its deadline, breaker and limits — with the
// application's handler in place of the registered one
// (kernel.Unary.Handler). Methods not in the
// map are resolved by convention (see Adapter.UnaryServerInterceptor). New
// fails when a method name is malformed or an ID is not registered. Later
// calls add to the map.
func WithMethodOperations(m map[string]string) Option {
	return optionFunc(func(c *config) {
		if c.methodOps == nil {
			c.methodOps = make(map[string]string, len(m))
		}
		for k, v := range m {
			c.methodOps[k] = v
		}
	})
}

// WithPropagator sets what extracts trace context (and whatever else p
// carries) from the request metadata into the invocation's parent context,
// under which the kernel starts the invocation's span. The default is
// propagation.Propagator(): W3C traceparent, tracestate and baggage, so the
// span continues the caller's trace. A nil p extracts no trace context
// (for a server whose otelgrpc stats handler does it instead). The W3C
// "baggage" metadata is extracted whatever p is; the kernel copies it into
// the invocation's baggage.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return optionFunc(func(c *config) { c.rpc.SetPropagator(p) })
}

// WithBaggageLimit sets the largest W3C "baggage" metadata, in bytes (all
// its values together), that is extracted for an invocation; a larger one
// is dropped whole, with a warning in the log. The kernel then bounds the
// members it copies (see propagation.Baggage). The default is 8192 bytes;
// n <= 0 keeps it.
func WithBaggageLimit(n int) Option {
	return optionFunc(func(c *config) { c.rpc.SetBaggageLimit(n) })
}

// WithRecvTimeout bounds the time the request message of one of the
// adapter's methods may take to arrive. It counts from when grpc-go hands
// the call to the adapter, once its headers have arrived. A call whose
// message is not complete by then is answered DeadlineExceeded /
// KERNEL_TIMEOUT_001. The kernel observes it as a rejection, with no
// permit spent, and its stream is closed. Each call waits d plus up to d/4
// drawn at random, so calls stalled together are answered apart. The
// caller's own deadline (grpc-timeout) ends the wait earlier when it is
// shorter. The default is 5s. 0 turns the bound off: the caller's deadline
// or the connection's keepalive then ends the wait. A negative d keeps the
// default. A connection that stalls many calls is closed (see
// Bounds.ServerOptions).
//
// Your own services' generated handlers read the message before any
// interceptor runs. For them the bound is ServerOptions'
// MaxConcurrentStreams per connection and its keepalive.
func WithRecvTimeout(d time.Duration) Option {
	// grpc-go (v1.85) reads a unary request inside the method handler: the
	// handler's dec is the stream's RecvMsg (server.go, wrapUnaryHandler).
	// It waits until the whole message has arrived or the stream's context
	// ends. So the adapter waits for dec for at most d. When the bound
	// fires, grpc-go writes the status and closes the stream, which cancels
	// the stream's context and ends the read. The message is read on a
	// receiver goroutine, which then runs the call itself; the bound covers
	// the read only. The goroutine reads one message after another and
	// exits once idle for a few milliseconds. The bound costs one timer per
	// call. Generated handlers call dec themselves, before any interceptor.
	return optionFunc(func(c *config) {
		if d >= 0 {
			c.recvTimeout = d
		}
	})
}
