package connectadapter

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/propagation"

	"github.com/sundial-go/sundial/adapters/internal/rpccall"
	"github.com/sundial-go/sundial/adapters/internal/rpcschema"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// defaultReadLimit is the largest request message, after inflating, when
// WithReadLimit is not given: 4 MiB, grpc-go's default.
const defaultReadLimit = 4 << 20

// bodySlack is what a request body may hold beyond one message: the
// envelope of gRPC and gRPC-Web, and a little more.
const bodySlack = 1 << 10

// Option configures New and Mount.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	origins   []string // CORS; nil: off
	readLimit int
	pkg       string         // the proto package (WithPackage)
	rpc       rpccall.Config // logger, domain, tolerance, baggage, propagator
}

// defaultPackage is the proto package of the services when WithPackage is
// not given, as on gRPC.
const defaultPackage = "sundial.v1"

// WithPackage sets the proto package of the services built from the
// operations, e.g. "shop.v1": operation orders.create is then procedure
// /shop.v1.Orders/Create. Give the gRPC adapter the same package, so that
// both serve the same methods. The default is "sundial.v1".
func WithPackage(pkg string) Option {
	return optionFunc(func(c *config) { c.pkg = pkg })
}

// WithLogger sets the logger of the call log (one record per call,
// message "connect call"). The default is the kernel's logger; a nil
// logger is ignored.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.rpc.SetLogger(l) })
}

// WithDomain sets the domain of the google.rpc.ErrorInfo of every failed
// call. The default is "sundial", as on gRPC; "" keeps it.
func WithDomain(domain string) Option {
	return optionFunc(func(c *config) { c.rpc.SetDomain(domain) })
}

// WithDeadlineTolerance sets how close to the caller's deadline a
// cancellation may arrive and still count as the deadline: TIMEOUT rather
// than CANCELLED. A client whose deadline expires closes its request, as
// one that gives up does; the server is told no reason. The client's timer
// fires a network hop before the server's. The default is 10ms, as on
// gRPC. 0 turns the tolerance off, and a negative d keeps the default.
func WithDeadlineTolerance(d time.Duration) Option {
	return optionFunc(func(c *config) { c.rpc.SetTolerance(d) })
}

// WithBaggageLimit sets the largest W3C baggage header, in bytes (all its
// values together), that is read for a call. A larger one is dropped
// whole, with a warning in the log. The kernel then bounds the members it
// copies (see propagation.Baggage). The default is 8192 bytes; n <= 0
// keeps it.
func WithBaggageLimit(n int) Option {
	return optionFunc(func(c *config) { c.rpc.SetBaggageLimit(n) })
}

// WithPropagator sets what extracts the trace context (and whatever else
// p carries) from the request headers. The invocation's span continues
// it. The default is propagation.Propagator(): W3C traceparent,
// tracestate and baggage. A nil p extracts no trace context. The W3C
// baggage header is read whatever p is.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return optionFunc(func(c *config) { c.rpc.SetPropagator(p) })
}

// WithCORS answers cross-origin calls from browsers of the given origins,
// such as "https://shop.example". "*" allows any origin; no origin at all
// leaves CORS off. Preflight requests are answered before any operation
// runs. Without CORS, a browser on another origin cannot read the answers.
func WithCORS(origins ...string) Option {
	return optionFunc(func(c *config) {
		c.origins = nil // rs/cors reads an empty list as every origin
		if len(origins) > 0 {
			c.origins = append([]string(nil), origins...)
		}
	})
}

// WithReadLimit sets the largest request message in bytes, after
// inflating. A larger one is refused with resource_exhausted. The default
// is 4 MiB; n <= 0 keeps it.
func WithReadLimit(n int) Option {
	return optionFunc(func(c *config) {
		if n > 0 {
			c.readLimit = n
		}
	})
}

// New returns the handler of every operation registered with k, unary or
// streaming. Each one is a procedure at its gRPC method's path, such as
// /shop.v1.Orders/Create, with the messages the gRPC adapter builds from
// the same operations (see docs/grpc.md). A call of any other path is
// answered unimplemented, in its protocol's form; any other request 404.
// New fails as the gRPC adapter's New does when an operation has no
// protobuf form.
func New(k *kernel.Kernel, opts ...Option) (http.Handler, error) {
	h, _, err := build(k, opts)
	return h, err
}

// Mount puts the handler of New on e, one route per service:
// "/shop.v1.Orders/*" answers every method of shop.v1.Orders.
func Mount(e *echo.Echo, k *kernel.Kernel, opts ...Option) error {
	if e == nil {
		return errors.New("connectadapter: Mount: nil echo")
	}
	h, services, err := build(k, opts)
	if err != nil {
		return err
	}
	wrapped := echo.WrapHandler(h)
	for _, s := range services {
		e.Any("/"+s+"/*", wrapped)
	}
	return nil
}

// build returns the handler of every method of k's operations and the
// names of their services.
func build(k *kernel.Kernel, opts []Option) (http.Handler, []string, error) {
	if k == nil {
		return nil, nil, errors.New("connectadapter: nil kernel")
	}
	cfg := config{readLimit: defaultReadLimit, pkg: defaultPackage,
		rpc: rpccall.Defaults(pipeline.ProtocolConnect)}
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	set, err := rpcschema.Build(k.Operations(), cfg.pkg, "")
	if err != nil {
		return nil, nil, fmt.Errorf("connectadapter: %w", err)
	}
	srv := rpccall.New(k, cfg.rpc)
	mux := http.NewServeMux()
	services := make([]string, 0, len(set.Services))
	unknown := unknownMethod{srv: srv, services: make(map[string]bool, len(set.Services))}
	for _, sv := range set.Services {
		for _, m := range sv.Methods {
			p := &procedure{srv: srv, m: m, readLimit: cfg.readLimit}
			mux.Handle(m.Full, p.handler(&cfg))
		}
		services = append(services, sv.Full)
		unknown.services[sv.Full] = true
		mux.Handle("/"+sv.Full+"/", unknown)
	}
	mux.Handle("/", unknownPath{unknown})
	var h http.Handler = mux
	if cfg.origins != nil {
		h = withCORS(h, cfg.origins)
	}
	return h, services, nil
}

// handler returns connect-go's handler of p's procedure.
func (p *procedure) handler(cfg *config) http.Handler {
	in := p.m.Input()
	policy := p.m.Op.Descriptor().InputPolicy
	opts := []connect.HandlerOption{
		connect.WithSchema(p.m.RPC),
		connect.WithRequestInitializer(func(_ connect.Spec, x any) error {
			if r, ok := x.(*request); ok {
				r.init(in, policy.AllowUnknownFields)
			}
			return nil
		}),
		connect.WithReadMaxBytes(cfg.readLimit),
		connect.WithCompression(gzipName, boundedGzip(cfg.readLimit), newGzipWriter),
		connect.WithCodec(codec{name: "proto"}),
		connect.WithCodec(codec{name: "json", json: true}),
		connect.WithCodec(codec{name: "json; charset=utf-8", json: true}),
	}
	// The whole body of one message is bounded too: connect-go reads an
	// oversized message to its end to report its size. The messages of a
	// client or bidi stream are bounded one by one; the stream's clocks
	// and bounds bound the whole (kernel.Op.Stream).
	oneMessage := func(h http.Handler) http.Handler {
		return http.MaxBytesHandler(h, int64(cfg.readLimit)+bodySlack)
	}
	d := p.m.Desc
	switch k := d.Kind(); k {
	case operations.ServerStream:
		return oneMessage(p.streamHandler(k, opts))
	case operations.ClientStream, operations.BidiStream:
		return p.streamHandler(k, opts)
	}
	if d.Method == http.MethodGet {
		opts = append(opts, connect.WithIdempotency(connect.IdempotencyNoSideEffects))
	} else if d.Idempotent {
		opts = append(opts, connect.WithIdempotency(connect.IdempotencyIdempotent))
	}
	return oneMessage(connect.NewUnaryHandler(p.m.Full, p.call, opts...))
}
