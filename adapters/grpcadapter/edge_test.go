package grpcadapter_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/sundial-go/sundial/adapters/grpcadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

// stuckTimeout is the TimeoutSeconds of work.stuck (stuckConfig) and of
// work.capped (testConfig), under which handlers that ignore their
// context run.
const stuckTimeout = 200 * time.Millisecond

// settleWindow is how long the kernel waits, past the deadline, for a
// handler that ignores its context before it answers for it.
const settleWindow = 5 * time.Millisecond

// stuckConfig is the kernel's configuration that gives work.stuck the
// TimeoutSeconds stuckTimeout.
var stuckConfig = stuckConfigOf(stuckTimeout)

// stuckConfigOf is the kernel's configuration that gives work.stuck the
// TimeoutSeconds d.
func stuckConfigOf(d time.Duration) string {
	return fmt.Sprintf(`{"Sundial":{"Kernel":{"Resilience":{"Operations":{"work.stuck":{"TimeoutSeconds":%g}}}}}}`, d.Seconds())
}

// lateResult is the message of the kernel's record of a straggler's late
// result.
const lateResult = "kernel: late result discarded"

// withSpans returns a kernel option that installs an SDK tracer recording
// into the returned recorder.
func withSpans() (kernel.Option, *tracetest.SpanRecorder) {
	spans := tracetest.NewSpanRecorder()
	return kernel.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))), spans
}

// TestContextIgnoringHandlerAnsweredAtDeadline checks that a handler that
// ignores its context, under TimeoutSeconds, is answered DeadlineExceeded
// at the deadline — over the adapter's own method and through the
// interceptor, for a client with a later deadline of its own and for one
// without — and that the kernel logs its late result once, when it
// returns, with the trace ID of the answer.
func TestContextIgnoringHandlerAnsweredAtDeadline(t *testing.T) {
	t.Parallel()
	paths := []struct{ name, method, op string }{
		{"operation", "/test.v1.Work/Stuck", "work.stuck"},
		{"interceptor", "/acme.v1.Work/Stuck", "work.capped"},
	}
	for _, path := range paths {
		for _, clientDeadline := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/client deadline %v", path.name, clientDeadline), func(t *testing.T) {
				t.Parallel()
				inBubble(t, func(t *testing.T) {
					release := make(chan struct{})
					started := make(chan struct{}, 1)
					tracing, spans := withSpans()
					h, svc := newAcmeHarnessOpt(t, harnessOpt{
						register: func(t testing.TB, reg *operations.Registry) {
							stuck := func(context.Context, workIn) (workOut, error) {
								started <- struct{}{}
								<-release
								return workOut{Rows: 1}, nil
							}
							if err := operations.Register(reg, operations.Descriptor{ID: "work.stuck"}, stuck); err != nil {
								t.Fatal(err)
							}
						},
						kernel: []kernel.Option{kernel.WithConfigJSON([]byte(stuckConfig)), tracing},
					})
					var once sync.Once
					unblock := func() {
						once.Do(func() {
							close(release)
							svc.unblock()
						})
					}
					t.Cleanup(unblock) // before the harness waits for the handlers

					// Connect first: the answer's time is the server's.
					if _, st := h.call(t.Context(), t, "/test.v1.Work/Run", `{}`); st != nil {
						t.Fatalf("Run = %v, want OK", st)
					}
					ctx := t.Context()
					if clientDeadline {
						var cancel context.CancelFunc
						ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
						defer cancel()
					}
					start := time.Now()
					var err error
					if path.name == "operation" {
						_, st := h.call(ctx, t, path.method, `{}`)
						err = st.Err()
					} else {
						_, err = invokeAcme(ctx, h, "Stuck")
					}
					took := time.Since(start)

					st := status.Convert(err)
					if st.Code() != codes.DeadlineExceeded || errorInfo(t, st).GetReason() != pipeline.CodeTimeout {
						t.Fatalf("%s = %v, want DeadlineExceeded KERNEL_TIMEOUT_001", path.method, st)
					}
					// In the bubble the network takes no time: the answer
					// leaves at the deadline plus the kernel's settle window.
					if took != stuckTimeout+settleWindow {
						t.Errorf("%s answered after %v, want at the deadline (%v) plus the settle window (%v)",
							path.method, took, stuckTimeout, settleWindow)
					}
					select {
					case <-started:
					case <-svc.started:
					default:
						t.Fatal("the handler never ran")
					}
					call := h.waitLog(t, "grpc call", "method="+path.method, "operation="+path.op,
						"grpcCode=DeadlineExceeded", "code="+pipeline.CodeTimeout)
					traceID, _ := call.Attrs["traceId"].(string)
					if traceID == "" {
						t.Errorf("the call log has no trace ID: %v", call.Attrs)
					}
					if late := h.findLog(lateResult); len(late) != 0 {
						t.Errorf("a late result was logged while the handler still runs: %v", late)
					}

					unblock()
					h.waitLateOnce(t, "operation="+path.op, "protocol=grpc", "code="+pipeline.CodeTimeout, "traceId="+traceID)
					if calls := h.findLog("grpc call", "method="+path.method); len(calls) != 1 {
						t.Errorf("the call was logged %d times, want once: %v", len(calls), calls)
					}
					n := 0
					for _, s := range spans.Ended() {
						if s.SpanContext().TraceID().String() == traceID {
							n++
						}
					}
					if n != 1 {
						t.Errorf("%d spans ended with the call's trace ID, want 1", n)
					}
				})
			})
		}
	}
}

// TestTypedNilErrors checks that typed nils returned as errors — a nil
// *pipeline.Error and a nil foreign error whose Error method reads its
// receiver — are answered UNEXPECTED, with the call log on, by the
// adapter's methods and through the interceptor, and that the server lives
// on.
func TestTypedNilErrors(t *testing.T) {
	t.Parallel()
	h, _ := newAcmeHarnessWith(t, func(t testing.TB, reg *operations.Registry) {
		nilOurs := func(context.Context, struct{}) (struct{}, error) {
			var e *pipeline.Error
			return struct{}{}, e
		}
		nilForeign := func(context.Context, struct{}) (struct{}, error) {
			var e *fragileError
			return struct{}{}, e
		}
		if err := operations.Register(reg, operations.Descriptor{ID: "nil.ours"}, nilOurs); err != nil {
			t.Fatal(err)
		}
		if err := operations.Register(reg, operations.Descriptor{ID: "nil.foreign"}, nilForeign); err != nil {
			t.Fatal(err)
		}
	})
	for _, method := range []string{"/test.v1.Nil/Ours", "/test.v1.Nil/Foreign", "/acme.v1.Work/NilOurs", "/acme.v1.Work/NilForeign"} {
		t.Run(method, func(t *testing.T) {
			var err error
			if strings.HasPrefix(method, "/acme.") {
				_, err = invokeAcme(t.Context(), h, strings.TrimPrefix(method, "/acme.v1.Work/"))
			} else {
				_, st := h.call(t.Context(), t, method, `{}`)
				err = st.Err()
			}
			st := status.Convert(err)
			if st.Code() != codes.Internal || st.Message() != pipeline.UnexpectedMessage || errorInfo(t, st).GetReason() != pipeline.CodeUnexpected {
				t.Fatalf("%s = %v, want Internal %q KERNEL_UNEXPECTED_001", method, st, pipeline.UnexpectedMessage)
			}
			rec := h.waitLog(t, "grpc call", "method="+method, "level=ERROR", "code="+pipeline.CodeUnexpected, "error~nil")
			if n := len(h.findLog("grpc call", "method="+method)); n != 1 {
				t.Errorf("%s was logged %d times, want once", method, n)
			}
			if strings.Contains(fmt.Sprint(rec.Attrs["error"]), "fragile:") {
				t.Errorf("the log called the typed nil's Error method: %v", rec.Attrs["error"])
			}
		})
	}
	if out, st := h.call(t.Context(), t, "/test.v1.Work/Run", `{"delayMs": 1}`); st != nil || out != `{"rows":"1"}` {
		t.Errorf("Run after the typed nils = %s %v, want OK", out, st)
	}
}

// TestRetryInfoRoundTrip checks that a retry-after survives the wire: an
// outcome's retry-after becomes a RetryInfo (whole seconds, rounded up),
// which FromStatus — and so Adapter.Call and the client interceptors —
// turns back into the outcome's retry-after, which a relaying server
// sends on again.
func TestRetryInfoRoundTrip(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want time.Duration }{
		{250 * time.Millisecond, time.Second},
		{time.Second, time.Second},
		{2500 * time.Millisecond, 3 * time.Second},
		{42 * time.Second, 42 * time.Second},
	} {
		st := grpcadapter.Status(pipeline.NewError(pipeline.KindUnavailable, "X_001", "Later.").WithRetryAfter(tt.in), "")
		got, ok := pipeline.AsError(grpcadapter.FromStatus(st.Err())).RetryAfter()
		if !ok || got != tt.want {
			t.Errorf("FromStatus(Status(retry-after %v)).RetryAfter() = %v, %v; want %v", tt.in, got, ok, tt.want)
		}
	}

	var relay func(context.Context) error // set once the harness is up
	h := newHarness(t, harnessOpt{register: func(t testing.TB, reg *operations.Registry) {
		forward := func(ctx context.Context, _ struct{}) (struct{}, error) { return struct{}{}, relay(ctx) }
		if err := operations.Register(reg, operations.Descriptor{ID: "work.relay"}, forward); err != nil {
			t.Fatal(err)
		}
	}})
	down := failIn{Kind: "UNAVAILABLE", Code: "TEST_UNAVAILABLE_001", Message: "down", Retry: 7}
	relay = func(ctx context.Context) error { return h.adapter.Call(ctx, h.conn, "work.fail", down, nil) }

	// Over the wire, decoded by Adapter.Call.
	err := h.adapter.Call(t.Context(), h.conn, "work.fail", down, nil)
	e := pipeline.AsError(err)
	if e.Kind() != pipeline.KindUnavailable || e.Code() != "GRPC_UNAVAILABLE" {
		t.Fatalf("Call(work.fail) = %v, want UNAVAILABLE GRPC_UNAVAILABLE", err)
	}
	if d, ok := e.RetryAfter(); !ok || d != 7*time.Second {
		t.Errorf("Call(work.fail).RetryAfter() = %v, %v; want 7s", d, ok)
	}
	if r, _ := e.Details()["reason"]; r != "TEST_UNAVAILABLE_001" {
		t.Errorf("Call(work.fail) reason = %v, want TEST_UNAVAILABLE_001", r)
	}

	// Relayed by a handler that returns the downstream's outcome as it is.
	_, st := h.call(t.Context(), t, "/test.v1.Work/Relay", `{}`)
	if st.Code() != codes.Unavailable || errorInfo(t, st).GetReason() != "GRPC_UNAVAILABLE" {
		t.Fatalf("Relay = %v, want Unavailable GRPC_UNAVAILABLE", st)
	}
	if ri := retryInfo(st); ri == nil || ri.GetRetryDelay().AsDuration() != 7*time.Second {
		t.Errorf("Relay RetryInfo = %v, want 7s", ri)
	}
	if got := errorInfo(t, st).GetMetadata()[pipelinetest.DetailRetryAfter]; got != "7" {
		t.Errorf("Relay ErrorInfo metadata retryAfter = %q, want 7", got)
	}
}

// TestEveryAnswerIsObserved checks that every answer, the adapter's own
// rejections included — a request that does not fit the input type, one
// that is not valid protobuf — has a span, and a call log record with its
// trace ID.
func TestEveryAnswerIsObserved(t *testing.T) {
	t.Parallel()
	tracing, spans := withSpans()
	h := newHarness(t, harnessOpt{kernel: []kernel.Option{tracing}})
	if _, st := h.call(t.Context(), t, "/test.v1.Work/Tiny", `{"n": 1}`); st != nil {
		t.Fatalf("Tiny(1) = %v, want OK", st)
	}
	var trailer metadata.MD
	if _, st := h.call(t.Context(), t, "/test.v1.Work/Tiny", `{"n": 300}`, grpc.Trailer(&trailer)); st.Code() != codes.InvalidArgument {
		t.Fatalf("Tiny(300) = %v, want InvalidArgument", st)
	}
	err := h.conn.Invoke(t.Context(), "/test.v1.Work/Tiny", &rawBytes{0x08}, new(rawBytes), grpc.ForceCodec(rawCodec{}))
	if st := status.Convert(err); st.Code() != codes.Internal {
		t.Fatalf("Tiny(malformed) = %v, want Internal", st)
	}
	for _, want := range [][]string{
		{"grpcCode=OK"},
		{"grpcCode=InvalidArgument", "code=" + pipeline.CodeValidation},
		{"grpcCode=Internal", "code=GRPC_INTERNAL"},
	} {
		rec := h.waitLog(t, "grpc call", append([]string{"method=/test.v1.Work/Tiny", "operation=work.tiny"}, want...)...)
		id, _ := rec.Attrs["traceId"].(string)
		if want[0] == "grpcCode=InvalidArgument" {
			if got := trailer.Get("sundial-trace-id"); len(got) != 1 || got[0] != id {
				t.Errorf("trailer %s = %v, want the call's trace ID %q", "sundial-trace-id", got, id)
			}
		}
		if id == "" {
			t.Errorf("call log %v has no trace ID", rec.Attrs)
			continue
		}
		n := 0
		for _, s := range spans.Ended() {
			if s.SpanContext().TraceID().String() == id && s.Name() == "work.tiny" {
				n++
			}
		}
		if n != 1 {
			t.Errorf("call %v: %d spans with its trace ID, want 1", want, n)
		}
	}
	if n := len(h.findLog("grpc call")); n != 3 {
		t.Errorf("%d call log records, want 3 (one per answer)", n)
	}
}

// TestUnknownMethodIsObserved: a call to a method no service implements
// gets grpc-go's Unimplemented answer through UnknownServiceHandler, with a
// span, a trace ID and one call log record, under one route name whatever
// the method.
func TestUnknownMethodIsObserved(t *testing.T) {
	t.Parallel()
	tracing, spans := withSpans()
	var h *harness
	unknown := grpc.UnknownServiceHandler(func(srv any, s grpc.ServerStream) error { return h.adapter.UnknownServiceHandler(srv, s) })
	h = newHarness(t, harnessOpt{kernel: []kernel.Option{tracing}, server: []grpc.ServerOption{unknown}})
	for _, tc := range []struct{ full, msg string }{
		{"/test.v1.Work/Nope", "unknown method /test.v1.Work/Nope"},
		{"/no.such.Service/Call", "unknown service no.such.Service"},
	} {
		err := h.conn.Invoke(t.Context(), tc.full, &rawBytes{}, new(rawBytes), grpc.ForceCodec(rawCodec{}))
		if st := status.Convert(err); st.Code() != codes.Unimplemented || st.Message() != tc.msg {
			t.Errorf("%s = %v, want Unimplemented %q", tc.full, st, tc.msg)
		}
		rec := h.waitLog(t, "grpc call", "method="+tc.full, "grpcCode=Unimplemented", "code="+grpcadapter.CodeUnknownMethod)
		id, _ := rec.Attrs["traceId"].(string)
		n := 0
		for _, s := range spans.Ended() {
			if s.SpanContext().TraceID().String() == id && s.Name() == "(unknown)" {
				n++
			}
		}
		if id == "" || n != 1 {
			t.Errorf("%s: trace ID %q with %d spans named (unknown), want one", tc.full, id, n)
		}
	}
}

// TestForeignInterceptorSeesTheDeadlineAnswer checks the path of the
// adapter's methods on a server with an interceptor of the application's
// chained after the adapter's: the interceptor sees the request message
// and the answer, and for a handler that ignores its context that answer
// is DeadlineExceeded at the deadline, while the handler still runs; the
// late result is logged once.
func TestForeignInterceptorSeesTheDeadlineAnswer(t *testing.T) {
	t.Parallel()
	type seen struct {
		req  any
		code codes.Code
		at   time.Duration
	}
	saw := make(chan seen, 2)
	var base time.Time
	var baseMu sync.Mutex
	foreign := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		baseMu.Lock()
		at := time.Since(base)
		baseMu.Unlock()
		saw <- seen{req: req, code: status.Code(err), at: at}
		return resp, err
	}
	// The interceptor sends what it saw before the answer leaves: once
	// the caller has it, so does saw.
	seenNow := func(what string) seen {
		t.Helper()
		select {
		case s := <-saw:
			return s
		case <-time.After(10 * time.Second):
			t.Fatalf("the interceptor saw no answer for %s within 10 s of the caller's", what)
			return seen{}
		}
	}
	release, started := make(chan struct{}), make(chan struct{}, 4)
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	// serveStuck serves work.stuck with a deadline (TimeoutSeconds) of d.
	serveStuck := func(d time.Duration) *harness {
		h := newHarness(t, harnessOpt{
			register: registerStuck(release, started),
			kernel:   []kernel.Option{kernel.WithConfigJSON([]byte(stuckConfigOf(d)))},
			server:   []grpc.ServerOption{grpc.ChainUnaryInterceptor(foreign)},
		})
		t.Cleanup(unblock) // before the harness waits for the handlers
		return h
	}
	h := serveStuck(stuckTimeout)

	if out, st := h.call(t.Context(), t, "/test.v1.Work/Run", `{"delayMs": 1}`); st != nil || out != `{"rows":"1"}` {
		t.Fatalf("Run = %s, %v; want {\"rows\":\"1\"}, OK", out, st)
	}
	if s := seenNow("Run"); s.code != codes.OK {
		t.Errorf("the interceptor saw %v for Run, want OK", s.code)
	} else if _, ok := s.req.(protoreflect.ProtoMessage); !ok {
		t.Errorf("the interceptor saw a request of %T, want a protobuf message", s.req)
	}

	// On a loaded machine the deadline can pass before the kernel starts
	// the handler, and it then answers without running it: there is no
	// late result to log. Such a call is made again on a server whose
	// deadline is ten times as long, three tries in all.
	d := stuckTimeout
	var s seen
	for try := 1; ; try++ {
		baseMu.Lock()
		base = time.Now()
		baseMu.Unlock()
		_, st := h.call(t.Context(), t, "/test.v1.Work/Stuck", `{}`)
		if st.Code() != codes.DeadlineExceeded || errorInfo(t, st).GetReason() != pipeline.CodeTimeout {
			t.Fatalf("Stuck = %v, want DeadlineExceeded %s", st, pipeline.CodeTimeout)
		}
		s = seenNow("Stuck") // before the handler is released
		if _, ok := pipelinetest.HandlerStarted(t, started, h.k.Running); ok {
			break
		}
		if try == 3 {
			t.Fatalf("work.stuck's handler did not start before its deadline in three tries (the last %v)", d)
		}
		t.Logf("work.stuck (deadline %v) was answered without running its handler: once more with %v", d, 10*d)
		d *= 10
		h = serveStuck(d)
	}
	if s.code != codes.DeadlineExceeded {
		t.Errorf("the interceptor saw %v for Stuck, want DeadlineExceeded", s.code)
	}
	if s.at < d-10*time.Millisecond || s.at > d+100*time.Millisecond {
		t.Errorf("the interceptor saw the answer after %v, want within %v of the deadline (%v)", s.at, 100*time.Millisecond, d)
	}
	unblock()
	h.waitLateOnce(t, "operation=work.stuck", "protocol=grpc", "code="+pipeline.CodeTimeout)
}

// waitLateOnce waits for the kernel's record of a straggler's late result
// with the attributes want, then for every invocation to return, and
// checks that the late result was logged once.
func (h *harness) waitLateOnce(t *testing.T, want ...string) {
	t.Helper()
	h.waitLog(t, lateResult, want...)
	wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.k.Wait(wctx); err != nil {
		t.Fatal(err)
	}
	if late := h.findLog(lateResult); len(late) != 1 {
		t.Errorf("the late result was logged %d times, want once: %v", len(late), late)
	}
}

// TestStragglersDoNotHoldTheConnection: grpc-go counts a call against
// MaxConcurrentStreams until its handler returns, and past the bound its
// reader waits for one to return, reading nothing more on the connection.
// Stragglers answered at their deadline must not count: with a bound of 2
// and two handlers that ignore their context still running, a third call
// on the same connection is served at once. The 10 s client deadline is
// a failsafe only: a held connection fails the call with the client's
// own DeadlineExceeded, without the kernel's reason.
func TestStragglersDoNotHoldTheConnection(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	h := newHarness(t, harnessOpt{
		register: registerStuck(release, nil),
		kernel:   []kernel.Option{kernel.WithConfigJSON([]byte(stuckConfig))},
		server:   []grpc.ServerOption{grpc.MaxConcurrentStreams(2)},
		tcp:      true,
	})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) }) // before the harness waits for the handlers

	errs := make(chan *status.Status, 2)
	for range 2 {
		go func() {
			_, st := h.call(t.Context(), t, "/test.v1.Work/Stuck", `{}`)
			errs <- st
		}()
	}
	for range 2 {
		if st := <-errs; st.Code() != codes.DeadlineExceeded || errorInfo(t, st).GetReason() != pipeline.CodeTimeout {
			t.Fatalf("Stuck = %v, want DeadlineExceeded KERNEL_TIMEOUT_001", st)
		}
	}
	// Both handlers still run (release is open only at cleanup).
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, st := h.call(ctx, t, "/test.v1.Work/Run", `{}`); st != nil {
		t.Fatalf("Run beside 2 stragglers at MaxConcurrentStreams(2) = %v, want OK", st)
	}
}

// registerStuck registers work.stuck, whose handler ignores its context
// and returns once release is closed. It tells each start on started,
// when not nil.
func registerStuck(release <-chan struct{}, started chan<- struct{}) func(testing.TB, *operations.Registry) {
	return func(t testing.TB, reg *operations.Registry) {
		stuck := func(context.Context, workIn) (workOut, error) {
			if started != nil {
				started <- struct{}{}
			}
			<-release
			return workOut{Rows: 1}, nil
		}
		if err := operations.Register(reg, operations.Descriptor{ID: "work.stuck"}, stuck); err != nil {
			t.Fatal(err)
		}
	}
}
