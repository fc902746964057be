package observe_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/sundial-go/sundial/kernel/internal/observe"
	"github.com/sundial-go/sundial/kernel/propagation"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/resilience/idempotency"
)

// rejection returns a rejection built the way the per-operation limits
// build theirs: the limit's code, the operation's ID and, when retry is
// positive, a retry-after.
func rejection(code, id string, retry time.Duration) *pipeline.Error {
	e := pipeline.NewError(pipeline.KindUnavailable, code, "rejected").WithDetail("id", id)
	if retry > 0 {
		e = e.WithRetryAfter(retry)
	}
	return e
}

// Outcomes as the kernel's deadline attribution returns them: the
// attributed TIMEOUT or CANCELLED wrapping what the chain returned when
// it differs.
var (
	errDeadlineFired = pipelinetest.WithCause(pipeline.ErrTimeout(), context.DeadlineExceeded)
	errCallerGaveUp  = pipelinetest.WithCause(pipeline.ErrCanceled(), context.Canceled)
	errNotFound      = pipeline.NewError(pipeline.KindNotFound, "TEST_NOT_FOUND_001", "No such thing.")
)

// TestSpanPerOutcome checks the span of each outcome: name, attributes,
// status and events.
func TestSpanPerOutcome(t *testing.T) {
	tests := []struct {
		name       string
		deadline   time.Duration // caller's deadline after t0; 0: none
		took       time.Duration // End at t0+took
		err        error
		wantKind   string
		wantCode   string // "" : attribute absent
		wantStatus codes.Code
		wantEvents []string
		wantAttrs  map[string]string
	}{
		{name: "ok", took: 10 * time.Millisecond, wantKind: "OK", wantStatus: codes.Unset},
		{
			name: "timeout", deadline: 300 * time.Millisecond, took: 300 * time.Millisecond, err: errDeadlineFired,
			wantKind: "TIMEOUT", wantCode: pipeline.CodeTimeout, wantStatus: codes.Error,
			wantEvents: []string{observe.EventDeadlineExceeded},
			wantAttrs:  map[string]string{observe.AttrDeadlineBudgetMs: "300", observe.AttrDeadline: "2000-01-01T00:00:00.3Z"},
		},
		{
			name: "cancelled", deadline: time.Second, took: 100 * time.Millisecond, err: errCallerGaveUp,
			wantKind: "CANCELLED", wantCode: pipeline.CodeCanceled, wantStatus: codes.Error,
		},
		{
			name: "unexpected", err: errors.New("db: connection refused"),
			wantKind: "UNEXPECTED", wantCode: pipeline.CodeUnexpected, wantStatus: codes.Error,
			wantEvents: []string{"exception"},
		},
		{
			name: "not found", err: errNotFound,
			wantKind: "NOT_FOUND", wantCode: "TEST_NOT_FOUND_001", wantStatus: codes.Error,
		},
		{
			name: "rate limited", err: rejection(resilience.CodeRateLimited, "test.op", 60*time.Second),
			wantKind: "UNAVAILABLE", wantCode: resilience.CodeRateLimited, wantStatus: codes.Error,
			wantEvents: []string{observe.EventRejection},
		},
		{
			name: "concurrency limited", err: rejection(resilience.CodeConcurrencyLimited, "test.op", 0),
			wantKind: "UNAVAILABLE", wantCode: resilience.CodeConcurrencyLimited, wantStatus: codes.Error,
			wantEvents: []string{observe.EventRejection},
		},
		{
			name: "breaker open", err: rejection(resilience.CodeCircuitOpen, "test.op", 30*time.Second),
			wantKind: "UNAVAILABLE", wantCode: resilience.CodeCircuitOpen, wantStatus: codes.Error,
			wantEvents: []string{observe.EventRejection},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			c := runCall(h.tel.Operation(op("test.op")), context.Background(), httpInv("test.op", tt.deadline), t0, t0.Add(tt.took), tt.err)
			s := h.onlySpan(t)
			if s.Name() != "test.op" {
				t.Errorf("span name = %q, want test.op", s.Name())
			}
			if s.SpanKind() != trace.SpanKindServer {
				t.Errorf("span kind = %v, want server (HTTP)", s.SpanKind())
			}
			if !s.StartTime().Equal(t0) || !s.EndTime().Equal(t0.Add(tt.took)) {
				t.Errorf("span from %v to %v, want from start to end", s.StartTime(), s.EndTime())
			}
			a := spanAttrs(s)
			if a[observe.AttrOperationID] != "test.op" || a[observe.AttrProtocol] != "http" {
				t.Errorf("span attributes = %v, want operation test.op and protocol http", a)
			}
			if a[observe.AttrOutcomeKind] != tt.wantKind {
				t.Errorf("span %s = %q, want %q", observe.AttrOutcomeKind, a[observe.AttrOutcomeKind], tt.wantKind)
			}
			if code, ok := a[observe.AttrOutcomeCode]; code != tt.wantCode || ok != (tt.wantCode != "") {
				t.Errorf("span %s = %q (present %v), want %q", observe.AttrOutcomeCode, code, ok, tt.wantCode)
			}
			for _, k := range []string{observe.AttrOriginalKind, observe.AttrOriginalCode} {
				if v, ok := a[k]; ok {
					t.Errorf("span %s = %q, want none: the outcome was not attributed over another", k, v)
				}
			}
			for k, v := range tt.wantAttrs {
				if a[k] != v {
					t.Errorf("span %s = %q, want %q", k, a[k], v)
				}
			}
			if s.Status().Code != tt.wantStatus {
				t.Errorf("span status = %v, want %v", s.Status().Code, tt.wantStatus)
			}
			if tt.wantStatus == codes.Error && s.Status().Description != tt.wantCode+": "+callerMessage(tt.err) {
				t.Errorf("span status description = %q, want the code and the caller's message", s.Status().Description)
			}
			if got := eventNames(s); fmt.Sprint(got) != fmt.Sprint(tt.wantEvents) {
				t.Errorf("span events = %v, want %v", got, tt.wantEvents)
			}
			if got, want := c.TraceID(), s.SpanContext().TraceID().String(); got != want {
				t.Errorf("Call.TraceID() = %q, want the span's %q", got, want)
			}
		})
	}
}

// TestUnexpectedRecordsCause: the span of an UNEXPECTED outcome carries
// the real error as an exception event (operators read traces, callers do
// not), also for a recovered panic.
func TestUnexpectedRecordsCause(t *testing.T) {
	tests := []struct {
		name               string
		err                error
		wantType, wantText string
	}{
		{"foreign", errors.New("db: connection refused"), "*errors.errorString", "db: connection refused"},
		{"panic", pipeline.Wrap(pipeline.KindUnexpected, pipeline.CodeUnexpected, pipeline.UnexpectedMessage, &pipeline.PanicError{Value: "boom"}), "*pipeline.PanicError", "panic: boom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			runCall(h.tel.Operation(op("test.op")), context.Background(), httpInv("test.op", 0), t0, t0, tt.err)
			s := h.onlySpan(t)
			if s.Status().Code != codes.Error || spanAttrs(s)[observe.AttrOutcomeKind] != "UNEXPECTED" {
				t.Errorf("span status %v, attributes %v, want Error/UNEXPECTED", s.Status(), spanAttrs(s))
			}
			if s.Status().Description != pipeline.CodeUnexpected+": "+pipeline.UnexpectedMessage {
				t.Errorf("span status description = %q, want the caller's message only", s.Status().Description)
			}
			ev, ok := findEvent(s, "exception")
			a := kvs(ev.Attributes)
			if !ok || a["exception.message"] != tt.wantText || a["exception.type"] != tt.wantType {
				t.Errorf("exception event %v (found %v), want type %s and message %q", a, ok, tt.wantType, tt.wantText)
			}
		})
	}
}

// TestRejectionEvent checks which limit and which retry hint the rejection
// event carries.
func TestRejectionEvent(t *testing.T) {
	tests := []struct {
		name, code, wantLimit, wantRetry string
		retryAfter                       time.Duration
	}{
		{"rate", resilience.CodeRateLimited, "rate", "60", 60 * time.Second},
		{"concurrency", resilience.CodeConcurrencyLimited, "concurrency", "", 0},
		{"breaker", resilience.CodeCircuitOpen, "breaker", "30", 30 * time.Second},
		{"rounded up", resilience.CodeRateLimited, "rate", "3", 2500 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			runCall(h.tel.Operation(op("test.ok")), context.Background(), httpInv("test.ok", 0), t0, t0, rejection(tt.code, "test.ok", tt.retryAfter))
			ev, ok := findEvent(h.onlySpan(t), observe.EventRejection)
			if !ok {
				t.Fatalf("no %s event", observe.EventRejection)
			}
			a := kvs(ev.Attributes)
			if a[observe.AttrRejectionLimit] != tt.wantLimit {
				t.Errorf("event %s = %q, want %q", observe.AttrRejectionLimit, a[observe.AttrRejectionLimit], tt.wantLimit)
			}
			if got, ok := a[observe.AttrRetryAfter]; got != tt.wantRetry || ok != (tt.wantRetry != "") {
				t.Errorf("event %s = %q (present %v), want %q", observe.AttrRetryAfter, got, ok, tt.wantRetry)
			}
			rm := h.collect(t)
			if v, _ := valueOf(rm, observe.MetricRejectionCount, map[string]string{"operation": "test.ok", "reason": tt.wantLimit}); v != 1 {
				t.Errorf("%s{operation=test.ok,reason=%s} = %v, want 1", observe.MetricRejectionCount, tt.wantLimit, v)
			}
			lines := h.logLines(t)
			if len(lines) != 1 || lines[0]["code"] != tt.code {
				t.Fatalf("access log = %v, want one line with code %s", lines, tt.code)
			}
			if got, ok := lines[0]["retry_after_s"]; fmt.Sprint(got) != tt.wantRetry && ok || ok != (tt.wantRetry != "") {
				t.Errorf("access log retry_after_s = %v (present %v), want %q", got, ok, tt.wantRetry)
			}
		})
	}
}

// TestDeadlineEventAtDeadline checks that the deadline event is stamped
// with the instant the deadline fired, not when the handler gave up.
func TestDeadlineEventAtDeadline(t *testing.T) {
	h := newHarness(t)
	// The handler ignored its context for 200 ms past the deadline.
	runCall(h.tel.Operation(op("test.slow")), context.Background(), httpInv("test.slow", 500*time.Millisecond), t0, t0.Add(700*time.Millisecond), errDeadlineFired)
	s := h.onlySpan(t)
	ev, ok := findEvent(s, observe.EventDeadlineExceeded)
	if !ok {
		t.Fatalf("no %s event; events %v", observe.EventDeadlineExceeded, eventNames(s))
	}
	if got := ev.Time.Sub(t0); got != 500*time.Millisecond {
		t.Errorf("deadline event at start+%v, want start+500ms", got)
	}
	if got := s.EndTime().Sub(t0); got != 700*time.Millisecond {
		t.Errorf("span ended at start+%v, want start+700ms", got)
	}
	if a := kvs(ev.Attributes); a[observe.AttrDeadlineOnArrival] != "false" {
		t.Errorf("event %s = %q, want false", observe.AttrDeadlineOnArrival, a[observe.AttrDeadlineOnArrival])
	}
}

// TestDeadlineNotFiredNoEvent: a TIMEOUT before the deadline (a
// downstream timed out) has no deadline event.
func TestDeadlineNotFiredNoEvent(t *testing.T) {
	h := newHarness(t)
	runCall(h.tel.Operation(op("test.op")), context.Background(), httpInv("test.op", time.Second), t0, t0.Add(100*time.Millisecond), pipeline.ErrTimeout())
	if _, ok := findEvent(h.onlySpan(t), observe.EventDeadlineExceeded); ok {
		t.Errorf("a %s event for a TIMEOUT 900 ms before the deadline", observe.EventDeadlineExceeded)
	}
}

// TestDeadlinePastOnArrival: nothing runs, the span still says TIMEOUT
// and the event says the deadline had passed on arrival.
func TestDeadlinePastOnArrival(t *testing.T) {
	h := newHarness(t)
	runCall(h.tel.Operation(op("test.ok")), context.Background(), httpInv("test.ok", -time.Second), t0, t0, pipeline.ErrTimeout())
	s := h.onlySpan(t)
	ev, ok := findEvent(s, observe.EventDeadlineExceeded)
	if !ok || kvs(ev.Attributes)[observe.AttrDeadlineOnArrival] != "true" {
		t.Fatalf("deadline event = %v (found %v), want on_arrival=true", ev.Attributes, ok)
	}
	if !ev.Time.Equal(t0) {
		t.Errorf("deadline event at %v, want the arrival %v", ev.Time, t0)
	}
	if got := spanAttrs(s)[observe.AttrDeadlineBudgetMs]; got != "-1000" {
		t.Errorf("span %s = %q, want -1000", observe.AttrDeadlineBudgetMs, got)
	}
	rm := h.collect(t)
	if v, _ := valueOf(rm, observe.MetricDeadlineRemaining, map[string]string{"operation": "test.ok"}); v != 1 {
		t.Errorf("%s count = %v, want 1 (recorded as 0)", observe.MetricDeadlineRemaining, v)
	}
	if v := histogramSum(rm, observe.MetricDeadlineRemaining, "test.ok"); v != 0 {
		t.Errorf("%s sum = %v, want 0", observe.MetricDeadlineRemaining, v)
	}
}

// TestBudgetIsTheCallersDeadline: the budget (span attribute and metric)
// is the caller's deadline minus the arrival, even when the effective
// deadline — the operation's TimeoutSeconds here — is earlier; the
// sundial.deadline attribute is the effective one. Without a caller's
// deadline there is no budget, even with an effective deadline.
func TestBudgetIsTheCallersDeadline(t *testing.T) {
	h := newHarness(t)
	o := h.tel.Operation(op("test.capped"))
	capped := pipeline.NewInvocation(pipeline.Spec{
		Operation:      op("test.capped"),
		Protocol:       pipeline.ProtocolGRPC,
		CallerDeadline: t0.Add(10 * time.Second),
		Deadline:       t0.Add(2 * time.Second),
		DeadlineSource: pipeline.DeadlineOperation,
	})
	runCall(o, context.Background(), capped, t0, t0.Add(time.Millisecond), nil)
	a := spanAttrs(h.onlySpan(t))
	if a[observe.AttrDeadlineBudgetMs] != "10000" {
		t.Errorf("span %s = %q, want 10000 (the caller's deadline, not the effective one)", observe.AttrDeadlineBudgetMs, a[observe.AttrDeadlineBudgetMs])
	}
	if a[observe.AttrDeadline] != "2000-01-01T00:00:02Z" {
		t.Errorf("span %s = %q, want the effective deadline 2000-01-01T00:00:02Z", observe.AttrDeadline, a[observe.AttrDeadline])
	}
	if v := histogramSum(h.collect(t), observe.MetricDeadlineRemaining, "test.capped"); v != 10 {
		t.Errorf("%s sum = %v s, want 10", observe.MetricDeadlineRemaining, v)
	}

	h.spans.Reset()
	own := pipeline.NewInvocation(pipeline.Spec{
		Operation:      op("test.capped"),
		Deadline:       t0.Add(2 * time.Second),
		DeadlineSource: pipeline.DeadlineOperation,
	})
	runCall(o, context.Background(), own, t0, t0.Add(time.Millisecond), nil)
	a = spanAttrs(h.onlySpan(t))
	if v, ok := a[observe.AttrDeadlineBudgetMs]; ok {
		t.Errorf("span %s = %q without a caller's deadline, want none", observe.AttrDeadlineBudgetMs, v)
	}
	if a[observe.AttrDeadline] != "2000-01-01T00:00:02Z" {
		t.Errorf("span %s = %q, want the effective deadline", observe.AttrDeadline, a[observe.AttrDeadline])
	}
	if v, _ := valueOf(h.collect(t), observe.MetricDeadlineRemaining, map[string]string{"operation": "test.capped"}); v != 1 {
		t.Errorf("%s count = %v, want 1: the call without a caller's deadline is not recorded", observe.MetricDeadlineRemaining, v)
	}
}

// TestAttributedVersusOriginal: a handler that returned CANCELLED after
// the deadline fired. The caller, the span, the metrics and the access log
// see the attributed TIMEOUT; the original outcome — what the breaker
// counted, the attributed outcome's cause — is CANCELLED, and the span and
// log carry it beside the attributed one.
func TestAttributedVersusOriginal(t *testing.T) {
	h := newHarness(t)
	err := pipelinetest.WithCause(pipeline.ErrTimeout(), pipeline.ErrCanceled())
	c := runCall(h.tel.Operation(op("test.cancelled")), context.Background(), httpInv("test.cancelled", 100*time.Millisecond), t0, t0.Add(100*time.Millisecond), err)
	a := spanAttrs(h.onlySpan(t))
	want := map[string]string{
		observe.AttrOutcomeKind:  "TIMEOUT",
		observe.AttrOutcomeCode:  pipeline.CodeTimeout,
		observe.AttrOriginalKind: "CANCELLED",
		observe.AttrOriginalCode: pipeline.CodeCanceled,
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
	if l["kind"] != "TIMEOUT" || l["code"] != pipeline.CodeTimeout || l["original_kind"] != "CANCELLED" || l["original_code"] != pipeline.CodeCanceled {
		t.Errorf("access log = %v, want kind TIMEOUT/%s and original CANCELLED/%s", l, pipeline.CodeTimeout, pipeline.CodeCanceled)
	}
	if l["trace_id"] != c.TraceID() || l["operation"] != "test.cancelled" || l["protocol"] != "http" {
		t.Errorf("access log = %v, want trace_id %s, operation test.cancelled, protocol http", l, c.TraceID())
	}
	rm := h.collect(t)
	if v, _ := valueOf(rm, observe.MetricInvocationDuration, map[string]string{"operation": "test.cancelled", "kind": "TIMEOUT"}); v != 1 {
		t.Errorf("%s{kind=TIMEOUT} = %v, want 1", observe.MetricInvocationDuration, v)
	}
	if v, ok := valueOf(rm, observe.MetricInvocationDuration, map[string]string{"operation": "test.cancelled", "kind": "CANCELLED"}); ok {
		t.Errorf("%s{kind=CANCELLED} = %v, want no point: metrics see the attributed outcome", observe.MetricInvocationDuration, v)
	}
}

// TestOriginalOutcomeOfAttribution: the original kind and code are the
// cause of an attributed TIMEOUT or CANCELLED whenever its code differs —
// and only of those: the cause of any other outcome is not an original
// outcome.
func TestOriginalOutcomeOfAttribution(t *testing.T) {
	tests := []struct {
		name               string
		err                error
		wantKind, wantCode string // "": no original attributes
	}{
		{"timeout over not found", pipelinetest.WithCause(pipeline.ErrTimeout(), errNotFound), "NOT_FOUND", "TEST_NOT_FOUND_001"},
		{"timeout over unexpected", pipelinetest.WithCause(pipeline.ErrTimeout(), errors.New("db: gone")), "UNEXPECTED", pipeline.CodeUnexpected},
		{"timeout without a cause", pipeline.ErrTimeout(), "", ""},
		{"timeout over ctx error", errDeadlineFired, "", ""},
		{"timeout over downstream timeout", pipelinetest.WithCause(pipeline.ErrTimeout(), pipeline.NewError(pipeline.KindTimeout, "DOWNSTREAM_TIMEOUT_001", "slow")), "TIMEOUT", "DOWNSTREAM_TIMEOUT_001"},
		{"cancelled over rejection", pipelinetest.WithCause(pipeline.ErrCanceled(), rejection(resilience.CodeConcurrencyLimited, "x", 0)), "UNAVAILABLE", resilience.CodeConcurrencyLimited},
		{"wrapped in a foreign error", fmt.Errorf("late: %w", pipelinetest.WithCause(pipeline.ErrTimeout(), errNotFound)), "NOT_FOUND", "TEST_NOT_FOUND_001"},
		{"not found with a cause", pipelinetest.WithCause(pipeline.NewError(pipeline.KindNotFound, "APP_NOT_FOUND_001", "gone"), errors.New("sql: no rows")), "", ""},
		{"unexpected with a cause", pipeline.Wrap(pipeline.KindUnexpected, pipeline.CodeUnexpected, "x", errNotFound), "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			runCall(h.tel.Operation(op("test.op")), context.Background(), httpInv("test.op", time.Second), t0, t0.Add(time.Second), tt.err)
			a := spanAttrs(h.onlySpan(t))
			kind, kok := a[observe.AttrOriginalKind]
			code, cok := a[observe.AttrOriginalCode]
			if kind != tt.wantKind || code != tt.wantCode || kok != (tt.wantKind != "") || cok != kok {
				t.Errorf("span original kind/code = %q/%q (present %v/%v), want %q/%q", kind, code, kok, cok, tt.wantKind, tt.wantCode)
			}
			l := h.logLines(t)[0]
			lkind, lok := l["original_kind"].(string)
			lcode, _ := l["original_code"].(string)
			if lkind != tt.wantKind || lcode != tt.wantCode || lok != (tt.wantKind != "") {
				t.Errorf("access log original_kind/code = %q/%q (present %v), want %q/%q", lkind, lcode, lok, tt.wantKind, tt.wantCode)
			}
		})
	}
}

// TestInvocationMetrics runs a small script and reads every synchronous
// instrument.
func TestInvocationMetrics(t *testing.T) {
	h := newHarness(t)
	ok, missing, wait := h.tel.Operation(op("test.ok")), h.tel.Operation(op("test.missing")), h.tel.Operation(op("test.wait"))
	ctx := context.Background()
	for range 2 {
		runCall(ok, ctx, httpInv("test.ok", 0), t0, t0.Add(time.Millisecond), nil)
	}
	runCall(missing, ctx, httpInv("test.missing", 0), t0, t0.Add(time.Millisecond), errNotFound)
	runCall(wait, ctx, httpInv("test.wait", 2*time.Second), t0, t0.Add(2*time.Second), errDeadlineFired)
	rm := h.collect(t)
	tests := []struct {
		metric string
		attrs  map[string]string
		want   float64
	}{
		{observe.MetricInvocationDuration, map[string]string{"operation": "test.ok", "protocol": "http", "kind": "OK"}, 2},
		{observe.MetricInvocationDuration, map[string]string{"operation": "test.missing", "kind": "NOT_FOUND", "code": "TEST_NOT_FOUND_001"}, 1},
		{observe.MetricInvocationDuration, map[string]string{"operation": "test.wait", "kind": "TIMEOUT", "code": pipeline.CodeTimeout}, 1},
		{observe.MetricInvocationDuration, map[string]string{"operation": "test.ok", "kind": "OK"}, 2},
		{observe.MetricInvocationDuration, map[string]string{"operation": "test.wait", "kind": "TIMEOUT"}, 1},
		{observe.MetricDeadlineRemaining, map[string]string{"operation": "test.wait", "protocol": "http"}, 1},
	}
	for _, tt := range tests {
		if got, _ := valueOf(rm, tt.metric, tt.attrs); got != tt.want {
			t.Errorf("%s%v = %v, want %v", tt.metric, tt.attrs, got, tt.want)
		}
	}
	// OK has no code attribute; calls without a deadline are not in the
	// remaining histogram.
	for _, p := range points(rm, observe.MetricInvocationDuration) {
		if _, ok := p.attrs["code"]; ok && p.attrs["kind"] == "OK" {
			t.Errorf("%s point %v has a code for OK", observe.MetricInvocationDuration, p.attrs)
		}
	}
	if _, ok := valueOf(rm, observe.MetricDeadlineRemaining, map[string]string{"operation": "test.ok"}); ok {
		t.Errorf("%s has a point for test.ok, which had no deadline", observe.MetricDeadlineRemaining)
	}
	if v := histogramSum(rm, observe.MetricDeadlineRemaining, "test.wait"); v != 2 {
		t.Errorf("%s{test.wait} sum = %v s, want 2", observe.MetricDeadlineRemaining, v)
	}
	if v := histogramSum(rm, observe.MetricInvocationDuration, "test.wait"); v != 2 {
		t.Errorf("%s{test.wait} sum = %v s, want 2 (it waited for its deadline)", observe.MetricInvocationDuration, v)
	}
}

// TestRemoteParentContinued: a span context extracted from a traceparent
// is the parent of the invocation's span, and the trace ID is kept.
func TestRemoteParentContinued(t *testing.T) {
	h := newHarness(t)
	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx := propagation.ExtractHTTP(context.Background(), map[string][]string{"Traceparent": {traceparent}})
	c := runCall(h.tel.Operation(op("test.ok")), ctx, httpInv("test.ok", 0), t0, t0, nil)
	s := h.onlySpan(t)
	if got := s.SpanContext().TraceID().String(); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("span trace ID = %s, want the caller's", got)
	}
	if got := s.Parent().SpanID().String(); got != "00f067aa0ba902b7" || !s.Parent().IsRemote() {
		t.Errorf("span parent = %s (remote %v), want the caller's span 00f067aa0ba902b7", got, s.Parent().IsRemote())
	}
	if c.TraceID() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("Call.TraceID() = %q, want the caller's trace", c.TraceID())
	}
}

// TestStartReturnsSpanContext: the context Start returns carries the
// invocation's span, so that the handler's outbound calls are its
// children; the caller's context is left as it was.
func TestStartReturnsSpanContext(t *testing.T) {
	h := newHarness(t)
	parent := context.Background()
	ctx, c := h.tel.Operation(op("test.peek")).Start(parent, httpInv("test.peek", 0), t0)
	seen := trace.SpanContextFromContext(ctx)
	c.End(nil, t0)
	if s := h.onlySpan(t); seen.SpanID() != s.SpanContext().SpanID() {
		t.Errorf("Start's context has span %s, want the invocation's %s", seen.SpanID(), s.SpanContext().SpanID())
	}
	if trace.SpanContextFromContext(parent).IsValid() {
		t.Errorf("the parent context gained a span")
	}
}

// TestEndOnce: only the first End of a Call is observed.
func TestEndOnce(t *testing.T) {
	h := newHarness(t)
	_, c := h.tel.Operation(op("test.op")).Start(context.Background(), httpInv("test.op", 0), t0)
	c.End(errNotFound, t0)
	c.End(nil, t0.Add(time.Second))
	if n := len(h.spans.Ended()); n != 1 {
		t.Fatalf("ended spans = %d, want 1", n)
	}
	if n := len(h.logLines(t)); n != 1 {
		t.Errorf("access log lines = %d, want 1", n)
	}
	if n := len(points(h.collect(t), observe.MetricInvocationDuration)); n != 1 {
		t.Errorf("%s points = %d, want 1 (NOT_FOUND only)", observe.MetricInvocationDuration, n)
	}
}

// TestHostEndpointNamedByRoute: host endpoints get spans named by route
// and metrics by route.
func TestHostEndpointNamedByRoute(t *testing.T) {
	h := newHarness(t)
	inv := pipeline.NewInvocation(pipeline.Spec{Route: "GET /healthz", Protocol: pipeline.ProtocolHTTP})
	runCall(h.tel.Route("GET /healthz"), context.Background(), inv, t0, t0, nil)
	s := h.onlySpan(t)
	if s.Name() != "GET /healthz" || spanAttrs(s)[observe.AttrRoute] != "GET /healthz" {
		t.Errorf("span %q %v, want name and %s GET /healthz", s.Name(), spanAttrs(s), observe.AttrRoute)
	}
	if _, ok := spanAttrs(s)[observe.AttrOperationID]; ok {
		t.Errorf("host span has %s", observe.AttrOperationID)
	}
	if v, _ := valueOf(h.collect(t), observe.MetricInvocationDuration, map[string]string{"route": "GET /healthz", "kind": "OK"}); v != 1 {
		t.Errorf("%s{route=GET /healthz} = %v, want 1", observe.MetricInvocationDuration, v)
	}
	if l := h.logLines(t); len(l) != 1 || l[0]["route"] != "GET /healthz" || l[0]["operation"] != nil {
		t.Errorf("access log = %v, want one line with route GET /healthz", l)
	}
}

// TestUnknownOperationByRoute: a call of an unknown operation ID, observed
// by Route(id), is named by the ID.
func TestUnknownOperationByRoute(t *testing.T) {
	h := newHarness(t)
	inv := pipeline.NewInvocation(pipeline.Spec{Protocol: pipeline.ProtocolGRPC})
	runCall(h.tel.Route("no.such"), context.Background(), inv, t0, t0, pipeline.NewError(pipeline.KindNotFound, "KERNEL_NOT_FOUND_001", "No such operation."))
	s := h.onlySpan(t)
	if s.Name() != "no.such" || spanAttrs(s)[observe.AttrRoute] != "no.such" {
		t.Errorf("span %q %v, want name and %s no.such", s.Name(), spanAttrs(s), observe.AttrRoute)
	}
	if l := h.logLines(t); len(l) != 1 || l[0]["route"] != "no.such" {
		t.Errorf("access log = %v, want one line with route no.such", l)
	}
}

// TestRoutesBounded: past the bound, further routes share the metric
// attributes of the route "other", while spans keep their own name.
func TestRoutesBounded(t *testing.T) {
	h := newHarness(t)
	for i := range 300 {
		name := fmt.Sprintf("GET /r%03d", i)
		inv := pipeline.NewInvocation(pipeline.Spec{Route: name, Protocol: pipeline.ProtocolHTTP})
		runCall(h.tel.Route(name), context.Background(), inv, t0, t0, nil)
	}
	if s := h.spans.Ended(); s[len(s)-1].Name() != "GET /r299" {
		t.Errorf("last span %q, want GET /r299", s[len(s)-1].Name())
	}
	rm := h.collect(t)
	if n := len(points(rm, observe.MetricInvocationDuration)); n > 257 {
		t.Errorf("%s has %d points, want at most 257", observe.MetricInvocationDuration, n)
	}
	if v, _ := valueOf(rm, observe.MetricInvocationDuration, map[string]string{"route": "other"}); v == 0 {
		t.Errorf("%s{route=other} = 0, want the calls past the bound", observe.MetricInvocationDuration)
	}
}

// TestNilIsOff: a nil *Telemetry (the kernel with telemetry off) gives nil
// Ops, whose Start observes nothing; a nil Call's methods do nothing.
func TestNilIsOff(t *testing.T) {
	var tel *observe.Telemetry
	if o := tel.Operation(op("test.ok")); o != nil {
		t.Errorf("nil Telemetry's Operation = %v, want nil", o)
	}
	if o := tel.Route("GET /healthz"); o != nil {
		t.Errorf("nil Telemetry's Route = %v, want nil", o)
	}
	if o := observe.New().Operation(nil); o != nil {
		t.Errorf("Operation(nil) = %v, want nil", o)
	}
	var o *observe.Op
	ctx := context.Background()
	got, c := o.Start(ctx, httpInv("test.ok", 0), t0)
	if got != ctx || c != nil {
		t.Fatalf("nil Op's Start = %v, %v; want the context and a nil Call", got, c)
	}
	c.End(errNotFound, t0)
	if c.TraceID() != "" {
		t.Errorf("nil Call's TraceID = %q, want \"\"", c.TraceID())
	}
}

// TestGlobalProviderInstalledAfterNew: with no provider option the
// Telemetry follows the global tracer provider, even one installed after
// New.
func TestGlobalProviderInstalledAfterNew(t *testing.T) {
	prev := otel.GetTracerProvider()
	defer func() {
		if _, isSDK := otel.GetTracerProvider().(*sdktrace.TracerProvider); isSDK || prev != otel.GetTracerProvider() {
			otel.SetTracerProvider(tracenoop.NewTracerProvider())
		}
	}()
	o := observe.New().Operation(op("test.ok"))
	_, c := o.Start(context.Background(), httpInv("test.ok", 0), t0)
	if c != nil {
		t.Fatalf("Start observed the call before any provider is installed")
	}
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer tp.Shutdown(context.Background())
	otel.SetTracerProvider(tp)
	c = runCall(o, context.Background(), httpInv("test.ok", 0), t0, t0, nil)
	if n := len(sr.Ended()); n != 1 || c.TraceID() == "" {
		t.Fatalf("after SetTracerProvider: %d spans, TraceID %q; want 1 span and a trace ID", n, c.TraceID())
	}
	otel.SetTracerProvider(tracenoop.NewTracerProvider())
	if runCall(o, context.Background(), httpInv("test.ok", 0), t0, t0, nil); len(sr.Ended()) != 1 {
		t.Errorf("after switching to a no-op provider, spans = %d, want still 1", len(sr.Ended()))
	}
}

// TestNoopCostsNothing: with no-op providers (explicit, or otel's global
// default) and no access log, Start and End allocate nothing.
func TestNoopCostsNothing(t *testing.T) {
	tests := []struct {
		name string
		opts []observe.Option
	}{
		{"global default", nil},
		{"explicit noop", []observe.Option{observe.WithTracerProvider(tracenoop.NewTracerProvider())}},
	}
	inv := pipeline.NewInvocation(pipeline.Spec{
		Operation:      op("bench.op"),
		Protocol:       pipeline.ProtocolHTTP,
		CallerDeadline: t0.Add(time.Second),
		Deadline:       t0.Add(time.Second),
	})
	ctx := propagation.ExtractHTTP(context.Background(), map[string][]string{"Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := observe.New(tt.opts...).Operation(op("bench.op"))
			var c *observe.Call
			n := testing.AllocsPerRun(1000, func() {
				var got context.Context
				got, c = o.Start(ctx, inv, t0)
				if got != ctx {
					panic("Start changed the context")
				}
				c.End(errNotFound, t0)
			})
			if n != 0 {
				t.Errorf("allocs per call = %v, want 0", n)
			}
			if c != nil {
				t.Errorf("Start = a Call with a no-op provider, want nil")
			}
		})
	}
}

// TestAccessLogOnly: an access log without any tracer still carries the
// caller's trace ID from an incoming traceparent, and so does the Call.
func TestAccessLogOnly(t *testing.T) {
	var buf bytes.Buffer
	tel := observe.New(observe.WithTracerProvider(tracenoop.NewTracerProvider()),
		observe.WithAccessLog(slog.New(slog.NewJSONHandler(&buf, nil))))
	ctx := propagation.ExtractHTTP(context.Background(), map[string][]string{"Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}})
	got, c := tel.Operation(op("test.missing")).Start(ctx, httpInv("test.missing", 0), t0)
	if got != ctx {
		t.Errorf("Start changed the context without a tracer")
	}
	c.End(errNotFound, t0.Add(3*time.Millisecond))
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("access log %q: %v", buf.String(), err)
	}
	if line["trace_id"] != "4bf92f3577b34da6a3ce929d0e0e4736" || line["kind"] != "NOT_FOUND" || line["code"] != "TEST_NOT_FOUND_001" {
		t.Errorf("access log = %v, want the caller's trace ID and NOT_FOUND/TEST_NOT_FOUND_001", line)
	}
	if line["level"] != "INFO" || line["msg"] != "sundial: invocation" || line["duration"] != float64(3*time.Millisecond) || line["operation"] != "test.missing" {
		t.Errorf("access log = %v, want level INFO, operation test.missing, duration 3ms", line)
	}
	if c.TraceID() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("Call.TraceID() = %q; want the caller's trace ID", c.TraceID())
	}
}

// TestAccessLogUnexpectedIsError: UNEXPECTED outcomes are logged at level
// Error; a logger above Info logs the others not at all.
func TestAccessLogUnexpectedIsError(t *testing.T) {
	var buf bytes.Buffer
	tel := observe.New(observe.WithTracerProvider(tracenoop.NewTracerProvider()),
		observe.WithAccessLog(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	o := tel.Operation(op("test.op"))
	runCall(o, context.Background(), httpInv("test.op", 0), t0, t0, nil)
	runCall(o, context.Background(), httpInv("test.op", 0), t0, t0, errors.New("boom"))
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("access log %q: %v (want one line)", buf.String(), err)
	}
	if line["level"] != "ERROR" || line["kind"] != "UNEXPECTED" {
		t.Errorf("access log = %v, want one ERROR line for UNEXPECTED", line)
	}
}

// TestIdempotencyKeyAttribute: the span says whether the caller sent an
// idempotency key, never what it is.
func TestIdempotencyKeyAttribute(t *testing.T) {
	for _, key := range []string{"", "order-7f3a"} {
		h := newHarness(t)
		inv := pipeline.NewInvocation(pipeline.Spec{
			Operation:      op("orders.create"),
			Baggage:        map[string]string{propagation.BaggageIdempotencyKey: key},
			IdempotencyKey: key, // as the kernel's edge takes it from the baggage
		})
		runCall(h.tel.Operation(op("orders.create")), context.Background(), inv, t0, t0, nil)
		s := h.onlySpan(t)
		got, ok := spanAttrs(s)[observe.AttrIdempotencyKey]
		if ok != (key != "") || ok && got != "true" {
			t.Errorf("key %q: span %s = %q (present %v)", key, observe.AttrIdempotencyKey, got, ok)
		}
		for _, a := range s.Attributes() {
			if key != "" && a.Value.Emit() == key {
				t.Errorf("span attribute %s carries the key itself", a.Key)
			}
		}
		if s.SpanKind() != trace.SpanKindInternal {
			t.Errorf("in-process span kind = %v, want internal", s.SpanKind())
		}
	}
}

// TestIdempotencyKeyFromContext: IdempotencyKey reads the baggage member
// the kernel puts into the handler's context.
func TestIdempotencyKeyFromContext(t *testing.T) {
	m, err := baggage.NewMemberRaw(propagation.BaggageIdempotencyKey, "order-7f3a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := baggage.New(m)
	if err != nil {
		t.Fatal(err)
	}
	if got := propagation.IdempotencyKey(baggage.ContextWithBaggage(context.Background(), b)); got != "order-7f3a" {
		t.Errorf("IdempotencyKey = %q, want order-7f3a", got)
	}
	if got := propagation.IdempotencyKey(context.Background()); got != "" {
		t.Errorf("IdempotencyKey without baggage = %q, want \"\"", got)
	}
}

// replayed returns an invocation of spec that the idempotency middleware
// answered with the stored outcome of a first call with its key: the one
// way a reply gets the replay mark.
func replayed(t *testing.T, spec pipeline.Spec) *pipeline.Invocation {
	t.Helper()
	mw := idempotency.New(idempotency.Config{
		Operation: spec.Operation.OperationID(), Store: idempotency.NewMemoryStore(idempotency.MemoryConfig{}),
		NewOutput: func() any { return new(string) }, Mark: &pipelinetest.Mark,
	})
	ok := func(context.Context, *pipeline.Invocation) (any, error) { return "done", nil }
	spec.ReplayMark = &pipelinetest.Mark
	for range 2 {
		inv := pipeline.NewInvocation(spec)
		if _, err := mw.Invoke(context.Background(), inv, ok); err != nil {
			t.Fatal(err)
		}
		if inv.Reply().Replayed() {
			return inv
		}
	}
	t.Fatal("the second call with the key was not replayed")
	return nil
}

// TestIdempotencyReplayObserved: an invocation whose outcome was replayed
// from the idempotency store is marked on its span
// (sundial.idempotency.replayed), on its access-log line (replayed: true)
// and counted in sundial.idempotency.replays by operation and protocol;
// one that ran is marked nowhere.
func TestIdempotencyReplayObserved(t *testing.T) {
	h := newHarness(t)
	o := h.tel.Operation(op("billing.charge"))
	spec := pipeline.Spec{Operation: op("billing.charge"), Protocol: pipeline.ProtocolGRPC, IdempotencyKey: "k-1"}
	runCall(o, context.Background(), pipeline.NewInvocation(spec), t0, t0, nil)
	replay := replayed(t, spec)
	runCall(o, context.Background(), replay, t0, t0, nil)

	ended := h.spans.Ended()
	if len(ended) != 2 {
		t.Fatalf("spans = %d, want 2", len(ended))
	}
	for i, want := range []string{"", "true"} {
		if got := spanAttrs(ended[i])[observe.AttrIdempotencyReplayed]; got != want {
			t.Errorf("span %d: %s = %q, want %q", i, observe.AttrIdempotencyReplayed, got, want)
		}
	}
	lines := h.logLines(t)
	if len(lines) != 2 || lines[0]["replayed"] != nil || lines[1]["replayed"] != true {
		t.Errorf("access log = %v, want replayed only on the second line", lines)
	}
	rm := h.collect(t)
	if v, ok := valueOf(rm, observe.MetricIdempotencyReplays, map[string]string{
		observe.MetricAttrOperation: "billing.charge", observe.MetricAttrProtocol: "grpc",
	}); !ok || v != 1 {
		t.Errorf("%s{billing.charge, grpc} = %v (%v), want 1", observe.MetricIdempotencyReplays, v, ok)
	}
}

// callerMessage is the message a caller sees of err's outcome: the generic
// one for an UNEXPECTED outcome.
func callerMessage(err error) string {
	e := pipeline.AsError(err)
	if e.Kind() == pipeline.KindUnexpected {
		return pipeline.UnexpectedMessage
	}
	return e.Message()
}
