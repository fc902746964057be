package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sundial-go/sundial/kernel/propagation"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

// op is a minimal pipeline.Operation.
type op string

func (o op) OperationID() string { return string(o) }

// myErr is a foreign error type whose Error method reads its receiver: a
// nil *myErr panics when asked for its text.
type myErr struct{ msg string }

func (e *myErr) Error() string { return e.msg }

// unwrapErr is a foreign error whose Unwrap reads its receiver.
type unwrapErr struct{ inner error }

func (e *unwrapErr) Error() string { return "unwrapErr" }
func (e *unwrapErr) Unwrap() error { return e.inner }

// panicErr is a non-pointer error whose Error method panics.
type panicErr struct{}

func (panicErr) Error() string { panic("boom") }

// myMW is a middleware with a pointer receiver that dereferences it.
type myMW struct{ name string }

func (m *myMW) Invoke(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
	_ = m.name
	return next(ctx, inv)
}

func noop(context.Context, *pipeline.Invocation) (any, error) { return nil, nil }

func TestChainOrder(t *testing.T) {
	var trace []string
	mw := func(name string) pipeline.Middleware {
		return pipeline.MiddlewareFunc(func(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
			trace = append(trace, name+">")
			out, err := next(ctx, inv)
			trace = append(trace, "<"+name)
			return out, err
		})
	}
	h := pipeline.Chain(func(context.Context, *pipeline.Invocation) (any, error) {
		trace = append(trace, "handler")
		return "result", nil
	}, mw("a"), nil, mw("b"), (*myMW)(nil), mw("c"))
	for i := range 2 { // the composed chain is reused
		trace = trace[:0]
		out, err := h(context.Background(), pipeline.NewInvocation(pipeline.Spec{}))
		if err != nil || out != "result" {
			t.Fatalf("call %d: = %v, %v; want result, nil", i, out, err)
		}
		got := strings.Join(trace, " ")
		if want := "a> b> c> handler <c <b <a"; got != want {
			t.Errorf("call %d: order = %q, want %q", i, got, want)
		}
	}
}

func TestChainWithoutMiddleware(t *testing.T) {
	h := pipeline.Chain(func(context.Context, *pipeline.Invocation) (any, error) { return 7, nil })
	if out, err := h(context.Background(), nil); out != 7 || err != nil {
		t.Errorf("Chain(terminal)() = %v, %v; want 7, nil", out, err)
	}
}

// TestChainSkipsTypedNilMiddleware: a nil pointer held in a Middleware
// interface is skipped, not called (its Invoke would dereference it).
func TestChainSkipsTypedNilMiddleware(t *testing.T) {
	var nilFunc pipeline.MiddlewareFunc
	h := pipeline.Chain(func(context.Context, *pipeline.Invocation) (any, error) { return "ran", nil },
		(*myMW)(nil), nilFunc, nil, &myMW{name: "real"})
	out, err := h(context.Background(), pipeline.NewInvocation(pipeline.Spec{}))
	if out != "ran" || err != nil {
		t.Errorf("chain with typed-nil middleware = %v, %v; want ran, nil", out, err)
	}
}

// TestChainContextAndOutcome: the context a middleware passes on is the
// one the handler sees; a middleware may replace the outcome or reject the
// invocation without calling next.
func TestChainContextAndOutcome(t *testing.T) {
	type key struct{}
	withValue := pipeline.MiddlewareFunc(func(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
		return next(context.WithValue(ctx, key{}, "v"), inv)
	})
	replace := pipeline.MiddlewareFunc(func(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
		out, err := next(ctx, inv)
		if pipelinetest.KindOf(err) == pipeline.KindNotFound {
			return nil, pipelinetest.WithCause(pipeline.NewError(pipeline.KindConflict, "X_CONFLICT_001", "replaced"), err)
		}
		return out, err
	})
	var seen any
	h := pipeline.Chain(func(ctx context.Context, _ *pipeline.Invocation) (any, error) {
		seen = ctx.Value(key{})
		return nil, pipeline.NewError(pipeline.KindNotFound, "X_NOT_FOUND_001", "no")
	}, replace, withValue)
	_, err := h(context.Background(), nil)
	if seen != "v" {
		t.Errorf("handler saw ctx value %v, want v", seen)
	}
	if pipelinetest.CodeOf(err) != "X_CONFLICT_001" || pipelinetest.CodeOf(errors.Unwrap(err)) != "X_NOT_FOUND_001" {
		t.Errorf("outcome = %v, want the replacement wrapping the original", err)
	}

	called := false
	reject := pipeline.MiddlewareFunc(func(context.Context, *pipeline.Invocation, pipeline.Handler) (any, error) {
		return nil, pipeline.NewError(pipeline.KindUnavailable, "X_UNAVAILABLE_001", "no")
	})
	h = pipeline.Chain(func(context.Context, *pipeline.Invocation) (any, error) { called = true; return nil, nil }, reject)
	if _, err := h(context.Background(), nil); called || pipelinetest.KindOf(err) != pipeline.KindUnavailable {
		t.Errorf("rejecting middleware: handler called = %v, outcome = %v", called, err)
	}
}

func TestChainAllocatesNothingPerCall(t *testing.T) {
	pass := pipeline.MiddlewareFunc(func(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
		return next(ctx, inv)
	})
	h := pipeline.Chain(noop, pass, (*myMW)(nil), pass, nil, &myMW{name: "m"}, pass)
	inv := pipeline.NewInvocation(pipeline.Spec{Operation: op("a.b")})
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() { _, _ = h(ctx, inv) }); n != 0 {
		t.Errorf("AllocsPerRun(chain of 4 with skipped typed nils) = %v, want 0", n)
	}
}

func TestPanicErrorNil(t *testing.T) {
	if got := (*pipeline.PanicError)(nil).Error(); got != "panic" {
		t.Errorf("(*PanicError)(nil).Error() = %q, want panic", got)
	}
}

func TestKindOf(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want pipeline.Kind
	}{
		{"nil", nil, pipeline.KindOK},
		{"coded", pipeline.NewError(pipeline.KindNotFound, "X_NOT_FOUND_001", "no"), pipeline.KindNotFound},
		{"wrapped coded", fmt.Errorf("ctx: %w", pipeline.NewError(pipeline.KindConflict, "X_CONFLICT_001", "no")), pipeline.KindConflict},
		{"deadline", context.DeadlineExceeded, pipeline.KindTimeout},
		{"wrapped deadline", fmt.Errorf("dial: %w", context.DeadlineExceeded), pipeline.KindTimeout},
		{"canceled", context.Canceled, pipeline.KindCanceled},
		{"foreign", errors.New("boom"), pipeline.KindUnexpected},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := pipelinetest.KindOf(tt.err); got != tt.want {
				t.Errorf("KindOf(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

func TestConstructorKinds(t *testing.T) {
	tests := []struct {
		e    *pipeline.Error
		want pipeline.Kind
	}{
		{pipeline.NewError(pipeline.KindValidation, "C", "m"), pipeline.KindValidation},
		{pipeline.NewError(pipeline.KindNotFound, "C", "m"), pipeline.KindNotFound},
		{pipeline.NewError(pipeline.KindConflict, "C", "m"), pipeline.KindConflict},
		{pipeline.NewError(pipeline.KindForbidden, "C", "m"), pipeline.KindForbidden},
		{pipeline.NewError(pipeline.KindUnauthenticated, "C", "m"), pipeline.KindUnauthenticated},
		{pipeline.NewError(pipeline.KindUnavailable, "C", "m"), pipeline.KindUnavailable},
		{pipeline.NewError(pipeline.KindTimeout, "C", "m"), pipeline.KindTimeout},
		{pipeline.NewError(pipeline.KindCanceled, "C", "m"), pipeline.KindCanceled},
		{pipeline.NewError(pipeline.KindConflict, "C", fmt.Sprintf("m %d", 1)), pipeline.KindConflict},
		{pipeline.Wrap(pipeline.KindForbidden, "C", "m", errors.New("x")), pipeline.KindForbidden},
	}
	for _, tt := range tests {
		if tt.e.Kind() != tt.want || tt.e.Code() != "C" {
			t.Errorf("%v: kind %v, code %q; want %v, C", tt.e, tt.e.Kind(), tt.e.Code(), tt.want)
		}
	}
	if got := pipeline.NewError(pipeline.KindConflict, "C", fmt.Sprintf("m %d", 1)).Message(); got != "m 1" {
		t.Errorf("Errorf message = %q, want m 1", got)
	}
}

func TestErrorText(t *testing.T) {
	cause := errors.New("pq: connection refused")
	e := pipeline.Wrap(pipeline.KindUnavailable, "X_UNAVAILABLE_001", "db down", cause)
	if got, want := e.Error(), "X_UNAVAILABLE_001: db down: pq: connection refused"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if got, want := pipeline.NewError(pipeline.KindNotFound, "X_NOT_FOUND_001", "no").Error(), "X_NOT_FOUND_001: no"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(e, cause) || e.Unwrap() != cause {
		t.Error("the cause is not visible to errors.Is / Unwrap")
	}
	var nilMy *myErr
	tests := []struct {
		name string
		err  error
		want string // "" means: any text, just no panic
	}{
		{"nil", nil, ""},
		{"plain", errors.New("x"), "x"},
		{"typed nil", nilMy, "*pipeline_test.myErr (its Error method panicked)"},
		{"panicking value", panicErr{}, "pipeline_test.panicErr (its Error method panicked)"},
		{"nil *Error", (*pipeline.Error)(nil), pipeline.CodeUnexpected + ": " + pipeline.UnexpectedMessage},
		{"wrapping a typed nil", pipeline.Wrap(pipeline.KindUnavailable, "C", "m", nilMy), "C: m: *pipeline_test.myErr (its Error method panicked)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := pipeline.ErrorText(tt.err); got != tt.want {
				t.Errorf("ErrorText = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestAsErrorNeverOverwritesACode(t *testing.T) {
	orig := pipeline.NewError(pipeline.KindUnavailable, "SHOP_UNAVAILABLE_001", "down").WithDetail("id", "billing.charge")
	if got := pipeline.AsError(orig); got != orig {
		t.Errorf("AsError(coded) = %v, want the same *Error", got)
	}
	if got := pipeline.AsError(fmt.Errorf("wrapped: %w", orig)); got != orig {
		t.Errorf("AsError(wrapped coded) = %v, want the original *Error", got)
	}
	if got := pipeline.AsError(nil); got != nil {
		t.Errorf("AsError(nil) = %v, want nil", got)
	}
	if got := pipelinetest.CodeOf(nil); got != "" {
		t.Errorf("CodeOf(nil) = %q, want empty", got)
	}
	raw := errors.New("pq: connection refused to 10.0.0.5")
	foreign := pipeline.AsError(raw)
	if foreign.Kind() != pipeline.KindUnexpected || strings.Contains(foreign.Message(), "10.0.0.5") || !errors.Is(foreign, raw) {
		t.Errorf("AsError(foreign) = %v %q, want UNEXPECTED with a generic message wrapping the error", foreign.Kind(), foreign.Message())
	}
	for _, tt := range []struct {
		err  error
		code string
	}{
		{context.Canceled, pipeline.CodeCanceled},
		{context.DeadlineExceeded, pipeline.CodeTimeout},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), pipeline.CodeTimeout},
	} {
		e := pipeline.AsError(tt.err)
		if e.Code() != tt.code || !errors.Is(e, tt.err) {
			t.Errorf("AsError(%v) = %v, want %s wrapping it", tt.err, e, tt.code)
		}
	}
	if pipeline.ErrTimeout().Unwrap() != nil || pipeline.ErrCanceled().Unwrap() != nil {
		t.Error("AsError of a context error changed ErrTimeout()/ErrCanceled()")
	}
	if pipeline.CodeCanceled != "KERNEL_CANCELLED_001" {
		t.Errorf("CodeCanceled = %q, want the wire spelling KERNEL_CANCELLED_001", pipeline.CodeCanceled)
	}
}

// TestErrorWithMethodsCopy: WithDetail, WithCause and WithRetryAfter
// return changed copies and leave their receiver alone.
func TestErrorWithMethodsCopy(t *testing.T) {
	base := pipeline.NewError(pipeline.KindUnavailable, "C", "m")
	a := base.WithDetail("a", 1)
	b := a.WithDetail("b", 2)
	a2 := a.WithDetail("a", "replaced")
	if base.Details() != nil || len(a.Details()) != 1 || len(b.Details()) != 2 {
		t.Errorf("WithDetail mutated its receiver: base=%v a=%v b=%v", base.Details(), a.Details(), b.Details())
	}
	if v, _ := a.Details()["a"]; v != 1 {
		t.Errorf("a.Details()[a] = %v after a2 replaced it, want 1", v)
	}
	if v, _ := a2.Details()["a"]; v != "replaced" {
		t.Errorf("a2.Details()[a] = %v, want replaced", v)
	}
	if _, found := b.Details()["missing"]; found {
		t.Error("Detail(missing) reported a value")
	}

	cause := errors.New("cause")
	c := pipelinetest.WithCause(b, cause)
	if b.Unwrap() != nil || c.Unwrap() != cause || len(c.Details()) != 2 || c.Code() != "C" || c.Kind() != pipeline.KindUnavailable {
		t.Errorf("WithCause: receiver cause %v, copy %v", b.Unwrap(), c)
	}

	r := c.WithRetryAfter(3 * time.Second)
	if _, has := c.RetryAfter(); has {
		t.Error("WithRetryAfter changed its receiver")
	}
	if d, has := r.RetryAfter(); !has || d != 3*time.Second || r.Unwrap() != cause || len(r.Details()) != 2 {
		t.Errorf("WithRetryAfter copy = %v, %v (cause %v, details %v)", d, has, r.Unwrap(), r.Details())
	}
	if _, has := r.WithRetryAfter(-time.Second).RetryAfter(); has {
		t.Error("WithRetryAfter(negative) kept a retry-after")
	}
	if _, has := r.RetryAfter(); !has {
		t.Error("WithRetryAfter(negative) changed its receiver")
	}
}

// TestDetailsReturnsACopy: changing the map Details returns leaves the
// Error alone.
func TestDetailsReturnsACopy(t *testing.T) {
	e := pipeline.NewError(pipeline.KindConflict, "C", "m").WithDetail("id", "x")
	d := e.Details()
	d["id"] = "changed"
	d["new"] = true
	if got := e.Details(); len(got) != 1 || got["id"] != "x" {
		t.Errorf("Details() after mutating copies = %v, want map[id:x]", got)
	}
	if v, _ := e.Details()["id"]; v != "x" {
		t.Errorf("Detail(id) = %v, want x", v)
	}
}

// TestSentinelsCannotBeChanged: ErrTimeout and ErrCanceled are shared, and
// nothing anyone does through their methods changes them.
func TestSentinelsCannotBeChanged(t *testing.T) {
	for _, tt := range []struct {
		get  func() *pipeline.Error
		kind pipeline.Kind
		code string
	}{
		{pipeline.ErrTimeout, pipeline.KindTimeout, pipeline.CodeTimeout},
		{pipeline.ErrCanceled, pipeline.KindCanceled, pipeline.CodeCanceled},
	} {
		e := tt.get()
		msg := e.Message()
		_ = pipelinetest.WithCause(e.WithDetail("id", "x"), errors.New("c")).WithRetryAfter(time.Second)
		if d := e.Details(); d != nil {
			d["id"] = "x"
		}
		_ = pipeline.AsError(fmt.Errorf("w: %w", context.DeadlineExceeded))
		_ = pipeline.AsError(context.Canceled)
		got := tt.get()
		if got != e {
			t.Errorf("%s: not the same value on each call", tt.code)
		}
		if got.Kind() != tt.kind || got.Code() != tt.code || got.Message() != msg ||
			got.Details() != nil || got.Unwrap() != nil {
			t.Errorf("%s changed: %v details=%v cause=%v", tt.code, got, got.Details(), got.Unwrap())
		}
		if _, has := got.RetryAfter(); has {
			t.Errorf("%s gained a retry-after", tt.code)
		}
	}
}

func TestErrorConcurrentUse(t *testing.T) {
	e := pipeline.NewError(pipeline.KindUnavailable, "C", "m").WithDetail("id", "x")
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			c := e.WithDetail("n", i).WithRetryAfter(time.Duration(i) * time.Second)
			d := e.Details()
			d["n"] = i
			_, _ = c.Details()["n"]
			_ = e.Error()
		})
	}
	wg.Wait()
	if len(e.Details()) != 1 {
		t.Errorf("Details() = %v after concurrent use, want map[id:x]", e.Details())
	}
}

// TestForeignTypedNil: a nil pointer of any error type returned as a
// non-nil error is an UNEXPECTED outcome, bare or wrapped, and never a
// panic.
func TestForeignTypedNil(t *testing.T) {
	var nilMy *myErr
	var nilUnwrap *unwrapErr
	var nilErr *pipeline.Error
	tests := []struct {
		name string
		err  error
	}{
		{"nil *myErr", nilMy},
		{"wrapped nil *myErr", fmt.Errorf("op: %w", nilMy)},
		{"twice wrapped nil *myErr", fmt.Errorf("a: %w", fmt.Errorf("b: %w", nilMy))},
		{"nil *unwrapErr", nilUnwrap},
		{"wrapped nil *unwrapErr", fmt.Errorf("op: %w", nilUnwrap)},
		{"joined nil *myErr", errors.Join(errors.New("x"), nilMy)},
		{"nil *Error", nilErr},
		{"wrapped nil *Error", fmt.Errorf("op: %w", nilErr)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := pipelinetest.KindOf(tt.err); got != pipeline.KindUnexpected {
				t.Errorf("KindOf = %v, want UNEXPECTED", got)
			}
			e := pipeline.AsError(tt.err)
			if e == nil || e.Kind() != pipeline.KindUnexpected || e.Code() != pipeline.CodeUnexpected {
				t.Fatalf("AsError = %#v, want the UNEXPECTED outcome", e)
			}
			if got := pipelinetest.CodeOf(tt.err); got != pipeline.CodeUnexpected {
				t.Errorf("CodeOf = %q, want %q", got, pipeline.CodeUnexpected)
			}
			_ = pipeline.ErrorText(tt.err)
			_ = pipeline.ErrorText(e)
			_ = e.Error()
		})
	}
}

// TestUnknownKind: a kind outside the table (or KindOK) makes an UNEXPECTED
// error, which shows callers nothing of its message and details.
func TestUnknownKind(t *testing.T) {
	for _, k := range []pipeline.Kind{pipeline.KindOK, pipeline.Kind(42), pipeline.Kind(255)} {
		for _, e := range []*pipeline.Error{
			pipeline.NewError(k, "X_001", "secret text").WithDetail("host", "10.0.0.5"),
			pipeline.NewError(k, "X_001", fmt.Sprintf("secret %s", "text")).WithDetail("host", "10.0.0.5"),
			pipeline.Wrap(k, "X_001", "secret text", errors.New("c")).WithDetail("host", "10.0.0.5"),
		} {
			if e.Kind() != pipeline.KindUnexpected || pipelinetest.KindOf(e) != pipeline.KindUnexpected {
				t.Errorf("kind %d: Kind() = %v, want UNEXPECTED", k, e.Kind())
			}
			if e.Code() != "X_001" {
				t.Errorf("kind %d: Code() = %q, want X_001", k, e.Code())
			}
		}
	}
	if got := pipeline.Kind(42).String(); got != "UNEXPECTED" {
		t.Errorf("Kind(42).String() = %q, want UNEXPECTED", got)
	}
}

func TestNilError(t *testing.T) {
	var e *pipeline.Error
	if e.Kind() != pipeline.KindUnexpected || e.Code() != pipeline.CodeUnexpected ||
		e.Message() != pipeline.UnexpectedMessage || e.Details() != nil || e.Unwrap() != nil {
		t.Errorf("nil *Error getters: %v %q %q", e.Kind(), e.Code(), e.Message())
	}
	if _, found := e.Details()["x"]; found {
		t.Error("nil *Error has a detail")
	}
	if _, has := e.RetryAfter(); has {
		t.Error("nil *Error has a retry-after")
	}
	if _, has := pipelinetest.RetryAfterSeconds(e); has {
		t.Error("nil *Error has a retry-after in seconds")
	}
}

func TestRetryAfter(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want int64
	}{
		{0, 1},
		{200 * time.Millisecond, 1},
		{time.Second, 1},
		{time.Second + time.Nanosecond, 2},
		{1200 * time.Millisecond, 2},
		{2 * time.Second, 2},
		{59 * time.Second, 59},
		{59*time.Second + 100*time.Millisecond, 60},
		{time.Hour, 3600},
	}
	for _, tt := range tests {
		t.Run(tt.d.String(), func(t *testing.T) {
			e := pipeline.NewError(pipeline.KindUnavailable, "C", "m").WithRetryAfter(tt.d)
			if d, has := e.RetryAfter(); !has || d != tt.d {
				t.Errorf("RetryAfter() = %v, %v; want %v, true", d, has, tt.d)
			}
			if s, has := pipelinetest.RetryAfterSeconds(e); !has || s != tt.want {
				t.Errorf("RetryAfterSeconds() = %v, %v; want %v, true", s, has, tt.want)
			}
		})
	}
	e := pipeline.NewError(pipeline.KindUnavailable, "C", "m")
	if _, has := e.RetryAfter(); has {
		t.Error("RetryAfter() without WithRetryAfter reported a delay")
	}
	if _, has := pipelinetest.RetryAfterSeconds(e); has {
		t.Error("RetryAfterSeconds() without WithRetryAfter reported a delay")
	}
	// The retry-after is not a detail.
	r := e.WithRetryAfter(time.Minute)
	if _, found := r.Details()[pipelinetest.DetailRetryAfter]; found || r.Details() != nil {
		t.Errorf("WithRetryAfter wrote a detail: %v", r.Details())
	}
	// A detail named retryAfter is not a retry-after.
	if _, has := e.WithDetail(pipelinetest.DetailRetryAfter, 60).RetryAfter(); has {
		t.Error("a retryAfter detail became a retry-after")
	}
}

func TestNilInvocation(t *testing.T) {
	var inv *pipeline.Invocation
	if inv.Operation() != nil || inv.OperationID() != "" || inv.Route() != "" || inv.Name() != "" ||
		inv.Protocol() != pipeline.ProtocolInProcess || inv.Input() != nil || inv.IdempotencyKey() != "" ||
		inv.Timing().Source != pipeline.DeadlineNone {
		t.Error("a nil *Invocation reports facts")
	}
	if _, has := inv.Deadline(); has {
		t.Error("nil *Invocation has a deadline")
	}
	if _, has := pipelinetest.CallerDeadline(inv); has {
		t.Error("nil *Invocation has a caller deadline")
	}
	if _, found := inv.Baggage("k"); found {
		t.Error("nil *Invocation has baggage")
	}
	inv.RangeBaggage(func(string, string) bool { t.Error("RangeBaggage called f on a nil *Invocation"); return true })
}

func TestNewInvocation(t *testing.T) {
	zone := time.FixedZone("X", 3600)
	caller := time.Date(2026, 12, 2, 13, 0, 5, 0, zone)
	eff := time.Date(2026, 12, 2, 13, 0, 2, 0, zone)
	in := &struct{ N int }{1}
	inv := pipeline.NewInvocation(pipeline.Spec{
		Operation:      op("orders.get"),
		Protocol:       pipeline.ProtocolGRPC,
		Route:          "/shop.Orders/Get",
		Input:          in,
		CallerDeadline: caller,
		Deadline:       eff,
		DeadlineSource: pipeline.DeadlineOperation,
		Baggage:        map[string]string{"tenant": "acme", propagation.BaggageIdempotencyKey: "from-baggage"},
		IdempotencyKey: "explicit",
	})
	if inv.OperationID() != "orders.get" || inv.Name() != "orders.get" || inv.Operation() != op("orders.get") {
		t.Errorf("operation = %v / %q / %q", inv.Operation(), inv.OperationID(), inv.Name())
	}
	if inv.Protocol() != pipeline.ProtocolGRPC || inv.Route() != "/shop.Orders/Get" || inv.Input() != in {
		t.Errorf("protocol %v, route %q, input %v", inv.Protocol(), inv.Route(), inv.Input())
	}
	d, has := inv.Deadline()
	if !has || d != eff {
		t.Errorf("Deadline() = %v, %v; want %v as given", d, has, eff)
	}
	c, has := pipelinetest.CallerDeadline(inv)
	if !has || c != caller {
		t.Errorf("CallerDeadline() = %v, %v; want %v as given", c, has, caller)
	}
	if inv.Timing().Source != pipeline.DeadlineOperation {
		t.Errorf("DeadlineSource() = %v, want operation", inv.Timing().Source)
	}
	if v, found := inv.Baggage("tenant"); !found || v != "acme" {
		t.Errorf("Baggage(tenant) = %q, %v", v, found)
	}
	if inv.IdempotencyKey() != "explicit" {
		t.Errorf("IdempotencyKey() = %q, want the explicit key over the baggage's", inv.IdempotencyKey())
	}
	n := 0
	inv.RangeBaggage(func(string, string) bool { n++; return false })
	if n != 1 {
		t.Errorf("RangeBaggage called f %d times after it returned false, want 1", n)
	}
	all := map[string]string{}
	inv.RangeBaggage(func(k, v string) bool { all[k] = v; return true })
	if len(all) != 2 {
		t.Errorf("RangeBaggage saw %v, want both members", all)
	}

	// Only a deadline: the caller's.
	only := pipeline.NewInvocation(pipeline.Spec{Deadline: eff, Route: "GET /healthz"})
	if only.Timing().Source != pipeline.DeadlineCaller {
		t.Errorf("DeadlineSource() with only Deadline = %v, want caller", only.Timing().Source)
	}
	if _, has := pipelinetest.CallerDeadline(only); has {
		t.Error("CallerDeadline() reports one that was not given")
	}
	if only.Name() != "GET /healthz" || only.OperationID() != "" || only.Operation() != nil {
		t.Errorf("host endpoint: Name %q, OperationID %q", only.Name(), only.OperationID())
	}

	// No deadline: no source, whatever the Spec says.
	none := pipeline.NewInvocation(pipeline.Spec{DeadlineSource: pipeline.DeadlineKernel, CallerDeadline: caller})
	if _, has := none.Deadline(); has || none.Timing().Source != pipeline.DeadlineNone {
		t.Errorf("no Deadline: has %v, source %v; want none", has, none.Timing().Source)
	}
}

func TestInvocationDeadline(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	inv := pipeline.NewInvocation(pipeline.Spec{})
	if _, ok := inv.Deadline(); ok {
		t.Error("Deadline() reports one that was not given")
	}
	inv = pipeline.NewInvocation(pipeline.Spec{Deadline: now.Add(1500 * time.Millisecond).In(time.FixedZone("X", 3600))})
	if d, _ := inv.Deadline(); !d.Equal(now.Add(1500 * time.Millisecond)) {
		t.Errorf("Deadline() = %v, want now+1.5s", d)
	}
	// A deadline computed from the clock keeps its monotonic reading: a
	// wall-clock step does not move it.
	mono := time.Now().Add(time.Hour)
	if d, _ := pipeline.NewInvocation(pipeline.Spec{Deadline: mono}).Deadline(); d != mono || d.String() != mono.String() {
		t.Errorf("Deadline() = %v, want %v with its monotonic reading", d, mono)
	}
	if d, _ := inv.Deadline(); d.Sub(now) != 1500*time.Millisecond {
		t.Errorf("Deadline()-now = %v, want 1.5s", d.Sub(now))
	}
}

func TestInvocationConcurrentReads(t *testing.T) {
	inv := pipeline.NewInvocation(pipeline.Spec{Operation: op("a.b"), Deadline: time.Now().Add(time.Minute),
		Baggage: map[string]string{"k": "v"}})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			_, _ = inv.Deadline()
			_, _ = inv.Baggage("k")
			inv.RangeBaggage(func(string, string) bool { return true })
			_ = inv.Name() + inv.IdempotencyKey()
		})
	}
	wg.Wait()
}

func TestNames(t *testing.T) {
	for _, k := range pipelinetest.Kinds() {
		if got, ok := pipelinetest.ParseKind(k.String()); !ok || got != k {
			t.Errorf("ParseKind(%q) = %v, %v", k.String(), got, ok)
		}
	}
	if pipeline.KindCanceled.String() != "CANCELLED" {
		t.Errorf("KindCanceled.String() = %q, want the wire name CANCELLED", pipeline.KindCanceled)
	}
	if _, ok := pipelinetest.ParseKind("CANCELED"); ok {
		t.Error(`ParseKind("CANCELED") succeeded; the wire name is CANCELLED`)
	}
	want := "Diagnostics Resilience Authentication Tenant Authorization Validation Handle"
	var names []string
	for _, s := range pipelinetest.Stages() {
		names = append(names, s.String())
	}
	if got := strings.Join(names, " "); got != want {
		t.Errorf("stages = %q, want %q", got, want)
	}
	if slices.Contains(pipelinetest.Stages(), pipeline.Stage(99)) || pipeline.Stage(99).String() != "Stage(invalid)" {
		t.Error("Stage(99) is valid or has a name")
	}
	protocols := map[pipeline.Protocol]string{pipeline.ProtocolInProcess: "inprocess", pipeline.ProtocolHTTP: "http",
		pipeline.ProtocolGRPC: "grpc", pipeline.ProtocolCLI: "cli", pipeline.ProtocolMCP: "mcp"}
	for p, s := range protocols {
		if p.String() != s {
			t.Errorf("Protocol(%d).String() = %q, want %q", p, p.String(), s)
		}
	}
	sources := map[pipeline.DeadlineSource]string{pipeline.DeadlineNone: "none", pipeline.DeadlineCaller: "caller",
		pipeline.DeadlineOperation: "operation", pipeline.DeadlineKernel: "kernel"}
	for s, name := range sources {
		if s.String() != name {
			t.Errorf("DeadlineSource(%d).String() = %q, want %q", s, s.String(), name)
		}
	}
}

// isReader is a foreign error whose Is method reads its receiver.
type isReader struct{ target error }

func (e *isReader) Error() string        { return "isReader" }
func (e *isReader) Is(target error) bool { return e.target == target }

// TestForeignMethodsThatPanic: an error whose Is method panics on a nil
// receiver, wrapped, is UNEXPECTED for KindOf, AsError and CodeOf, never
// a panic.
func TestForeignMethodsThatPanic(t *testing.T) {
	err := fmt.Errorf("x: %w", (*isReader)(nil))
	if got := pipelinetest.KindOf(err); got != pipeline.KindUnexpected {
		t.Errorf("KindOf = %v, want UNEXPECTED", got)
	}
	if e := pipeline.AsError(err); e == nil || e.Kind() != pipeline.KindUnexpected || e.Code() != pipeline.CodeUnexpected {
		t.Errorf("AsError = %v, want UNEXPECTED", e)
	}
	_ = pipeline.ErrorText(err)
}

// TestZeroError: an Error not made by a constructor — the zero value —
// reads as UNEXPECTED with no retry-after, never as a success.
func TestZeroError(t *testing.T) {
	for name, e := range map[string]*pipeline.Error{"new": new(pipeline.Error), "literal": {}} {
		if e.Kind() != pipeline.KindUnexpected || e.Code() != pipeline.CodeUnexpected {
			t.Errorf("%s: Kind %v, Code %q; want the UNEXPECTED outcome", name, e.Kind(), e.Code())
		}
		if _, ok := e.RetryAfter(); ok {
			t.Errorf("%s: RetryAfter reports one", name)
		}
		if got := pipelinetest.KindOf(e); got != pipeline.KindUnexpected {
			t.Errorf("%s: KindOf = %v, want UNEXPECTED", name, got)
		}
	}
}
