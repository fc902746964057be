package grpcadapter_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
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
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
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
		k, ok := pipelinetest.ParseKind(in.Kind)
		if !ok {
			return struct{}{}, fmt.Errorf("bad kind %q", in.Kind)
		}
		e := pipeline.NewError(k, in.Code, in.Message).WithDetail("id", "work.fail")
		if in.Retry > 0 {
			e = e.WithRetryAfter(time.Duration(in.Retry) * time.Second)
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

// matches reports whether r has every attribute of want, each written
// "key=value" (the value printed with fmt.Sprint; "level=ERROR" matches
// the record's level) or "key~text" (the value contains text).
func matches(r pipelinetest.Record, want ...string) bool {
	for _, w := range want {
		i := strings.IndexAny(w, "=~")
		if i < 0 {
			panic("matches: " + w + " is neither key=value nor key~text")
		}
		key, val := w[:i], w[i+1:]
		got, ok := r.Attrs[key]
		s := fmt.Sprint(got)
		if key == "level" {
			ok, s = true, r.Level.String()
		}
		switch {
		case !ok:
			return false
		case w[i] == '=' && s != val:
			return false
		case w[i] == '~' && !strings.Contains(s, val):
			return false
		}
	}
	return true
}

// waitLog waits for a record whose message is msg and whose attributes
// match want (see matches), and returns it.
func (h *harness) waitLog(t testing.TB, msg string, want ...string) pipelinetest.Record {
	t.Helper()
	r, ok := h.logs.WaitFor(5*time.Second, func(r pipelinetest.Record) bool {
		return r.Message == msg && matches(r, want...)
	})
	if !ok {
		var b strings.Builder
		for _, r := range h.logs.Records() {
			fmt.Fprintf(&b, "%s %s %v\n", r.Level, r.Message, r.Attrs)
		}
		t.Fatalf("no %q record has %q; log:\n%s", msg, want, b.String())
	}
	return r
}

// findLog returns the records logged so far whose message is msg and
// whose attributes match want.
func (h *harness) findLog(msg string, want ...string) []pipelinetest.Record {
	return h.logs.Find(func(r pipelinetest.Record) bool { return r.Message == msg && matches(r, want...) })
}

// inBubble runs f in a synctest bubble. A bufconn harness made inside it
// takes no time on the network, so a test reads exact times. Its last
// cleanup waits out the adapter's idle receivers, which exit on a timer.
func inBubble(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		t.Cleanup(func() { time.Sleep(time.Second) })
		f(t)
	})
}

// harness is one kernel served over bufconn.
type harness struct {
	app     *testApp
	k       *kernel.Kernel
	adapter *grpcadapter.Adapter
	server  *grpc.Server
	conn    *grpc.ClientConn
	logs    *pipelinetest.LogSink // the adapter's and the kernel's logs
	addr    string                // the TCP listener's address (harnessOpt.tcp)
}

type harnessOpt struct {
	register func(testing.TB, *operations.Registry)
	adapter  []grpcadapter.Option
	kernel   []kernel.Option
	server   []grpc.ServerOption
	// services registers the application's own services.
	services func(*grpc.Server)
	// tcp serves on a 127.0.0.1 listener instead of bufconn.
	tcp bool
	// logs, if set, is the log sink (the test's server options may log
	// to it too).
	logs *pipelinetest.LogSink
	// defaultLogger leaves the kernel and the adapter their default
	// logger (slog.Default, from Warn).
	defaultLogger bool
}

func newHarness(t testing.TB, ho harnessOpt) *harness {
	t.Helper()
	h := &harness{app: newTestApp(), logs: ho.logs}
	if h.logs == nil {
		h.logs = new(pipelinetest.LogSink)
	}
	reg := operations.NewRegistry()
	h.app.register(t, reg)
	if ho.register != nil {
		ho.register(t, reg)
	}
	var logger *slog.Logger // nil: the default
	if !ho.defaultLogger {
		logger = h.logs.Logger()
	}
	kopts := append([]kernel.Option{
		kernel.WithRegistry(reg), kernel.WithConfigJSON([]byte(testConfig)), kernel.WithLogger(logger),
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
	var lis net.Listener
	target := "passthrough:///bufnet"
	dial := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if ho.tcp {
		if lis, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		target = lis.Addr().String()
		h.addr = target
	} else {
		bl := bufconn.Listen(1 << 20)
		lis = bl
		dial = append(dial, grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return bl.DialContext(ctx) }))
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = h.server.Serve(lis)
	}()
	h.conn, err = grpc.NewClient(target, dial...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.conn.Close()
		h.server.Stop()
		<-served
		// Handlers the kernel answered for at their deadline may still
		// run: wait for them (goleak checks).
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := k.Wait(ctx); err != nil {
			t.Error(err)
		}
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
