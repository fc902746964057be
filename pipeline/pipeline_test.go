package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sundial-go/sundial/pipeline"
)

func TestChainOrder(t *testing.T) {
	var trace []string
	mw := func(name string) pipeline.Middleware {
		return pipeline.MiddlewareFunc(func(inv *pipeline.Invocation, next pipeline.Handler) error {
			trace = append(trace, name+">")
			err := next(inv)
			trace = append(trace, "<"+name)
			return err
		})
	}
	h := pipeline.Chain(func(*pipeline.Invocation) error { trace = append(trace, "handler"); return nil },
		mw("a"), nil, mw("b"), mw("c"))
	for i := range 2 { // the compiled chain is reused
		trace = trace[:0]
		if err := h(pipeline.NewInvocation(context.Background(), nil, nil)); err != nil {
			t.Fatalf("call %d: err = %v", i, err)
		}
		got := strings.Join(trace, " ")
		want := "a> b> c> handler <c <b <a"
		if got != want {
			t.Errorf("call %d: order = %q, want %q", i, got, want)
		}
	}
}

func TestChainAllocatesNothingPerCall(t *testing.T) {
	pass := pipeline.MiddlewareFunc(func(inv *pipeline.Invocation, next pipeline.Handler) error { return next(inv) })
	h := pipeline.Chain(func(*pipeline.Invocation) error { return nil }, pass, pass, pass)
	inv := pipeline.NewInvocation(context.Background(), nil, nil)
	if n := testing.AllocsPerRun(100, func() { _ = h(inv) }); n != 0 {
		t.Errorf("AllocsPerRun(chain of 3) = %v, want 0", n)
	}
}

func TestRecover(t *testing.T) {
	var logged *pipeline.PanicError
	h := pipeline.Recover(func(*pipeline.Invocation) error { panic("secret: db password is hunter2") },
		func(_ *pipeline.Invocation, p *pipeline.PanicError) { logged = p })
	err := h(pipeline.NewInvocation(context.Background(), nil, nil))
	e := pipeline.AsError(err)
	if e.Kind != pipeline.KindUnexpected || e.Code != pipeline.CodeUnexpected {
		t.Fatalf("Recover(panic) = %v/%s, want UNEXPECTED/%s", e.Kind, e.Code, pipeline.CodeUnexpected)
	}
	if strings.Contains(e.SafeMessage(), "hunter2") || strings.Contains(e.Message, "hunter2") {
		t.Errorf("panic text leaked into the outcome message: %q", e.Message)
	}
	if logged == nil || fmt.Sprint(logged.Value) != "secret: db password is hunter2" || len(logged.Stack) == 0 {
		t.Errorf("onPanic got %+v, want the panic value and a stack", logged)
	}
	var pe *pipeline.PanicError
	if !errors.As(err, &pe) {
		t.Errorf("errors.As(err, *PanicError) = false, want the panic as the cause")
	}
}

func TestKindOf(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want pipeline.Kind
	}{
		{"nil", nil, pipeline.KindOK},
		{"coded", pipeline.NotFound("X_NOT_FOUND_001", "no"), pipeline.KindNotFound},
		{"wrapped coded", fmt.Errorf("ctx: %w", pipeline.Conflict("X_CONFLICT_001", "no")), pipeline.KindConflict},
		{"deadline", context.DeadlineExceeded, pipeline.KindTimeout},
		{"wrapped deadline", fmt.Errorf("dial: %w", context.DeadlineExceeded), pipeline.KindTimeout},
		{"canceled", context.Canceled, pipeline.KindCancelled},
		{"foreign", errors.New("boom"), pipeline.KindUnexpected},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := pipeline.KindOf(tt.err); got != tt.want {
				t.Errorf("KindOf(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

func TestAsErrorNeverOverwritesACode(t *testing.T) {
	orig := pipeline.Unavailable("SHOP_UNAVAILABLE_001", "down").WithDetail("id", "billing.charge")
	if got := pipeline.AsError(fmt.Errorf("wrapped: %w", orig)); got != orig {
		t.Errorf("AsError(wrapped coded) = %v, want the original *Error", got)
	}
	foreign := pipeline.AsError(errors.New("pq: connection refused to 10.0.0.5"))
	if foreign.Kind != pipeline.KindUnexpected || strings.Contains(foreign.SafeMessage(), "10.0.0.5") {
		t.Errorf("AsError(foreign) = %v %q, want UNEXPECTED with a generic message", foreign.Kind, foreign.SafeMessage())
	}
	if got := pipeline.AsError(context.Canceled).Code; got != pipeline.CodeCancelled {
		t.Errorf("AsError(context.Canceled).Code = %q, want %q", got, pipeline.CodeCancelled)
	}
}

func TestWithDetailCopies(t *testing.T) {
	base := pipeline.Unavailable("C", "m")
	a := base.WithDetail("retryAfter", 1)
	b := a.WithDetail("id", "x")
	if len(base.Details) != 0 || len(a.Details) != 1 || len(b.Details) != 2 {
		t.Errorf("WithDetail mutated its receiver: base=%v a=%v b=%v", base.Details, a.Details, b.Details)
	}
}

func TestInvocationDeadline(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	inv := pipeline.NewInvocation(nil, nil, nil)
	if inv.Context() == nil {
		t.Fatal("NewInvocation(nil ctx).Context() = nil")
	}
	if inv.Expired(now) {
		t.Error("Expired without a deadline = true, want false")
	}
	if _, ok := inv.Deadline(); ok {
		t.Error("Deadline() reports one before SetDeadline")
	}
	inv.SetDeadline(now.Add(1500 * time.Millisecond).In(time.FixedZone("X", 3600)))
	if d, _ := inv.Deadline(); d.Location() != time.UTC {
		t.Errorf("Deadline location = %v, want UTC", d.Location())
	}
	if got := inv.Remaining(now); got != 1500*time.Millisecond {
		t.Errorf("Remaining(now) = %v, want 1.5s", got)
	}
	if inv.Expired(now) || !inv.Expired(now.Add(1500*time.Millisecond)) {
		t.Error("Expired is wrong before or at the deadline")
	}
	if got := inv.Remaining(now.Add(2 * time.Second)); got != -500*time.Millisecond {
		t.Errorf("Remaining(after) = %v, want -500ms", got)
	}
}

func TestOriginalOutcome(t *testing.T) {
	inv := pipeline.NewInvocation(context.Background(), nil, nil)
	inv.SetOutcome(pipeline.ErrTimeout())
	if inv.OriginalOutcome() != pipeline.ErrTimeout() {
		t.Error("OriginalOutcome() without SetOriginalOutcome should equal Outcome()")
	}
	inv.SetOriginalOutcome(pipeline.ErrCancelled())
	if inv.OriginalOutcome() != pipeline.ErrCancelled() || inv.Outcome() != pipeline.ErrTimeout() {
		t.Error("OriginalOutcome and Outcome should be kept apart")
	}
}

func TestKindAndStageNames(t *testing.T) {
	for _, k := range pipeline.Kinds() {
		if got, ok := pipeline.ParseKind(k.String()); !ok || got != k {
			t.Errorf("ParseKind(%q) = %v, %v", k.String(), got, ok)
		}
	}
	want := "Diagnostics Resilience Authentication Tenant Authorization Validation Handle"
	var names []string
	for _, s := range pipeline.Stages() {
		names = append(names, s.String())
	}
	if got := strings.Join(names, " "); got != want {
		t.Errorf("stages = %q, want %q", got, want)
	}
}

func TestRetryAfter(t *testing.T) {
	tests := []struct {
		name string
		v    any
		want time.Duration
		ok   bool
	}{
		{"int", 60, time.Minute, true},
		{"int64", int64(2), 2 * time.Second, true},
		{"float", 1.5, 1500 * time.Millisecond, true},
		{"duration", 3 * time.Second, 3 * time.Second, true},
		{"string", " 4 ", 4 * time.Second, true},
		{"negative", -1, 0, false},
		{"huge", 1e12, 0, false},
		{"bool", true, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := pipeline.Unavailable("C", "m").WithDetail(pipeline.DetailRetryAfter, tt.v).RetryAfter()
			if got != tt.want || ok != tt.ok {
				t.Errorf("RetryAfter(%v) = %v, %v; want %v, %v", tt.v, got, ok, tt.want, tt.ok)
			}
		})
	}
	if _, ok := pipeline.Unavailable("C", "m").RetryAfter(); ok {
		t.Error("RetryAfter() without the detail reported a delay")
	}
}

// TestTypedNilError: a nil *pipeline.Error returned as a non-nil error is an
// UNEXPECTED outcome, not a nil dereference.
func TestTypedNilError(t *testing.T) {
	var nilErr *pipeline.Error
	for _, tt := range []struct {
		name string
		err  error
	}{
		{"bare", nilErr},
		{"wrapped", fmt.Errorf("op: %w", nilErr)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := pipeline.KindOf(tt.err); got != pipeline.KindUnexpected {
				t.Errorf("KindOf(%s) = %v, want UNEXPECTED", tt.name, got)
			}
			e := pipeline.AsError(tt.err)
			if e == nil || e.Kind != pipeline.KindUnexpected || e.Code != pipeline.CodeUnexpected || e.SafeMessage() != pipeline.UnexpectedMessage {
				t.Fatalf("AsError(%s) = %#v, want the UNEXPECTED outcome", tt.name, e)
			}
			_ = e.Error()
			if got := pipeline.CodeOf(tt.err); got != pipeline.CodeUnexpected {
				t.Errorf("CodeOf(%s) = %q, want %q", tt.name, got, pipeline.CodeUnexpected)
			}
		})
	}
}
