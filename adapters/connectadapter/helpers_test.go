package connectadapter_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/baggage"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/sundial-go/sundial/adapters/connectadapter"
	"github.com/sundial-go/sundial/adapters/grpcadapter"
	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/kernel/propagation"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

// Test operations.

type workIn struct {
	DelayMs int `json:"delayMs"`
}

type workOut struct {
	Rows     int    `json:"rows"`
	Deadline string `json:"deadline"` // the handler's context deadline, RFC 3339
	Baggage  string `json:"baggage"`  // the invocation's baggage member "tenant"
	Priority string `json:"priority"` // the baggage's sundial.priority
	Key      string `json:"key"`      // the idempotency key

}

type failIn struct {
	Kind  string `json:"kind"`
	Retry int    `json:"retry"`
}

type itemIn struct {
	ID string `json:"id" param:"id"`
}

type item struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

type signupIn struct {
	Email string `json:"email" validate:"required,email"`
	Age   int    `json:"age" validate:"gte=18"`
}

// work sleeps DelayMs milliseconds, or until its context ends, and tells
// what it saw.
func work(ctx context.Context, in workIn) (workOut, error) {
	bag := baggage.FromContext(ctx)
	out := workOut{Rows: in.DelayMs, Priority: bag.Member(propagation.BaggagePriority).Value(),
		Baggage: bag.Member("tenant").Value(), Key: propagation.IdempotencyKey(ctx)}
	if d, ok := ctx.Deadline(); ok {
		out.Deadline = d.UTC().Format(time.RFC3339Nano)
	}
	t := time.NewTimer(time.Duration(in.DelayMs) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return out, nil
	case <-ctx.Done():
		return workOut{}, ctx.Err()
	}
}

func register(t testing.TB, reg *operations.Registry) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(operations.Register(reg, operations.Descriptor{ID: "work.run", Method: "POST", Path: "/work"}, work))
	must(operations.Register(reg, operations.Descriptor{ID: "work.capped"}, work))
	must(operations.Register(reg, operations.Descriptor{ID: "work.limited"}, work))
	must(operations.Register(reg, operations.Descriptor{ID: "work.keyed"}, work))
	must(operations.Register(reg, operations.Descriptor{ID: "work.fail"}, func(ctx context.Context, in failIn) (struct{}, error) {
		if in.Kind == "PLAIN" {
			return struct{}{}, errors.New("secret: connection to 10.0.0.7 refused")
		}
		e := pipeline.NewError(pipeline.KindUnavailable, "APP_UNAVAILABLE_001", "The ledger is down.")
		if in.Retry > 0 {
			e = e.WithRetryAfter(time.Duration(in.Retry) * time.Second)
		}
		return struct{}{}, e
	}))
	must(operations.Register(reg, operations.Descriptor{ID: "items.get", Method: "GET", Path: "/items/:id"},
		func(ctx context.Context, in itemIn) (item, error) {
			return item{ID: in.ID, Name: "item " + in.ID}, nil
		}))
	must(operations.Register(reg, operations.Descriptor{ID: "users.signup"}, func(ctx context.Context, in signupIn) (struct{}, error) {
		return struct{}{}, nil
	}))
}

const testConfig = `{"Sundial":{"Kernel":{"MaxTimeoutSeconds":30,"Resilience":{"Operations":{
	"work.limited":{"PermitLimit":1,"WindowSeconds":60,"RateLimitHeaders":true},
	"work.capped":{"TimeoutSeconds":0.2},
	"work.keyed":{"Idempotency":{}}
}}}}}`

// server is a kernel served on one 127.0.0.1 port: REST (httpadapter) and
// Connect, gRPC and gRPC-Web (connectadapter), over HTTP/1.1 and h2c.
type server struct {
	k    *kernel.Kernel
	g    *grpcadapter.Adapter
	url  string
	logs *pipelinetest.LogSink
	// handler serves every route: REST, Connect, gRPC and gRPC-Web.
	handler http.Handler
	// protocol is the protocol of the last call of work.keyed.
	protocol atomic.Value
}

// newServer starts a server with the adapter options opts.
func newServer(t testing.TB, opts ...connectadapter.Option) *server {
	t.Helper()
	return startServer(t, register, testConfig, opts...)
}

// startServer starts a server of the operations reg registers, with the
// kernel's configuration config and the adapter options opts.
func startServer(t testing.TB, reg func(testing.TB, *operations.Registry), config string, opts ...connectadapter.Option) *server {
	t.Helper()
	s := &server{logs: new(pipelinetest.LogSink)}
	r := operations.NewRegistry()
	reg(t, r)
	k, err := kernel.New(kernel.WithRegistry(r), kernel.WithConfigJSON([]byte(config)),
		kernel.WithLogger(s.logs.Logger()),
		kernel.WithIdempotencyScope(func(_ context.Context, inv *pipeline.Invocation) string {
			s.protocol.Store(inv.Protocol().String())
			return ""
		}))
	if err != nil {
		t.Fatal(err)
	}
	s.k = k
	s.g, err = grpcadapter.New(k, grpcadapter.WithPackage("test.v1"), grpcadapter.WithLogger(s.logs.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	if _, err := httpadapter.Mount(e, k, httpadapter.WithLogger(s.logs.Logger())); err != nil {
		t.Fatal(err)
	}
	opts = append([]connectadapter.Option{connectadapter.WithPackage("test.v1"),
		connectadapter.WithLogger(s.logs.Logger())}, opts...)
	if err := connectadapter.Mount(e, k, opts...); err != nil {
		t.Fatal(err)
	}
	s.handler = e
	s.url = serve(t, e, k)
	return s
}

// serve serves h on a 127.0.0.1 listener over HTTP/1.1 and h2c until the
// test ends, then waits for the kernel's stragglers.
func serve(t testing.TB, h http.Handler, k *kernel.Kernel) string {
	t.Helper()
	return serveWith(t, &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}, k)
}

// serveWith is serve with the server hs.
func serveWith(t testing.TB, hs *http.Server, k *kernel.Kernel) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	hs.Protocols = p
	var wg sync.WaitGroup
	wg.Go(func() { _ = hs.Serve(ln) })
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
		wg.Wait()
		if k != nil {
			if err := k.Wait(ctx); err != nil {
				t.Error(err)
			}
		}
	})
	return "http://" + ln.Addr().String()
}

// httpClient returns a client over HTTP/1.1 or, with h2c, over HTTP/2
// without TLS. Its idle connections are closed when the test ends.
func httpClient(t testing.TB, h2c bool) *http.Client {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: &tls.Config{}, DisableCompression: true}
	p := new(http.Protocols)
	if h2c {
		p.SetUnencryptedHTTP2(true)
	} else {
		p.SetHTTP1(true)
	}
	tr.Protocols = p
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// method returns the descriptor of the gRPC adapter's method full.
func (s *server) method(t testing.TB, full string) protoreflect.MethodDescriptor {
	t.Helper()
	for _, m := range s.g.Methods() {
		if m.FullName == full {
			return m.Input.ParentFile().Services().ByName(serviceName(full)).Methods().ByName(methodName(full))
		}
	}
	t.Fatalf("no method %s", full)
	return nil
}

func serviceName(full string) protoreflect.Name {
	svc, _, _ := cut(full)
	return protoreflect.FullName(svc).Name()
}

func methodName(full string) protoreflect.Name {
	_, m, _ := cut(full)
	return protoreflect.Name(m)
}

func cut(full string) (string, string, bool) {
	for i := len(full) - 1; i > 0; i-- {
		if full[i] == '/' {
			return full[1:i], full[i+1:], true
		}
	}
	return "", "", false
}

// client returns a connect-go client of the procedure full with dynamic
// messages, over hc, with the client options opts (the protocol, codec and
// compression).
func (s *server) client(t testing.TB, hc *http.Client, full string, opts ...connect.ClientOption) *connect.Client[dynamicpb.Message, dynamicpb.Message] {
	t.Helper()
	md := s.method(t, full)
	init := func(_ connect.Spec, x any) error {
		if m, ok := x.(*dynamicpb.Message); ok {
			*m = *dynamicpb.NewMessage(md.Output())
		}
		return nil
	}
	opts = append([]connect.ClientOption{connect.WithSchema(md), connect.WithResponseInitializer(init)}, opts...)
	return connect.NewClient[dynamicpb.Message, dynamicpb.Message](hc, s.url+full, opts...)
}

// request returns a request of full with the message given as protobuf JSON.
func (s *server) request(t testing.TB, full, js string) *connect.Request[dynamicpb.Message] {
	t.Helper()
	m := dynamicpb.NewMessage(s.method(t, full).Input())
	if err := protojson.Unmarshal([]byte(js), m); err != nil {
		t.Fatalf("protojson.Unmarshal(%s): %v", js, err)
	}
	return connect.NewRequest(m)
}

// field returns the string form of the field name of m.
func field(m *dynamicpb.Message, name string) string {
	fd := m.Descriptor().Fields().ByJSONName(name)
	if fd == nil {
		return fmt.Sprintf("<no field %s>", name)
	}
	return m.Get(fd).String()
}

// waitLog waits for a record whose message is msg and whose attributes
// include every "key=value" of want, and returns it.
func waitLog(t testing.TB, s *server, msg string, want ...string) pipelinetest.Record {
	t.Helper()
	r, ok := s.logs.WaitFor(5*time.Second, func(r pipelinetest.Record) bool {
		if r.Message != msg {
			return false
		}
		for _, w := range want {
			k, v, _ := strings.Cut(w, "=")
			if fmt.Sprint(r.Attrs[k]) != v {
				return false
			}
		}
		return true
	})
	if !ok {
		t.Fatalf("no %q record with %v in %v", msg, want, s.logs.Records())
	}
	return r
}
