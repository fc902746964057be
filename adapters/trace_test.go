package adapters_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/baggage"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sundial-go/sundial/adapters/grpcadapter"
	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/kernel/propagation"
	"github.com/sundial-go/sundial/operations"
)

type (
	createOrder struct {
		Name string `json:"name"`
	}
	order struct {
		ID string `json:"id"`
	}
	reserve struct {
		SKU string `json:"sku"`
	}
	reserved struct {
		OK bool `json:"ok"`
	}
)

// service is one process of the test: its own kernel and its own tracer
// provider, recording in memory.
type service struct {
	spans *tracetest.SpanRecorder
	k     *kernel.Kernel
}

func newService(t *testing.T, reg *operations.Registry) *service {
	t.Helper()
	s := &service{spans: tracetest.NewSpanRecorder()}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(s.spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	k, err := kernel.New(kernel.WithRegistry(reg), kernel.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	s.k = k
	return s
}

// span returns the recorded span called name.
func (s *service) span(t *testing.T, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	for _, sp := range s.spans.Ended() {
		if sp.Name() == name {
			return sp
		}
	}
	t.Fatalf("no span %q recorded", name)
	return nil
}

func inventoryRegistry(t *testing.T, fn func(context.Context, reserve) (reserved, error)) *operations.Registry {
	t.Helper()
	reg := operations.NewRegistry()
	if err := operations.Register(reg, operations.Descriptor{ID: "inventory.reserve"}, fn); err != nil {
		t.Fatal(err)
	}
	return reg
}

// TestTraceCrossesHTTPAndGRPC: a client calls service A over HTTP (the
// httpadapter Transport injects traceparent and baggage), A's handler
// calls service B over gRPC (the grpcadapter client interceptor injects
// them into the metadata). One trace runs through all three: A's span is
// the child of the client's span, B's the child of A's, and the
// idempotency key sent as baggage by the client reaches B's handler.
func TestTraceCrossesHTTPAndGRPC(t *testing.T) {
	// Service B: gRPC on 127.0.0.1.
	var bSaw trace.SpanContext
	var bKey string
	b := newService(t, inventoryRegistry(t, func(ctx context.Context, in reserve) (reserved, error) {
		bSaw = trace.SpanContextFromContext(ctx)
		bKey = propagation.IdempotencyKey(ctx)
		return reserved{OK: in.SKU != ""}, nil
	}))
	bAdapter, err := grpcadapter.New(b.k, grpcadapter.WithPackage("inventory.v1"))
	if err != nil {
		t.Fatal(err)
	}
	gsrv := grpc.NewServer()
	bAdapter.Register(gsrv)
	gln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gdone := make(chan struct{})
	go func() { defer close(gdone); _ = gsrv.Serve(gln) }()
	defer func() { gsrv.Stop(); <-gdone }()

	// Service A's client of B: an adapter over B's operations (their
	// handlers never run here) and a connection with the interceptor.
	clientK, err := kernel.New(kernel.WithRegistry(inventoryRegistry(t, func(context.Context, reserve) (reserved, error) {
		panic("a client-side handler must not run")
	})), kernel.WithTelemetry(false))
	if err != nil {
		t.Fatal(err)
	}
	toB, err := grpcadapter.New(clientK, grpcadapter.WithPackage("inventory.v1"))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(gln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(grpcadapter.UnaryClientInterceptor(0)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()

	// Service A: HTTP on 127.0.0.1; orders.create reserves stock in B.
	regA := operations.NewRegistry()
	if err := operations.Register(regA, operations.Descriptor{ID: "orders.create", Method: "POST", Path: "/orders"},
		func(ctx context.Context, in createOrder) (order, error) {
			var r reserved
			if err := toB.Call(ctx, cc, "inventory.reserve", reserve{SKU: in.Name}, &r); err != nil {
				return order{}, err
			}
			return order{ID: "ord-1"}, nil
		}); err != nil {
		t.Fatal(err)
	}
	a := newService(t, regA)
	e := echo.New()
	if _, err := httpadapter.Mount(e, a.k); err != nil {
		t.Fatal(err)
	}
	hln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hsrv := &http.Server{Handler: e}
	hdone := make(chan struct{})
	go func() { defer close(hdone); _ = hsrv.Serve(hln) }()
	defer func() { hsrv.Close(); <-hdone }()

	// The client: its own span and baggage, the httpadapter Transport.
	clientSpans := tracetest.NewSpanRecorder()
	ctp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(clientSpans))
	defer ctp.Shutdown(context.Background())
	ctx, span := ctp.Tracer("client").Start(context.Background(), "client")
	bag, _ := baggage.Parse("sundial.idempotency-key=order-7f3a")
	ctx = baggage.ContextWithBaggage(ctx, bag)
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+hln.Addr().String()+"/orders", strings.NewReader(`{"name":"widget"}`))
	req.Header.Set("Content-Type", "application/json")
	client := &http.Client{Transport: httpadapter.NewTransport(&http.Transport{})}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	span.End()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /orders = %d, want 201", resp.StatusCode)
	}

	root := span.SpanContext()
	aRec, bRec := a.span(t, "orders.create"), b.span(t, "inventory.reserve")
	aSpan, bSpan := aRec.SpanContext(), bRec.SpanContext()
	for name, sc := range map[string]trace.SpanContext{"A's orders.create": aSpan, "B's inventory.reserve": bSpan, "B's handler context": bSaw} {
		if sc.TraceID() != root.TraceID() {
			t.Errorf("%s trace ID = %s, want the client's %s", name, sc.TraceID(), root.TraceID())
		}
	}
	if p := aRec.Parent(); p.SpanID() != root.SpanID() || !p.IsRemote() {
		t.Errorf("A's span parent = %s (remote %v), want the client's span %s over HTTP", p.SpanID(), p.IsRemote(), root.SpanID())
	}
	if p := bRec.Parent(); p.SpanID() != aSpan.SpanID() || !p.IsRemote() {
		t.Errorf("B's span parent = %s (remote %v), want A's span %s over gRPC", p.SpanID(), p.IsRemote(), aSpan.SpanID())
	}
	if bSaw.SpanID() != bSpan.SpanID() {
		t.Errorf("B's handler context carries span %s, want B's invocation span %s", bSaw.SpanID(), bSpan.SpanID())
	}
	if bKey != "order-7f3a" {
		t.Errorf("B's handler read idempotency key %q, want the client's order-7f3a (baggage across both hops)", bKey)
	}
}
