package grpcadapter_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/sundial-go/sundial/adapters/grpcadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// Test operations.

type workIn struct {
	DelayMs int `json:"delayMs"`
}

type workOut struct {
	Rows int `json:"rows"`
}

type failIn struct {
	Kind    string `json:"kind"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Retry   int    `json:"retry"`
}

type labelsIn struct {
	Labels map[string]int `json:"labels"`
}

type tiny struct {
	N int8 `json:"n"`
}

// testApp records what its handlers saw.
type testApp struct {
	started chan struct{}  // work.run: one send per entry (buffered)
	ctxDone chan time.Time // work.run: when its context ended

	mu        sync.Mutex // guards the fields below
	deadlines []time.Time
	baggage   map[string]string
}

func newTestApp() *testApp {
	return &testApp{started: make(chan struct{}, 16), ctxDone: make(chan time.Time, 16)}
}

// slow works for DelayMs milliseconds or until its context ends.
func (ta *testApp) slow(ctx context.Context, in workIn) (workOut, error) {
	d, _ := ctx.Deadline()
	ta.mu.Lock()
	ta.deadlines = append(ta.deadlines, d)
	ta.mu.Unlock()
	ta.started <- struct{}{}
	timer := time.NewTimer(time.Duration(in.DelayMs) * time.Millisecond)
	defer timer.Stop()
	select {
	case <-timer.C:
		return workOut{Rows: in.DelayMs}, nil
	case <-ctx.Done():
		ta.ctxDone <- time.Now()
		return workOut{}, ctx.Err()
	}
}

func (ta *testApp) register(t testing.TB, reg *operations.Registry) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(operations.Register(reg, operations.Descriptor{ID: "work.run"}, ta.slow))
	must(operations.Register(reg, operations.Descriptor{ID: "work.capped"}, ta.slow))
	must(operations.Register(reg, operations.Descriptor{ID: "work.limited"}, func(ctx context.Context, in workIn) (workOut, error) {
		return workOut{Rows: 1}, nil
	}))
	must(operations.Register(reg, operations.Descriptor{ID: "work.fail"}, func(ctx context.Context, in failIn) (struct{}, error) {
		if in.Kind == "PANIC" {
			panic("secret: the database password is hunter2")
		}
		if in.Kind == "PLAIN" {
			return struct{}{}, fmt.Errorf("secret: connection to 10.0.0.7 refused")
		}
		k, ok := pipeline.ParseKind(in.Kind)
		if !ok {
			return struct{}{}, fmt.Errorf("bad kind %q", in.Kind)
		}
		e := pipeline.NewError(k, in.Code, in.Message).WithDetail("id", "work.fail")
		if in.Retry > 0 {
			e = e.WithDetail("retryAfter", in.Retry)
		}
		return struct{}{}, e
	}))
	must(operations.Register(reg, operations.Descriptor{ID: "work.tiny"}, func(ctx context.Context, in tiny) (tiny, error) {
		return in, nil
	}))
	must(operations.Register(reg, operations.Descriptor{ID: "work.labels"}, func(ctx context.Context, in labelsIn) (labelsIn, error) {
		return in, nil
	}))
	must(operations.Register(reg, operations.Descriptor{ID: "work.baggage"}, func(ctx context.Context, in struct{}) (struct{}, error) {
		return struct{}{}, nil
	}))
}

const testConfig = `{"Sundial":{"Kernel":{"MaxTimeoutSeconds":30,"Resilience":{"Operations":{
	"work.limited":{"PermitLimit":1,"WindowSeconds":60},
	"work.capped":{"TimeoutSeconds":0.2}
}}}}}`

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor polls the log until it contains every part or the time is up.
func (s *syncBuffer) waitFor(t *testing.T, parts ...string) string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		out := s.String()
		for _, line := range strings.Split(out, "\n") {
			ok := true
			for _, p := range parts {
				ok = ok && strings.Contains(line, p)
			}
			if ok && line != "" {
				return line
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log line contains all of %q; log:\n%s", parts, out)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// harness is one kernel served over bufconn.
type harness struct {
	app     *testApp
	k       *kernel.Kernel
	adapter *grpcadapter.Adapter
	server  *grpc.Server
	conn    *grpc.ClientConn
	log     *syncBuffer
}

type harnessOpt struct {
	register func(testing.TB, *operations.Registry)
	adapter  []grpcadapter.Option
	kernel   []kernel.Option
	server   []grpc.ServerOption
	// services registers the application's own services.
	services func(*grpc.Server)
}

func newHarness(t testing.TB, ho harnessOpt) *harness {
	t.Helper()
	h := &harness{app: newTestApp(), log: &syncBuffer{}}
	reg := operations.NewRegistry()
	h.app.register(t, reg)
	if ho.register != nil {
		ho.register(t, reg)
	}
	logger := slog.New(slog.NewTextHandler(h.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	kopts := append([]kernel.Option{
		kernel.WithRegistry(reg), kernel.WithConfigJSON([]byte(testConfig)),
	}, ho.kernel...)
	k, err := kernel.New(kopts...)
	if err != nil {
		t.Fatal(err)
	}
	h.k = k
	aopts := append([]grpcadapter.Option{grpcadapter.WithPackage("test.v1"), grpcadapter.WithLogger(logger)}, ho.adapter...)
	h.adapter, err = grpcadapter.New(k, aopts...)
	if err != nil {
		t.Fatal(err)
	}
	sopts := append([]grpc.ServerOption{
		grpc.ChainUnaryInterceptor(h.adapter.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(h.adapter.StreamServerInterceptor()),
	}, ho.server...)
	h.server = grpc.NewServer(sopts...)
	h.adapter.Register(h.server)
	h.adapter.RegisterReflection(h.server)
	if ho.services != nil {
		ho.services(h.server)
	}
	lis := bufconn.Listen(1 << 20)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = h.server.Serve(lis)
	}()
	h.conn, err = grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.conn.Close()
		h.server.Stop()
		<-served
	})
	return h
}

// method returns the descriptor of the adapter's method full.
func (h *harness) method(t testing.TB, full string) grpcadapter.Method {
	t.Helper()
	for _, m := range h.adapter.Methods() {
		if m.FullName == full {
			return m
		}
	}
	t.Fatalf("the adapter serves no method %s", full)
	return grpcadapter.Method{}
}

// call invokes full with a request given as protobuf JSON and returns the
// response as protobuf JSON and the status.
func (h *harness) call(ctx context.Context, t *testing.T, full, reqJSON string, opts ...grpc.CallOption) (string, *status.Status) {
	t.Helper()
	m := h.method(t, full)
	req := dynamicpb.NewMessage(m.Input)
	if err := protojson.Unmarshal([]byte(reqJSON), req); err != nil {
		t.Fatalf("protojson.Unmarshal(%s) = %v", reqJSON, err)
	}
	resp := dynamicpb.NewMessage(m.Output)
	err := h.conn.Invoke(ctx, full, req, resp, opts...)
	if err != nil {
		return "", status.Convert(err)
	}
	return compactJSON(t, protojson.Format(resp)), nil
}

// compactJSON normalizes protojson's output (whose spacing is deliberately
// unstable) to encoding/json's compact form with sorted keys.
func compactJSON(t *testing.T, s string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("json.Unmarshal(%s) = %v", s, err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// newMessage returns an empty dynamic message of d.
func newMessage(d protoreflect.MessageDescriptor) *dynamicpb.Message { return dynamicpb.NewMessage(d) }
