package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/kernel/telemetry"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

type in struct{}
type out struct{ N int }

// testRegistry registers the operations the tests call:
//
//	test.ok        succeeds
//	test.wait      waits for its context to end and returns ctx.Err()
//	test.cancelled waits for its context to end and returns CANCELLED
//	test.fail      fails with an unhandled error (UNEXPECTED)
//	test.missing   fails with NOT_FOUND
func testRegistry(t *testing.T) *operations.Registry {
	t.Helper()
	reg := operations.NewRegistry()
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(operations.Register(reg, operations.Descriptor{ID: "test.ok"}, func(context.Context, in) (out, error) { return out{1}, nil }))
	must(operations.Register(reg, operations.Descriptor{ID: "test.wait"}, func(ctx context.Context, _ in) (out, error) {
		<-ctx.Done()
		return out{}, ctx.Err()
	}))
	must(operations.Register(reg, operations.Descriptor{ID: "test.cancelled"}, func(ctx context.Context, _ in) (out, error) {
		<-ctx.Done()
		return out{}, pipeline.ErrCancelled()
	}))
	must(operations.Register(reg, operations.Descriptor{ID: "test.fail"}, func(context.Context, in) (out, error) {
		return out{}, errors.New("db: connection refused")
	}))
	must(operations.Register(reg, operations.Descriptor{ID: "test.missing"}, func(context.Context, in) (out, error) {
		return out{}, pipeline.NotFound("TEST_NOT_FOUND_001", "No such thing.")
	}))
	return reg
}

func invoke(k *kernel.Kernel, ctx context.Context, id string, setup func(*pipeline.Invocation)) (*pipeline.Invocation, error) {
	d, ok := k.Lookup(id)
	if !ok {
		panic("unknown operation " + id)
	}
	inv := pipeline.NewInvocation(ctx, d, &in{})
	inv.SetProtocol(pipeline.ProtocolHTTP)
	if setup != nil {
		setup(inv)
	}
	return inv, k.Invoke(inv)
}

// rejectWith is application Resilience middleware that rejects every call
// the way the per-operation limits do.
func rejectWith(code string, retryAfter int) pipeline.Middleware {
	return pipeline.MiddlewareFunc(func(inv *pipeline.Invocation, next pipeline.Handler) error {
		e := pipeline.Unavailable(code, "rejected").WithDetail("id", inv.OperationID())
		if retryAfter > 0 {
			e = e.WithDetail("retryAfter", retryAfter)
		}
		return e
	})
}

// TestSpanPerOutcome checks the span of each outcome: name, attributes,
// status and events.
func TestSpanPerOutcome(t *testing.T) {
	tests := []struct {
		name       string
		op         string
		mw         pipeline.Middleware // application Resilience middleware
		deadline   time.Duration       // caller's deadline; 0: none
		cancelAt   time.Duration       // caller cancels after; 0: never
		wantKind   string
		wantCode   string // "" : attribute absent
		wantStatus codes.Code
		wantEvents []string
		wantAttrs  map[string]string
	}{
		{name: "ok", op: "test.ok", wantKind: "OK", wantStatus: codes.Unset},
		{
			name: "timeout", op: "test.wait", deadline: 300 * time.Millisecond,
			wantKind: "TIMEOUT", wantCode: pipeline.CodeTimeout, wantStatus: codes.Error,
			wantEvents: []string{telemetry.EventDeadlineExceeded},
			wantAttrs:  map[string]string{telemetry.AttrDeadlineBudgetMs: "300", telemetry.AttrDeadline: "2000-01-01T00:00:00.3Z"},
		},
		{
			name: "cancelled", op: "test.wait", deadline: time.Second, cancelAt: 100 * time.Millisecond,
			wantKind: "CANCELLED", wantCode: pipeline.CodeCancelled, wantStatus: codes.Error,
		},
		{
			name: "unexpected", op: "test.fail",
			wantKind: "UNEXPECTED", wantCode: pipeline.CodeUnexpected, wantStatus: codes.Error,
			wantEvents: []string{"exception"},
		},
		{
			name: "not found", op: "test.missing",
			wantKind: "NOT_FOUND", wantCode: "TEST_NOT_FOUND_001", wantStatus: codes.Error,
		},
		{
			name: "rate limited", op: "test.ok", mw: rejectWith(pipeline.CodeRateLimited, 60),
			wantKind: "UNAVAILABLE", wantCode: pipeline.CodeRateLimited, wantStatus: codes.Error,
			wantEvents: []string{telemetry.EventRejection},
		},
		{
			name: "concurrency limited", op: "test.ok", mw: rejectWith(pipeline.CodeConcurrencyLimited, 0),
			wantKind: "UNAVAILABLE", wantCode: pipeline.CodeConcurrencyLimited, wantStatus: codes.Error,
			wantEvents: []string{telemetry.EventRejection},
		},
		{
			name: "breaker open", op: "test.ok", mw: rejectWith(pipeline.CodeCircuitOpen, 30),
			wantKind: "UNAVAILABLE", wantCode: pipeline.CodeCircuitOpen, wantStatus: codes.Error,
			wantEvents: []string{telemetry.EventRejection},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t)
				var opts []kernel.Option
				if tt.mw != nil {
					opts = append(opts, kernel.UseAt(pipeline.StageResilience, tt.mw))
				}
				k := h.kernel(t, testRegistry(t), "", opts...)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				if tt.cancelAt > 0 {
					time.AfterFunc(tt.cancelAt, cancel)
				}
				start := time.Now()
				inv, err := invoke(k, ctx, tt.op, func(inv *pipeline.Invocation) {
					if tt.deadline > 0 {
						inv.SetDeadline(start.Add(tt.deadline))
					}
				})
				if got := pipeline.KindOf(err).String(); got != tt.wantKind {
					t.Fatalf("Invoke(%s) kind = %s, want %s (err %v)", tt.op, got, tt.wantKind, err)
				}
				s := h.onlySpan(t)
				if s.Name() != tt.op {
					t.Errorf("span name = %q, want %q", s.Name(), tt.op)
				}
				if s.SpanKind() != trace.SpanKindServer {
					t.Errorf("span kind = %v, want server (HTTP)", s.SpanKind())
				}
				a := spanAttrs(s)
				if a[telemetry.AttrOperationID] != tt.op || a[telemetry.AttrProtocol] != "http" {
					t.Errorf("span attributes = %v, want operation %s and protocol http", a, tt.op)
				}
				if a[telemetry.AttrOutcomeKind] != tt.wantKind {
					t.Errorf("span %s = %q, want %q", telemetry.AttrOutcomeKind, a[telemetry.AttrOutcomeKind], tt.wantKind)
				}
				if code, ok := a[telemetry.AttrOutcomeCode]; code != tt.wantCode || ok != (tt.wantCode != "") {
					t.Errorf("span %s = %q (present %v), want %q", telemetry.AttrOutcomeCode, code, ok, tt.wantCode)
				}
				for k, v := range tt.wantAttrs {
					if a[k] != v {
						t.Errorf("span %s = %q, want %q", k, a[k], v)
					}
				}
				if s.Status().Code != tt.wantStatus {
					t.Errorf("span status = %v, want %v", s.Status().Code, tt.wantStatus)
				}
				if tt.wantStatus == codes.Error && s.Status().Description != tt.wantCode+": "+pipeline.AsError(err).SafeMessage() {
					t.Errorf("span status description = %q, want the code and the caller's message", s.Status().Description)
				}
				if got := eventNames(s); fmt.Sprint(got) != fmt.Sprint(tt.wantEvents) {
					t.Errorf("span events = %v, want %v", got, tt.wantEvents)
				}
				if got, want := inv.TraceID(), s.SpanContext().TraceID().String(); got != want {
					t.Errorf("inv.TraceID() = %q, want the span's %q", got, want)
				}
			})
		})
	}
}

// TestRejectionEvent checks which limit and which retry hint the rejection
// event carries.
func TestRejectionEvent(t *testing.T) {
	tests := []struct {
		name, code, wantLimit, wantRetry string
		retryAfter                       int
	}{
		{"rate", pipeline.CodeRateLimited, "rate", "60", 60},
		{"concurrency", pipeline.CodeConcurrencyLimited, "concurrency", "", 0},
		{"breaker", pipeline.CodeCircuitOpen, "breaker", "30", 30},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			k := h.kernel(t, testRegistry(t), "", kernel.UseAt(pipeline.StageResilience, rejectWith(tt.code, tt.retryAfter)))
			if _, err := invoke(k, context.Background(), "test.ok", nil); pipeline.CodeOf(err) != tt.code {
				t.Fatalf("Invoke = %v, want %s", err, tt.code)
			}
			ev, ok := findEvent(h.onlySpan(t), telemetry.EventRejection)
			if !ok {
				t.Fatalf("no %s event", telemetry.EventRejection)
			}
			a := kvs(ev.Attributes)
			if a[telemetry.AttrRejectionLimit] != tt.wantLimit {
				t.Errorf("event %s = %q, want %q", telemetry.AttrRejectionLimit, a[telemetry.AttrRejectionLimit], tt.wantLimit)
			}
			if got, ok := a[telemetry.AttrRetryAfter]; got != tt.wantRetry || ok != (tt.wantRetry != "") {
				t.Errorf("event %s = %q (present %v), want %q", telemetry.AttrRetryAfter, got, ok, tt.wantRetry)
			}
			rm := h.collect(t)
			if v, _ := valueOf(rm, telemetry.MetricRejectionCount, map[string]string{"operation": "test.ok", "reason": tt.wantLimit}); v != 1 {
				t.Errorf("%s{operation=test.ok,reason=%s} = %v, want 1", telemetry.MetricRejectionCount, tt.wantLimit, v)
			}
			lines := h.logLines(t)
			if len(lines) != 1 || lines[0]["code"] != tt.code {
				t.Errorf("access log = %v, want one line with code %s", lines, tt.code)
			}
		})
	}
}

// TestDeadlineEventAtDeadline checks that the deadline event is stamped
// with the instant the deadline fired, not when the handler gave up.
func TestDeadlineEventAtDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		reg := operations.NewRegistry()
		// The handler ignores its context for 200 ms past the deadline.
		if err := operations.Register(reg, operations.Descriptor{ID: "test.slow"}, func(ctx context.Context, _ in) (out, error) {
			time.Sleep(700 * time.Millisecond)
			return out{}, nil
		}); err != nil {
			t.Fatal(err)
		}
		k := h.kernel(t, reg, "")
		start := time.Now()
		_, err := invoke(k, context.Background(), "test.slow", func(inv *pipeline.Invocation) { inv.SetDeadline(start.Add(500 * time.Millisecond)) })
		if pipeline.CodeOf(err) != pipeline.CodeTimeout {
			t.Fatalf("Invoke = %v, want TIMEOUT", err)
		}
		s := h.onlySpan(t)
		ev, ok := findEvent(s, telemetry.EventDeadlineExceeded)
		if !ok {
			t.Fatalf("no %s event; events %v", telemetry.EventDeadlineExceeded, eventNames(s))
		}
		if got := ev.Time.Sub(start); got != 500*time.Millisecond {
			t.Errorf("deadline event at start+%v, want start+500ms", got)
		}
		if got := s.EndTime().Sub(start); got != 700*time.Millisecond {
			t.Errorf("span ended at start+%v, want start+700ms", got)
		}
		if a := kvs(ev.Attributes); a[telemetry.AttrDeadlineOnArrival] != "false" {
			t.Errorf("event %s = %q, want false", telemetry.AttrDeadlineOnArrival, a[telemetry.AttrDeadlineOnArrival])
		}
	})
}

// TestDeadlinePastOnArrival: nothing runs, the span still says TIMEOUT
// and the event says the deadline had passed on arrival.
func TestDeadlinePastOnArrival(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		k := h.kernel(t, testRegistry(t), "")
		start := time.Now()
		_, err := invoke(k, context.Background(), "test.ok", func(inv *pipeline.Invocation) { inv.SetDeadline(start.Add(-time.Second)) })
		if pipeline.CodeOf(err) != pipeline.CodeTimeout {
			t.Fatalf("Invoke = %v, want TIMEOUT", err)
		}
		s := h.onlySpan(t)
		ev, ok := findEvent(s, telemetry.EventDeadlineExceeded)
		if !ok || kvs(ev.Attributes)[telemetry.AttrDeadlineOnArrival] != "true" {
			t.Fatalf("deadline event = %v (found %v), want on_arrival=true", ev.Attributes, ok)
		}
		if got := spanAttrs(s)[telemetry.AttrDeadlineBudgetMs]; got != "-1000" {
			t.Errorf("span %s = %q, want -1000", telemetry.AttrDeadlineBudgetMs, got)
		}
		rm := h.collect(t)
		if v, _ := valueOf(rm, telemetry.MetricDeadlineRemaining, map[string]string{"operation": "test.ok"}); v != 1 {
			t.Errorf("%s count = %v, want 1 (recorded as 0)", telemetry.MetricDeadlineRemaining, v)
		}
	})
}

// TestAttributedVersusOriginal: a handler that returns CANCELLED after the
// deadline fired. The caller, the span, the metrics and the access log see
// the attributed TIMEOUT; the original outcome — what the breaker counted
// — is CANCELLED, and the span and log carry it beside the attributed one.
func TestAttributedVersusOriginal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		k := h.kernel(t, testRegistry(t), "")
		inv, err := invoke(k, context.Background(), "test.cancelled", func(inv *pipeline.Invocation) {
			inv.SetDeadline(time.Now().Add(100 * time.Millisecond))
		})
		if pipeline.CodeOf(err) != pipeline.CodeTimeout {
			t.Fatalf("Invoke = %v, want the attributed TIMEOUT", err)
		}
		if got := pipeline.CodeOf(inv.OriginalOutcome()); got != pipeline.CodeCancelled {
			t.Fatalf("OriginalOutcome code = %q, want %s (what the handler returned)", got, pipeline.CodeCancelled)
		}
		a := spanAttrs(h.onlySpan(t))
		want := map[string]string{
			telemetry.AttrOutcomeKind:  "TIMEOUT",
			telemetry.AttrOutcomeCode:  pipeline.CodeTimeout,
			telemetry.AttrOriginalKind: "CANCELLED",
			telemetry.AttrOriginalCode: pipeline.CodeCancelled,
		}
		for k, v := range want {
			if a[k] != v {
				t.Errorf("span %s = %q, want %q", k, a[k], v)
			}
		}
		lines := h.logLines(t)
		if len(lines) != 1 {
			t.Fatalf("access log has %d lines, want 1", len(lines))
		}
		l := lines[0]
		if l["kind"] != "TIMEOUT" || l["code"] != pipeline.CodeTimeout || l["original_kind"] != "CANCELLED" || l["original_code"] != pipeline.CodeCancelled {
			t.Errorf("access log = %v, want kind TIMEOUT/%s and original CANCELLED/%s", l, pipeline.CodeTimeout, pipeline.CodeCancelled)
		}
		if l["trace_id"] != inv.TraceID() || l["operation"] != "test.cancelled" || l["protocol"] != "http" {
			t.Errorf("access log = %v, want trace_id %s, operation test.cancelled, protocol http", l, inv.TraceID())
		}
		rm := h.collect(t)
		if v, _ := valueOf(rm, telemetry.MetricInvocationCount, map[string]string{"operation": "test.cancelled", "kind": "TIMEOUT"}); v != 1 {
			t.Errorf("%s{kind=TIMEOUT} = %v, want 1", telemetry.MetricInvocationCount, v)
		}
		if v, ok := valueOf(rm, telemetry.MetricInvocationCount, map[string]string{"operation": "test.cancelled", "kind": "CANCELLED"}); ok {
			t.Errorf("%s{kind=CANCELLED} = %v, want no point: metrics see the attributed outcome", telemetry.MetricInvocationCount, v)
		}
	})
}

// TestInvocationMetrics runs a small script and reads every synchronous
// instrument.
func TestInvocationMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		k := h.kernel(t, testRegistry(t), "")
		for range 2 {
			invoke(k, context.Background(), "test.ok", nil)
		}
		invoke(k, context.Background(), "test.missing", nil)
		invoke(k, context.Background(), "test.wait", func(inv *pipeline.Invocation) { inv.SetDeadline(time.Now().Add(2 * time.Second)) })
		rm := h.collect(t)
		tests := []struct {
			metric string
			attrs  map[string]string
			want   float64
		}{
			{telemetry.MetricInvocationCount, map[string]string{"operation": "test.ok", "protocol": "http", "kind": "OK"}, 2},
			{telemetry.MetricInvocationCount, map[string]string{"operation": "test.missing", "kind": "NOT_FOUND", "code": "TEST_NOT_FOUND_001"}, 1},
			{telemetry.MetricInvocationCount, map[string]string{"operation": "test.wait", "kind": "TIMEOUT", "code": pipeline.CodeTimeout}, 1},
			{telemetry.MetricInvocationDuration, map[string]string{"operation": "test.ok", "kind": "OK"}, 2},
			{telemetry.MetricInvocationDuration, map[string]string{"operation": "test.wait", "kind": "TIMEOUT"}, 1},
			{telemetry.MetricDeadlineRemaining, map[string]string{"operation": "test.wait", "protocol": "http"}, 1},
		}
		for _, tt := range tests {
			if got, _ := valueOf(rm, tt.metric, tt.attrs); got != tt.want {
				t.Errorf("%s%v = %v, want %v", tt.metric, tt.attrs, got, tt.want)
			}
		}
		// OK has no code attribute; calls without a deadline are not in the
		// remaining histogram.
		for _, p := range points(rm, telemetry.MetricInvocationCount) {
			if _, ok := p.attrs["code"]; ok && p.attrs["kind"] == "OK" {
				t.Errorf("%s point %v has a code for OK", telemetry.MetricInvocationCount, p.attrs)
			}
		}
		if _, ok := valueOf(rm, telemetry.MetricDeadlineRemaining, map[string]string{"operation": "test.ok"}); ok {
			t.Errorf("%s has a point for test.ok, which had no deadline", telemetry.MetricDeadlineRemaining)
		}
		if v := histogramSum(rm, telemetry.MetricDeadlineRemaining, "test.wait"); v != 2 {
			t.Errorf("%s{test.wait} sum = %v s, want 2", telemetry.MetricDeadlineRemaining, v)
		}
		if v := histogramSum(rm, telemetry.MetricInvocationDuration, "test.wait"); v != 2 {
			t.Errorf("%s{test.wait} sum = %v s, want 2 (it waited for its deadline)", telemetry.MetricInvocationDuration, v)
		}
	})
}

// TestRemoteParentContinued: a span context extracted from a traceparent
// is the parent of the invocation's span, and the trace ID is kept.
func TestRemoteParentContinued(t *testing.T) {
	h := newHarness(t)
	k := h.kernel(t, testRegistry(t), "")
	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx := telemetry.ExtractHTTP(context.Background(), map[string][]string{"Traceparent": {traceparent}})
	inv, err := invoke(k, ctx, "test.ok", nil)
	if err != nil {
		t.Fatal(err)
	}
	s := h.onlySpan(t)
	if got := s.SpanContext().TraceID().String(); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("span trace ID = %s, want the caller's", got)
	}
	if got := s.Parent().SpanID().String(); got != "00f067aa0ba902b7" || !s.Parent().IsRemote() {
		t.Errorf("span parent = %s (remote %v), want the caller's span 00f067aa0ba902b7", got, s.Parent().IsRemote())
	}
	if inv.TraceID() != "4bf92f3577b34da6a3ce929d0e0e4736" || telemetry.TraceID(inv) != inv.TraceID() {
		t.Errorf("inv.TraceID() = %q, telemetry.TraceID = %q, want the caller's trace", inv.TraceID(), telemetry.TraceID(inv))
	}
}

// TestHandlerSeesSpan: the handler's context carries the invocation's span,
// so outbound calls are its children; the context is restored afterwards.
func TestHandlerSeesSpan(t *testing.T) {
	h := newHarness(t)
	reg := operations.NewRegistry()
	var seen trace.SpanContext
	if err := operations.Register(reg, operations.Descriptor{ID: "test.peek"}, func(ctx context.Context, _ in) (out, error) {
		seen = trace.SpanContextFromContext(ctx)
		return out{}, nil
	}); err != nil {
		t.Fatal(err)
	}
	k := h.kernel(t, reg, "")
	parent := context.Background()
	inv, _ := invoke(k, parent, "test.peek", nil)
	if s := h.onlySpan(t); seen.SpanID() != s.SpanContext().SpanID() {
		t.Errorf("handler saw span %s, want the invocation's %s", seen.SpanID(), s.SpanContext().SpanID())
	}
	if inv.Context() != parent {
		t.Errorf("inv.Context() after Invoke is not the parent: the middleware must restore it")
	}
}

// TestHostEndpointNamedByRoute: host endpoints get spans named by route
// and metrics by route.
func TestHostEndpointNamedByRoute(t *testing.T) {
	h := newHarness(t)
	k := h.kernel(t, testRegistry(t), "")
	inv := pipeline.NewInvocation(context.Background(), nil, nil)
	inv.SetRoute("GET /healthz")
	inv.SetProtocol(pipeline.ProtocolHTTP)
	if err := k.InvokeFunc(inv, func(*pipeline.Invocation) error { return nil }); err != nil {
		t.Fatal(err)
	}
	s := h.onlySpan(t)
	if s.Name() != "GET /healthz" || spanAttrs(s)[telemetry.AttrRoute] != "GET /healthz" {
		t.Errorf("span %q %v, want name and %s GET /healthz", s.Name(), spanAttrs(s), telemetry.AttrRoute)
	}
	if _, ok := spanAttrs(s)[telemetry.AttrOperationID]; ok {
		t.Errorf("host span has %s", telemetry.AttrOperationID)
	}
	if v, _ := valueOf(h.collect(t), telemetry.MetricInvocationCount, map[string]string{"route": "GET /healthz", "kind": "OK"}); v != 1 {
		t.Errorf("%s{route=GET /healthz} = %v, want 1", telemetry.MetricInvocationCount, v)
	}
}

// TestPanicInMiddleware: a panic in application middleware still ends the
// span (UNEXPECTED) and reaches the kernel's Recover.
func TestPanicInMiddleware(t *testing.T) {
	h := newHarness(t)
	boom := pipeline.MiddlewareFunc(func(*pipeline.Invocation, pipeline.Handler) error { panic("boom") })
	k := h.kernel(t, testRegistry(t), "", kernel.UseAt(pipeline.StageAuthentication, boom))
	_, err := invoke(k, context.Background(), "test.ok", nil)
	if pipeline.KindOf(err) != pipeline.KindUnexpected {
		t.Fatalf("Invoke = %v, want UNEXPECTED from the kernel's Recover", err)
	}
	s := h.onlySpan(t)
	if s.Status().Code != codes.Error || spanAttrs(s)[telemetry.AttrOutcomeKind] != "UNEXPECTED" {
		t.Errorf("span status %v, attributes %v, want Error/UNEXPECTED", s.Status(), spanAttrs(s))
	}
}

// TestTelemetryOff: WithTelemetry(false) registers no Diagnostics
// middleware.
func TestTelemetryOff(t *testing.T) {
	h := newHarness(t)
	k := h.kernel(t, testRegistry(t), "", kernel.WithTelemetry(false))
	if _, err := invoke(k, context.Background(), "test.ok", nil); err != nil {
		t.Fatal(err)
	}
	if n := len(h.spans.Ended()); n != 0 {
		t.Errorf("spans = %d, want 0", n)
	}
	if h.log.Len() != 0 {
		t.Errorf("access log = %q, want nothing", h.log.String())
	}
}

// TestGlobalProviderInstalledAfterNew: with no provider option the kernel
// follows the global tracer provider, even one installed after New.
func TestGlobalProviderInstalledAfterNew(t *testing.T) {
	prev := otel.GetTracerProvider()
	defer func() {
		if _, isSDK := otel.GetTracerProvider().(*sdktrace.TracerProvider); isSDK || prev != otel.GetTracerProvider() {
			otel.SetTracerProvider(tracenoop.NewTracerProvider())
		}
	}()
	k, err := kernel.New(kernel.WithRegistry(testRegistry(t)))
	if err != nil {
		t.Fatal(err)
	}
	inv, _ := invoke(k, context.Background(), "test.ok", nil)
	if inv.TraceID() != "" {
		t.Fatalf("TraceID = %q before any provider is installed, want \"\"", inv.TraceID())
	}
	sr := tracetest.NewSpanRecorder()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr)))
	inv, _ = invoke(k, context.Background(), "test.ok", nil)
	if n := len(sr.Ended()); n != 1 || inv.TraceID() == "" {
		t.Fatalf("after SetTracerProvider: %d spans, TraceID %q; want 1 span and a trace ID", n, inv.TraceID())
	}
	otel.SetTracerProvider(tracenoop.NewTracerProvider())
	if _, _ = invoke(k, context.Background(), "test.ok", nil); len(sr.Ended()) != 1 {
		t.Errorf("after switching to a no-op provider, spans = %d, want still 1", len(sr.Ended()))
	}
}

// TestNoopCostsNothing: with no-op providers (explicit, or otel's global
// default) and no access log the middleware allocates nothing.
func TestNoopCostsNothing(t *testing.T) {
	tests := []struct {
		name string
		opts []telemetry.Option
	}{
		{"global default", nil},
		{"explicit noop", []telemetry.Option{telemetry.WithTracerProvider(tracenoop.NewTracerProvider())}},
	}
	d := &operations.Descriptor{ID: "bench.op"}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tel := telemetry.New(tt.opts...)
			h := pipeline.Chain(func(*pipeline.Invocation) error { return nil }, tel.Middleware(d))
			inv := pipeline.NewInvocation(context.Background(), d, nil)
			if n := testing.AllocsPerRun(1000, func() { _ = h(inv) }); n != 0 {
				t.Errorf("allocs per call = %v, want 0", n)
			}
			if inv.TraceID() != "" {
				t.Errorf("TraceID = %q with a no-op provider, want \"\"", inv.TraceID())
			}
		})
	}
}

// TestAccessLogOnly: an access log without any tracer still carries the
// caller's trace ID from an incoming traceparent.
func TestAccessLogOnly(t *testing.T) {
	var buf bytes.Buffer
	k, err := kernel.New(kernel.WithRegistry(testRegistry(t)),
		kernel.WithTracerProvider(tracenoop.NewTracerProvider()),
		kernel.WithAccessLog(slog.New(slog.NewJSONHandler(&buf, nil))))
	if err != nil {
		t.Fatal(err)
	}
	ctx := telemetry.ExtractHTTP(context.Background(), map[string][]string{"Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}})
	inv, _ := invoke(k, ctx, "test.missing", nil)
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("access log %q: %v", buf.String(), err)
	}
	if line["trace_id"] != "4bf92f3577b34da6a3ce929d0e0e4736" || line["kind"] != "NOT_FOUND" || line["code"] != "TEST_NOT_FOUND_001" {
		t.Errorf("access log = %v, want the caller's trace ID and NOT_FOUND/TEST_NOT_FOUND_001", line)
	}
	if inv.TraceID() != "" || telemetry.TraceID(inv) != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("inv.TraceID() = %q, telemetry.TraceID = %q; want \"\" and the caller's trace ID", inv.TraceID(), telemetry.TraceID(inv))
	}
}

// TestIdempotencyKeyReachesTypedHandler: a key on the invocation (from
// any header) is readable by a typed handler from its context, with or
// without an SDK.
func TestIdempotencyKeyReachesTypedHandler(t *testing.T) {
	for _, name := range []string{"no sdk", "sdk"} {
		t.Run(name, func(t *testing.T) {
			reg := operations.NewRegistry()
			var seen string
			if err := operations.Register(reg, operations.Descriptor{ID: "orders.create"}, func(ctx context.Context, _ in) (out, error) {
				seen = telemetry.IdempotencyKey(ctx)
				return out{}, nil
			}); err != nil {
				t.Fatal(err)
			}
			var k *kernel.Kernel
			if name == "sdk" {
				k = newHarness(t).kernel(t, reg, "")
			} else {
				var err error
				if k, err = kernel.New(kernel.WithRegistry(reg)); err != nil {
					t.Fatal(err)
				}
			}
			parent := context.Background()
			inv, err := invoke(k, parent, "orders.create", func(inv *pipeline.Invocation) {
				inv.SetBaggage(pipeline.BaggageIdempotencyKey, "order-7f3a")
			})
			if err != nil {
				t.Fatal(err)
			}
			if seen != "order-7f3a" {
				t.Errorf("telemetry.IdempotencyKey(ctx) in the handler = %q, want order-7f3a", seen)
			}
			if inv.Context() != parent {
				t.Errorf("inv.Context() after Invoke is not the parent")
			}
		})
	}
}
