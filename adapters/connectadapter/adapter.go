package connectadapter

import (
	"errors"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"github.com/labstack/echo/v4"

	"github.com/sundial-go/sundial/adapters/grpcadapter"
	"github.com/sundial-go/sundial/adapters/internal/rpcbridge"
	"github.com/sundial-go/sundial/operations"
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

// New returns the handler of every operation g serves, unary or
// streaming. Each one is a procedure at the gRPC method's path, such as
// /shop.v1.Orders/Create. A call of any other path is answered
// unimplemented, in its protocol's form; any other request 404.
func New(g *grpcadapter.Adapter, opts ...Option) (http.Handler, error) {
	h, _, err := build(g, opts)
	return h, err
}

// Mount puts the handler of New on e, one route per service:
// "/shop.v1.Orders/*" answers every method of shop.v1.Orders.
func Mount(e *echo.Echo, g *grpcadapter.Adapter, opts ...Option) error {
	if e == nil {
		return errors.New("connectadapter: Mount: nil echo")
	}
	h, services, err := build(g, opts)
	if err != nil {
		return err
	}
	wrapped := echo.WrapHandler(h)
	for _, s := range services {
		e.Any("/"+s+"/*", wrapped)
	}
	return nil
}

// build returns the handler of every method of g and the names of their
// services.
func build(g *grpcadapter.Adapter, opts []Option) (http.Handler, []string, error) {
	var srv rpcbridge.Server
	if g != nil && rpcbridge.Of != nil {
		srv = rpcbridge.Of(g)
	}
	if srv == nil {
		return nil, nil, errors.New("connectadapter: nil grpcadapter.Adapter")
	}
	cfg := config{readLimit: defaultReadLimit}
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	mux := http.NewServeMux()
	var services []string
	for _, m := range srv.Methods() {
		p := &procedure{srv: srv, m: m, readLimit: cfg.readLimit}
		mux.Handle(m.Full, p.handler(&cfg))
		if s, _, _ := strings.Cut(strings.TrimPrefix(m.Full, "/"), "/"); len(services) == 0 || services[len(services)-1] != s {
			services = append(services, s)
			mux.Handle("/"+s+"/", unknownMethod{srv})
		}
	}
	mux.Handle("/", unknownPath{unknownMethod{srv}})
	var h http.Handler = mux
	if cfg.origins != nil {
		h = withCORS(h, cfg.origins)
	}
	return h, services, nil
}

// handler returns connect-go's handler of p's procedure.
func (p *procedure) handler(cfg *config) http.Handler {
	in := p.m.Desc.Input()
	policy := p.m.Op.Descriptor().InputPolicy
	opts := []connect.HandlerOption{
		connect.WithSchema(p.m.Desc),
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
	d := p.m.Op.Descriptor()
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
