package adapters_test

import (
	"net"
	"net/http"
	"testing"

	"github.com/labstack/echo/v4"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sundial-go/sundial/adapters/connectadapter"
	"github.com/sundial-go/sundial/adapters/grpcadapter"
	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/kernel"
)

// serveHTTP serves k's operations over HTTP on 127.0.0.1 until the test
// ends, and returns the base URL.
func serveHTTP(t testing.TB, k *kernel.Kernel) string {
	t.Helper()
	e := echo.New()
	if _, err := httpadapter.Mount(e, k); err != nil {
		t.Fatal(err)
	}
	return serveHandler(t, e)
}

// serveConnect serves k's operations over Connect (package shop.v1) on
// 127.0.0.1 until the test ends, and returns the base URL.
func serveConnect(t testing.TB, k *kernel.Kernel) string {
	t.Helper()
	e := echo.New()
	if err := connectadapter.Mount(e, k, connectadapter.WithPackage("shop.v1")); err != nil {
		t.Fatal(err)
	}
	return serveHandler(t, e)
}

// serveHandler serves h on 127.0.0.1 until the test ends, and returns the
// base URL.
func serveHandler(t testing.TB, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-done })
	return "http://" + ln.Addr().String()
}

// serveGRPC serves k's operations over gRPC (package shop.v1, with
// reflection) on
// 127.0.0.1 until the test ends, and returns the adapter and a client
// connection to it made with opts.
func serveGRPC(t testing.TB, k *kernel.Kernel, opts ...grpc.DialOption) (*grpcadapter.Adapter, *grpc.ClientConn) {
	t.Helper()
	ga, err := grpcadapter.New(k, grpcadapter.WithPackage("shop.v1"))
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnknownServiceHandler(ga.UnknownServiceHandler))
	ga.Register(srv)
	ga.RegisterReflection(srv)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	cc, err := grpc.NewClient(ln.Addr().String(), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close(); srv.Stop(); <-done })
	return ga, cc
}
