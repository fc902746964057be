package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sundial-go/sundial/adapters/grpcadapter"
	"github.com/sundial-go/sundial/kernel"
)

// grpcPackage is the proto package of the shop's services:
// orders.create is /shop.v1.Orders/Create.
const grpcPackage = "shop.v1"

// startGRPC starts serving k over gRPC on addr — every operation as a
// method of shop.v1.<Group>, server reflection (grpcurl can list and call
// them) and the standard health service — and returns a function that
// stops it gracefully within its context's deadline.
//
// Draining starts as soon as ctx ends (the shutdown signal), alongside the
// HTTP server's: health turns NOT_SERVING, new calls are refused, and
// in-flight calls run on. stop waits for them until its own context ends,
// then cancels what is left (those handlers see their context canceled)
// and reports that the grace period ran out.
func startGRPC(ctx context.Context, k *kernel.Kernel, addr string, logger *slog.Logger, stdout io.Writer) (stop func(context.Context) error, err error) {
	a, err := grpcadapter.New(k, grpcadapter.WithPackage(grpcPackage), grpcadapter.WithLogger(logger))
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer(append(grpcadapter.ServerOptions(), // the recommended listener bounds (docs/grpc.md)
		// The shop has no services of its own; the interceptors would run
		// them through the kernel like the operations.
		grpc.ChainUnaryInterceptor(a.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(a.StreamServerInterceptor()),
		// Calls to unknown methods are answered through the kernel too:
		// observed like every other answer.
		grpc.UnknownServiceHandler(a.UnknownServiceHandler),
	)...)
	a.Register(srv)
	a.RegisterReflection(srv)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	for _, name := range a.ServiceNames() {
		hs.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
	}

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "shop: serving gRPC on %s\n", ln.Addr())

	drained := make(chan struct{})
	var once sync.Once
	drain := func() {
		once.Do(func() {
			go func() {
				hs.Shutdown()
				srv.GracefulStop()
				close(drained)
			}()
		})
	}
	stopAfter := context.AfterFunc(ctx, drain)
	return func(sctx context.Context) error {
		stopAfter()
		drain()
		var err error
		select {
		case <-drained:
		case <-sctx.Done():
			srv.Stop()
			<-drained
			err = fmt.Errorf("grace period over: in-flight calls were canceled: %w", sctx.Err())
		}
		if serr := <-served; serr != nil && !errors.Is(serr, grpc.ErrServerStopped) {
			err = errors.Join(err, serr)
		}
		return err
	}, nil
}
