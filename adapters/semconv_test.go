package adapters_test

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/sundial-go/sundial/adapters/grpcadapter"
	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

type (
	getOrder struct {
		ID string `json:"id"`
	}
	charge struct {
		Amount int `json:"amount"`
	}
)

// semconvRegistry: orders.create (201), orders.get (404 for "nope") and
// billing.charge (always UNAVAILABLE).
func semconvRegistry(t *testing.T) *operations.Registry {
	t.Helper()
	reg := operations.NewRegistry()
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(operations.Register(reg, operations.Descriptor{ID: "orders.create", Method: "POST", Path: "/orders"},
		func(context.Context, createOrder) (order, error) { return order{ID: "ord-1"}, nil }))
	must(operations.Register(reg, operations.Descriptor{ID: "orders.get", Method: "GET", Path: "/orders/:id"},
		func(_ context.Context, in getOrder) (order, error) {
			return order{}, pipeline.NewError(pipeline.KindNotFound, "TEST_NOT_FOUND_001", "No such order.")
		}))
	must(operations.Register(reg, operations.Descriptor{ID: "billing.charge", Method: "POST", Path: "/billing/charge"},
		func(context.Context, charge) (order, error) {
			return order{}, pipeline.NewError(pipeline.KindUnavailable, "TEST_UNAVAILABLE_001", "The bank is down.")
		}))
	return reg
}

// TestSemconvAttributes: the invocation spans recorded by an in-memory
// exporter carry the OpenTelemetry semantic conventions' HTTP server
// attributes (http.request.method — _OTHER with
// http.request.method_original for a method they do not know —, http.route, http.response.status_code,
// url.scheme, url.path, server.address, server.port,
// network.protocol.version, error.type for 5xx only) and RPC server
// attributes (rpc.system.name and rpc.method, rpc.response.status_code,
// error.type for server errors only, and the pre-1.39 rpc.system,
// rpc.service and rpc.grpc.status_code), beside the sundial.* ones; an
// unknown route has no http.route and an unknown gRPC method is _OTHER.
// The conventions' duration metrics (http.server.request.duration,
// rpc.server.call.duration) get one point per method, route and status.
func TestSemconvAttributes(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	k, err := kernel.New(kernel.WithRegistry(semconvRegistry(t)), kernel.WithTracerProvider(tp), kernel.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}

	// HTTP on 127.0.0.1.
	e := echo.New()
	if _, err := httpadapter.Mount(e, k); err != nil {
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
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	base := "http://" + hln.Addr().String()
	for _, c := range []struct {
		method, path, body string
		want               int
	}{
		{"POST", "/orders", `{"name":"widget"}`, 201},
		{"GET", "/orders/nope", "", 404},
		{"POST", "/billing/charge", `{"amount":1}`, 503},
		{"GET", "/nowhere", "", 404},
		{"PROPFIND", "/orders", "", 405},
	} {
		req, _ := http.NewRequest(c.method, base+c.path, strings.NewReader(c.body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Fatalf("%s %s = %d, want %d", c.method, c.path, resp.StatusCode, c.want)
		}
	}

	// gRPC on 127.0.0.1.
	ga, err := grpcadapter.New(k, grpcadapter.WithPackage("shop.v1"))
	if err != nil {
		t.Fatal(err)
	}
	gsrv := grpc.NewServer(grpc.UnknownServiceHandler(ga.UnknownServiceHandler))
	ga.Register(gsrv)
	gln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gdone := make(chan struct{})
	go func() { defer close(gdone); _ = gsrv.Serve(gln) }()
	defer func() { gsrv.Stop(); <-gdone }()
	cc, err := grpc.NewClient(gln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	full := map[string]string{}
	for _, m := range ga.Methods() {
		full[m.OperationID] = m.FullName
	}
	ctx := context.Background()
	var out order
	if err := ga.Call(ctx, cc, "orders.create", createOrder{Name: "widget"}, &out); err != nil {
		t.Fatalf("gRPC orders.create: %v", err)
	}
	if err := ga.Call(ctx, cc, "billing.charge", charge{Amount: 1}, &out); pipelinetest.KindOf(err) != pipeline.KindUnavailable {
		t.Fatalf("gRPC billing.charge = %v, want UNAVAILABLE", err)
	}
	if err := cc.Invoke(ctx, "/shop.v1.Nowhere/Go", &emptyMsg{}, &emptyMsg{}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("unknown method = %v, want Unimplemented", err)
	}

	spans := exp.GetSpans()
	find := func(name, proto string) map[string]string {
		t.Helper()
		for _, s := range spans {
			a := kvs(s.Attributes)
			if s.Name == name && a["sundial.protocol"] == proto {
				return a
			}
		}
		t.Fatalf("no %s span %q among %d", proto, name, len(spans))
		return nil
	}
	port := strconv.Itoa(hln.Addr().(*net.TCPAddr).Port)
	check := func(what string, got, want map[string]string, absent ...string) {
		t.Helper()
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: %s = %q, want %q", what, k, got[k], v)
			}
		}
		for _, k := range absent {
			if v, ok := got[k]; ok {
				t.Errorf("%s: %s = %q, want it absent", what, k, v)
			}
		}
	}
	check("HTTP orders.create", find("orders.create", "http"), map[string]string{
		"http.request.method": "POST", "http.route": "/orders", "http.response.status_code": "201",
		"url.scheme": "http", "url.path": "/orders", "server.address": "127.0.0.1", "server.port": port,
		"network.protocol.version": "1.1", "sundial.operation.id": "orders.create",
	}, "error.type")
	check("HTTP orders.get", find("orders.get", "http"), map[string]string{
		"http.request.method": "GET", "http.route": "/orders/:id", "http.response.status_code": "404", "url.path": "/orders/nope",
	}, "error.type")
	check("HTTP billing.charge", find("billing.charge", "http"), map[string]string{
		"http.response.status_code": "503", "error.type": "503", "sundial.outcome.code": "TEST_UNAVAILABLE_001",
	})
	check("HTTP unmatched", find("GET (unmatched)", "http"), map[string]string{
		"http.request.method": "GET", "http.response.status_code": "404", "url.path": "/nowhere",
	}, "http.route")
	check("HTTP unknown method", find("PROPFIND (unmatched)", "http"), map[string]string{
		"http.request.method": "_OTHER", "http.request.method_original": "PROPFIND", "http.response.status_code": "405",
	}, "http.route", "error.type")
	createFull := strings.TrimPrefix(full["orders.create"], "/")
	check("gRPC orders.create", find("orders.create", "grpc"), map[string]string{
		"rpc.system.name": "grpc", "rpc.method": createFull, "rpc.response.status_code": "OK",
		"rpc.system": "grpc", "rpc.service": createFull[:strings.LastIndex(createFull, "/")], "rpc.grpc.status_code": "0",
	}, "error.type")
	check("gRPC billing.charge", find("billing.charge", "grpc"), map[string]string{
		"rpc.response.status_code": "UNAVAILABLE", "rpc.grpc.status_code": "14", "error.type": "UNAVAILABLE",
	})
	check("gRPC unknown", find("(unknown)", "grpc"), map[string]string{
		"rpc.method": "_OTHER", "rpc.method_original": "shop.v1.Nowhere/Go", "rpc.response.status_code": "UNIMPLEMENTED",
		"error.type": "UNIMPLEMENTED",
	})

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	httpPts := histPoints(rm, "http.server.request.duration")
	for _, want := range []map[string]string{
		{"http.request.method": "POST", "http.route": "/orders", "http.response.status_code": "201", "url.scheme": "http"},
		{"http.request.method": "GET", "http.route": "/orders/:id", "http.response.status_code": "404"},
		{"http.route": "/billing/charge", "http.response.status_code": "503", "error.type": "503"},
	} {
		if !hasPoint(httpPts, want) {
			t.Errorf("http.server.request.duration has no point with %v; points %v", want, httpPts)
		}
	}
	rpcPts := histPoints(rm, "rpc.server.call.duration")
	if !hasPoint(rpcPts, map[string]string{"rpc.system.name": "grpc", "rpc.method": createFull, "rpc.response.status_code": "OK"}) ||
		!hasPoint(rpcPts, map[string]string{"rpc.response.status_code": "UNAVAILABLE", "error.type": "UNAVAILABLE"}) {
		t.Errorf("rpc.server.call.duration points %v, want orders.create OK and billing.charge UNAVAILABLE", rpcPts)
	}
	for _, p := range append(httpPts, rpcPts...) {
		if _, ok := p["url.path"]; ok {
			t.Errorf("duration point %v has url.path: unbounded cardinality", p)
		}
	}
}

// emptyMsg is an empty protobuf message for a raw call.
type emptyMsg = emptypb.Empty

func kvs(attrs []attribute.KeyValue) map[string]string {
	m := make(map[string]string, len(attrs))
	for _, a := range attrs {
		m[string(a.Key)] = a.Value.Emit()
	}
	return m
}

// histPoints returns the attribute sets of the points of the histogram
// name.
func histPoints(rm metricdata.ResourceMetrics, name string) []map[string]string {
	var out []map[string]string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == name {
				for _, p := range h.DataPoints {
					out = append(out, kvs(p.Attributes.ToSlice()))
				}
			}
		}
	}
	return out
}

func hasPoint(points []map[string]string, want map[string]string) bool {
	for _, p := range points {
		match := true
		for k, v := range want {
			if p[k] != v {
				match = false
			}
		}
		if match {
			return true
		}
	}
	return false
}
