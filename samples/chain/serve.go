package main

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"

	"github.com/sundial-go/sundial/adapters/grpcadapter"
	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
)

// DefaultConfig is the chain's embedded default configuration, shared by
// every role: each kernel reads the keys of its own operations.
//
//go:embed chain.json
var DefaultConfig []byte

// ProtoPackage is the proto package of Billing's gRPC services:
// billing.charge is /chain.v1.Billing/Charge.
const ProtoPackage = "chain.v1"

// shutdownGrace bounds how long a server waits for in-flight calls when it
// stops.
const shutdownGrace = 5 * time.Second

// registrar is what each role's service implements.
type registrar interface {
	Register(reg *operations.Registry) error
}

// newKernel builds the kernel of one role: its operations, the embedded
// config, an optional config file and CHAIN_ environment overrides. Each
// role gets an OpenTelemetry SDK tracer provider of its own with no
// exporter: nothing leaves the process, but every invocation has a real
// W3C trace ID, continued from the caller's traceparent, so the access
// logs of all four roles show one trace ID per request.
func newKernel(svc registrar, configFile string, logger *slog.Logger, opts ...kernel.Option) (*kernel.Kernel, error) {
	reg := operations.NewRegistry()
	if err := svc.Register(reg); err != nil {
		return nil, err
	}
	base := []kernel.Option{
		kernel.WithRegistry(reg),
		kernel.WithConfigJSON(DefaultConfig),
		kernel.WithConfigFile(configFile),
		kernel.WithEnv("CHAIN_"),
		kernel.WithLogger(logger),
		kernel.WithTracerProvider(sdktrace.NewTracerProvider()),
	}
	return kernel.New(append(base, opts...)...)
}

// server is one running role.
type server struct {
	name string
	addr string
	stop func(ctx context.Context) error
}

// serveHTTP serves k's operations (and the extra routes) over HTTP on ln.
func serveHTTP(name string, ln net.Listener, k *kernel.Kernel, logger *slog.Logger, routes func(*echo.Echo)) (*server, error) {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	if _, err := httpadapter.Mount(e, k, httpadapter.WithLogger(logger)); err != nil {
		return nil, err
	}
	if routes != nil {
		routes(e)
	}
	hs := &http.Server{Handler: e, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	return &server{name: name, addr: ln.Addr().String(), stop: func(ctx context.Context) error {
		err := hs.Shutdown(ctx)
		if err != nil {
			hs.Close()
		}
		if serr := <-done; !errors.Is(serr, http.ErrServerClosed) {
			err = errors.Join(err, serr)
		}
		// Invocations answered at their deadline may still be running.
		return errors.Join(err, k.Wait(ctx))
	}}, nil
}

// serveGRPC serves k's operations as gRPC methods on ln, with server
// reflection (grpcurl can list and call them).
func serveGRPC(name string, ln net.Listener, k *kernel.Kernel, logger *slog.Logger) (*server, error) {
	a, err := grpcadapter.New(k, grpcadapter.WithPackage(ProtoPackage), grpcadapter.WithLogger(logger))
	if err != nil {
		return nil, err
	}
	gs := grpc.NewServer(grpc.UnknownServiceHandler(a.UnknownServiceHandler))
	a.Register(gs)
	a.RegisterReflection(gs)
	done := make(chan error, 1)
	go func() { done <- gs.Serve(ln) }()
	return &server{name: name, addr: ln.Addr().String(), stop: func(ctx context.Context) error {
		stopped := make(chan struct{})
		go func() { gs.GracefulStop(); close(stopped) }()
		var err error
		select {
		case <-stopped:
		case <-ctx.Done():
			gs.Stop()
			<-stopped
			err = fmt.Errorf("chain: %s: calls still running at shutdown: %w", name, ctx.Err())
		}
		if serr := <-done; serr != nil && !errors.Is(serr, grpc.ErrServerStopped) {
			err = errors.Join(err, serr)
		}
		// A call answered at its deadline (or when its caller left) may
		// still be running its handler.
		return errors.Join(err, k.Wait(ctx))
	}}, nil
}
