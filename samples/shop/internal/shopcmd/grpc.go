package shopcmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"

	"github.com/labstack/echo/v4"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sundial-go/sundial/adapters/connectadapter"
	"github.com/sundial-go/sundial/adapters/grpcadapter"
	"github.com/sundial-go/sundial/kernel"
)

// GRPCPackage is the proto package of the shop's services:
// orders.create is /shop.v1.Orders/Create.
const GRPCPackage = "shop.v1"

// goPackagePrefix is where Go clients generate the shop's schema:
// shop.v1's go_package is this prefix, then "/shop/v1;shopv1".
const goPackagePrefix = "github.com/sundial-go/sundial/samples/shop/gen"

// grpcServer is the shop's gRPC listener: every operation as a method of
// shop.v1.<Group>, server reflection (grpcurl can list and call them) and
// the standard health service.
//
// Its shutdown has three steps, which serve drives: notServing (the lame
// duck: health answers NOT_SERVING, watchers are told, calls are still
// served), drain (new calls are refused, in-flight calls run on, and the
// long-lived infrastructure streams — health Watch, reflection — end,
// since no client call is behind them) and stop (wait for the in-flight
// calls within the grace period, then cancel what is left).
type grpcServer struct {
	srv    *grpc.Server
	hs     *health.Server
	k      *kernel.Kernel
	served chan error

	// draining is canceled when drain starts: the infrastructure streams
	// still open end on it.
	draining   context.Context
	endStreams context.CancelFunc
	drainOnce  sync.Once
	drained    chan struct{} // closed once GracefulStop returned
}

// mountConnect serves the operations over Connect, gRPC and gRPC-Web on
// e, with the gRPC listener's names.
func mountConnect(e *echo.Echo, k *kernel.Kernel, o ServeOptions) error {
	opts := []connectadapter.Option{connectadapter.WithPackage(GRPCPackage), connectadapter.WithLogger(o.Logger)}
	if len(o.ConnectOrigins) > 0 {
		opts = append(opts, connectadapter.WithCORS(o.ConnectOrigins...))
	}
	return connectadapter.Mount(e, k, opts...)
}

// startGRPC starts serving k over gRPC on addr.
func startGRPC(k *kernel.Kernel, addr string, logger *slog.Logger, stdout io.Writer) (*grpcServer, error) {
	a, err := grpcadapter.New(k, grpcadapter.WithPackage(GRPCPackage), grpcadapter.WithLogger(logger),
		grpcadapter.WithGoPackagePrefix(goPackagePrefix))
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	g := &grpcServer{k: k, served: make(chan error, 1), drained: make(chan struct{})}
	g.draining, g.endStreams = context.WithCancel(context.Background())
	// The recommended listener bounds (docs/grpc.md); the guard that
	// closes misbehaving connections logs to the shop's log and counts on
	// its /metrics.
	bounds := grpcadapter.DefaultBounds()
	bounds.Logger, bounds.MeterProvider = logger, k.MeterProvider()
	g.srv = grpc.NewServer(append(bounds.ServerOptions(),
		// The shop has no services of its own; the interceptors would run
		// them through the kernel like the operations.
		grpc.ChainUnaryInterceptor(a.UnaryServerInterceptor()),
		// The first one ends gRPC's own long-lived streams when the
		// server drains (see infraStream).
		grpc.ChainStreamInterceptor(g.endInfraStreamsOnDrain, a.StreamServerInterceptor()),
		// Calls to unknown methods are answered through the kernel too:
		// observed like every other answer.
		grpc.UnknownServiceHandler(a.UnknownServiceHandler),
	)...)
	a.Register(g.srv)
	a.RegisterReflection(g.srv)
	g.hs = health.NewServer()
	healthpb.RegisterHealthServer(g.srv, g.hs)
	for _, name := range a.ServiceNames() {
		g.hs.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
	}
	go func() { g.served <- g.srv.Serve(ln) }()
	fmt.Fprintf(stdout, "shop: serving gRPC on %s\n", ln.Addr())
	return g, nil
}

// notServing turns every service's health NOT_SERVING (Check answers it,
// Watch streams are sent it); calls are still served.
func (g *grpcServer) notServing() { g.hs.Shutdown() }

// drain starts the graceful stop: health NOT_SERVING, listener closed,
// GOAWAY sent (new calls are refused), infrastructure streams ended;
// in-flight calls run on. It does not wait.
func (g *grpcServer) drain() {
	g.drainOnce.Do(func() {
		g.hs.Shutdown() // before the streams end: a watcher is told NOT_SERVING first
		g.endStreams()
		go func() {
			g.srv.GracefulStop()
			close(g.drained)
		}()
	})
}

// stop drains (if drain was not called) and waits until the in-flight
// calls finished or sctx ends; then it cancels what is left. It reports an
// error only if calls of the kernel were still running then: a stream with
// no invocation behind it (a request message still on its way, an
// infrastructure stream whose client does not read) is closed without
// one.
func (g *grpcServer) stop(sctx context.Context) error {
	g.drain()
	var err error
	// drained wins over an expired sctx: a select between two ready
	// channels picks one at random, and a drained server would be
	// reported as cut off half the time.
	select {
	case <-g.drained:
	default:
		select {
		case <-g.drained:
		case <-sctx.Done():
			select {
			case <-g.drained:
			default:
				running := g.k.Running()
				g.srv.Stop()
				<-g.drained
				if running > 0 {
					err = fmt.Errorf("grace period over: %d in-flight calls were canceled: %w", running, sctx.Err())
				}
			}
		}
	}
	if serr := <-g.served; serr != nil && !errors.Is(serr, grpc.ErrServerStopped) {
		err = errors.Join(err, serr)
	}
	return err
}

// endInfraStreamsOnDrain is a stream interceptor for gRPC's own streaming
// services (health Watch, reflection; package "grpc."): such a stream
// stays open as long as its client likes, and would hold GracefulStop for
// the whole grace period although no call runs behind it. Once the server
// drains, the stream ends with Unavailable — a health watcher after it was
// sent NOT_SERVING.
func (g *grpcServer) endInfraStreamsOnDrain(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if !strings.HasPrefix(info.FullMethod, "/grpc.") {
		return handler(srv, ss)
	}
	ctx, cancel := context.WithCancel(ss.Context())
	defer cancel()
	s := &infraStream{ServerStream: ss, ctx: ctx, cancel: cancel,
		watch: info.FullMethod == healthpb.Health_Watch_FullMethodName}
	stop := context.AfterFunc(g.draining, s.drain)
	defer stop()
	err := handler(srv, s)
	if g.draining.Err() != nil {
		return status.Error(codes.Unavailable, "shop: shutting down")
	}
	return err
}

// infraStream is an infrastructure stream that ends when the server
// drains: its context is canceled and a pending receive returns io.EOF.
// A health watcher is canceled only once the last status it was sent is
// not SERVING (notServing has queued NOT_SERVING for it before).
type infraStream struct {
	grpc.ServerStream
	ctx    context.Context
	cancel context.CancelFunc
	watch  bool

	mu       sync.Mutex
	draining bool
	sent     bool // a health status was sent
	last     healthpb.HealthCheckResponse_ServingStatus
}

func (s *infraStream) Context() context.Context { return s.ctx }

func (s *infraStream) drain() {
	s.mu.Lock()
	s.draining = true
	end := !s.watch || (s.sent && s.last != healthpb.HealthCheckResponse_SERVING)
	s.mu.Unlock()
	if end {
		s.cancel()
	}
}

func (s *infraStream) SendMsg(m any) error {
	err := s.ServerStream.SendMsg(m)
	r, ok := m.(*healthpb.HealthCheckResponse)
	if !ok {
		return err
	}
	s.mu.Lock()
	s.sent, s.last = true, r.GetStatus()
	end := s.draining && s.last != healthpb.HealthCheckResponse_SERVING
	s.mu.Unlock()
	if end {
		s.cancel()
	}
	return err
}

// RecvMsg receives on another goroutine so that draining can end the
// wait: the handler then sees io.EOF (the client's end of the stream) and
// returns; grpc-go ends the stream, and the pending receive with it.
func (s *infraStream) RecvMsg(m any) error {
	if s.ctx.Err() != nil {
		return io.EOF
	}
	got := make(chan error, 1)
	go func() { got <- s.ServerStream.RecvMsg(m) }()
	select {
	case err := <-got:
		return err
	case <-s.ctx.Done():
		select {
		case err := <-got: // received already: deterministic, not a coin toss
			return err
		default:
			return io.EOF
		}
	}
}
