package resilience_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/resilience/deadline"
)

const opID = "orders.create"

type op string

func (o op) OperationID() string { return string(o) }

// limitStack builds the built-in Resilience stage for one operation around
// h, as the kernel does: the deadline middleware with the operation's limits
// (WithLimits); panics become UNEXPECTED outside it. The returned handler
// stands for the kernel too: an invocation without a deadline gets the
// effective one computed from the caller's context and the policy's
// Timeout (see withDeadline). (TestWithLimitsMatchesTheChain compares it
// with the plain chain of the two.)
func limitStack(t *testing.T, p resilience.Policy, h pipeline.Handler, inner ...pipeline.Middleware) (pipeline.Handler, *resilience.Limits) {
	t.Helper()
	l := resilience.NewLimits(opID, p)
	mws := append([]pipeline.Middleware{l}, inner...)
	chain := pipelinetest.Recover(pipeline.Chain(pipelinetest.Recover(h), mws...))
	return func(ctx context.Context, inv *pipeline.Invocation) (any, error) {
		return chain(ctx, withDeadline(ctx, inv, p.Timeout))
	}, l
}

// withDeadline returns inv with the effective deadline the kernel would
// give it — the earliest of the caller's (ctx's deadline) and now +
// timeout, with its source — or inv itself when it has a deadline already
// or there is none.
func withDeadline(ctx context.Context, inv *pipeline.Invocation, timeout time.Duration) *pipeline.Invocation {
	if _, ok := inv.Deadline(); ok {
		return inv
	}
	s := pipeline.Spec{Operation: inv.Operation(), Input: inv.Input(), Priority: inv.Priority()}
	if d, ok := ctx.Deadline(); ok {
		s.CallerDeadline, s.Deadline, s.DeadlineSource = d, d, pipeline.DeadlineCaller
	}
	if timeout > 0 {
		if d := time.Now().Add(timeout); s.Deadline.IsZero() || d.Before(s.Deadline) {
			s.Deadline, s.DeadlineSource = d, pipeline.DeadlineOperation
		}
	}
	if s.Deadline.IsZero() {
		return inv
	}
	return pipeline.NewInvocation(s)
}

// newInv returns an invocation of the operation with input.
func newInv(input any) *pipeline.Invocation {
	return pipeline.NewInvocation(pipeline.Spec{Operation: op(opID), Input: input})
}

func callLimited(ctx context.Context, h pipeline.Handler) error {
	_, err := h(ctx, newInv(nil))
	return err
}

// goLimited calls h in a goroutine; the outcome arrives on the channel.
func goLimited(ctx context.Context, h pipeline.Handler) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- callLimited(ctx, h) }()
	return ch
}

func okHandler(context.Context, *pipeline.Invocation) (any, error) { return nil, nil }

// wantCode fails unless err has the code (""; success).
func expectCode(t *testing.T, what string, err error, code string) {
	t.Helper()
	if got := pipelinetest.CodeOf(err); got != code {
		t.Fatalf("%s: outcome %v (code %q), want code %q", what, err, got, code)
	}
}

func TestNewLimitsEmptyPolicyIsUsable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		p    resilience.Policy
	}{
		{"zero policy", resilience.Policy{}},
		{"defaults and a timeout only", resilience.Policy{Window: time.Second, BreakDuration: 30 * time.Second, QueueLimit: 3, ConcurrencyQueueLimit: 2, Timeout: time.Second}},
	}
	for _, tt := range tests {
		l := resilience.NewLimits(opID, tt.p)
		if l == nil {
			t.Fatalf("%s: NewLimits = nil, want a pass-through middleware", tt.name)
		}
		if l.ID() != opID || l.State().Breaker != resilience.BreakerClosed || l.State().InFlight != 0 {
			t.Errorf("%s: ID, BreakerState, InFlight = %q, %v, %d; want %q, closed, 0", tt.name, l.ID(), l.State().Breaker, l.State().InFlight, opID)
		}
		// Usable on its own, in a chain, and inside the deadline middleware.
		for name, h := range map[string]pipeline.Handler{
			"Chain":       pipeline.Chain(okResult, l),
			"WithLimits":  pipeline.Chain(okResult, l),
			"both chains": pipeline.Chain(okResult, deadline.Middleware(), l),
		} {
			for range 3 {
				if out, err := h(context.Background(), newInv(nil)); out != "ok" || err != nil {
					t.Errorf("%s: %s(call) = %v, %v; want ok, nil", tt.name, name, out, err)
				}
			}
		}
	}
	var l *resilience.Limits
	if l.State().Breaker != resilience.BreakerClosed || l.State().RateQueue != 0 || l.State().ConcurrencyQueue != 0 || l.State().InFlight != 0 || l.ID() != "" || l.Policy() != (resilience.Policy{}) {
		t.Errorf("nil *Limits does not report an idle, closed state")
	}
	if h := pipeline.Chain(okResult, (*resilience.Limits)(nil)); true {
		if out, err := h(context.Background(), newInv(nil)); out != "ok" || err != nil {
			t.Errorf("WithLimits(nil): call = %v, %v; want ok, nil", out, err)
		}
	}
}

func okResult(context.Context, *pipeline.Invocation) (any, error) { return "ok", nil }

func TestRateLimitRejection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reached := 0
		h, l := limitStack(t, resilience.Policy{PermitLimit: 2, Window: 60 * time.Second}, func(context.Context, *pipeline.Invocation) (any, error) {
			reached++
			return nil, nil
		})
		expectCode(t, "call 1", callLimited(t.Context(), h), "")
		expectCode(t, "call 2", callLimited(t.Context(), h), "")
		time.Sleep(500 * time.Millisecond)
		err := callLimited(t.Context(), h)
		expectCode(t, "call 3", err, resilience.CodeRateLimited)
		if reached != 2 {
			t.Errorf("handler ran %d times, want 2 (a rejection never reaches it)", reached)
		}
		var pe *pipeline.Error
		errors.As(err, &pe)
		if pe.Kind() != pipeline.KindUnavailable {
			t.Errorf("rejection kind = %v, want UNAVAILABLE", pe.Kind())
		}
		if want := "Operation 'orders.create' is rate limited; retry after 60 seconds."; pe.Message() != want {
			t.Errorf("rejection message = %q, want %q", pe.Message(), want)
		}
		if id, _ := pe.Details()["id"]; id != opID {
			t.Errorf("details.id = %v, want %q", id, opID)
		}
		if ra, _ := pipelinetest.RetryAfterSeconds(pe); ra != 60 { // 59.5 s rounded up
			t.Errorf("details.retryAfter = %v (%T), want 60", ra, ra)
		}
		time.Sleep(59 * time.Second)
		if ra, _ := pipelinetest.RetryAfterSeconds(pipeline.AsError(callLimited(t.Context(), h))); ra != 1 { // 0.5 s rounded up
			t.Errorf("retryAfter half a second before the window = %v, want 1", ra)
		}
		time.Sleep(500 * time.Millisecond)
		expectCode(t, "first call of the next window", callLimited(t.Context(), h), "")
		if l.State().RateQueue != 0 {
			t.Errorf("RateQueueDepth() = %d, want 0", l.State().RateQueue)
		}
	})
}

func TestRetryAfterRounding(t *testing.T) {
	t.Parallel()
	tests := []struct {
		d    time.Duration
		want int64
		msg  string
	}{
		{0, 1, "retry after 1 second."},
		{time.Nanosecond, 1, "retry after 1 second."},
		{999 * time.Millisecond, 1, "retry after 1 second."},
		{time.Second, 1, "retry after 1 second."},
		{time.Second + time.Nanosecond, 2, "retry after 2 seconds."},
		{59*time.Second + 1, 60, "retry after 60 seconds."},
		{90 * time.Minute, 5400, "retry after 5400 seconds."},
	}
	for _, tt := range tests {
		e := resilience.RateLimited(opID, tt.d)
		if ra, ok := pipelinetest.RetryAfterSeconds(e); !ok || ra != tt.want {
			t.Errorf("RateLimited(%v).RetryAfterSeconds() = %v, %v; want %d", tt.d, ra, ok, tt.want)
		}
		if _, ok := e.Details()[pipelinetest.DetailRetryAfter]; ok {
			t.Errorf("RateLimited(%v) has a retryAfter detail; the retry-after is typed", tt.d)
		}
		if want := "Operation 'orders.create' is rate limited; " + tt.msg; e.Message() != want {
			t.Errorf("RateLimited(%v).Message = %q, want %q", tt.d, e.Message(), want)
		}
	}
}

func TestRateQueueWaitsForTheNextWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var order []int
		var mu sync.Mutex
		h, l := limitStack(t, resilience.Policy{PermitLimit: 1, Window: 10 * time.Second, QueueLimit: 2}, func(ctx context.Context, inv *pipeline.Invocation) (any, error) {
			mu.Lock()
			order = append(order, inv.Input().(int))
			mu.Unlock()
			return nil, nil
		})
		run := func(n int) <-chan error {
			ch := make(chan error, 1)
			go func() { ch <- call(h, t.Context(), n) }()
			synctest.Wait()
			return ch
		}
		start := time.Now()
		expectCode(t, "call 0", <-run(0), "")
		time.Sleep(2 * time.Second)
		c1, c2 := run(1), run(2)
		if got := l.State().RateQueue; got != 2 {
			t.Fatalf("RateQueueDepth() = %d, want 2", got)
		}
		expectCode(t, "call 3 (queue full)", <-run(3), resilience.CodeRateLimited)
		expectCode(t, "call 1", <-c1, "")
		if at := time.Since(start); at != 10*time.Second {
			t.Errorf("first queued call admitted at %v, want 10s (the next window)", at)
		}
		expectCode(t, "call 2", <-c2, "")
		if at := time.Since(start); at != 20*time.Second {
			t.Errorf("second queued call admitted at %v, want 20s", at)
		}
		if fmt.Sprint(order) != "[0 1 2]" {
			t.Errorf("handler order = %v, want [0 1 2] (oldest first)", order)
		}
	})
}

func TestRateQueueRejectsCallsThatWouldTimeOutThere(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reached := 0
		h, l := limitStack(t, resilience.Policy{PermitLimit: 1, Window: 10 * time.Second, QueueLimit: 5}, func(context.Context, *pipeline.Invocation) (any, error) {
			reached++
			return nil, nil
		})
		expectCode(t, "call 1", callLimited(t.Context(), h), "")
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		start := time.Now()
		err := callLimited(ctx, h)
		expectCode(t, "call with a 5s deadline", err, resilience.CodeRateLimited)
		if waited := time.Since(start); waited != 0 {
			t.Errorf("rejected after %v, want at once", waited)
		}
		if ra, _ := pipelinetest.RetryAfterSeconds(pipeline.AsError(err)); ra != 10 {
			t.Errorf("retryAfter = %v, want 10", ra)
		}
		if reached != 1 || l.State().RateQueue != 0 {
			t.Errorf("reached %d, queue %d; want 1, 0", reached, l.State().RateQueue)
		}
	})
}

func TestRateQueueWaitCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, l := limitStack(t, resilience.Policy{PermitLimit: 1, Window: 10 * time.Second, QueueLimit: 1}, okHandler)
		expectCode(t, "call 1", callLimited(t.Context(), h), "")
		ctx, cancel := context.WithCancel(t.Context())
		ch := goLimited(ctx, h)
		synctest.Wait()
		if l.State().RateQueue != 1 {
			t.Fatalf("RateQueueDepth() = %d, want 1", l.State().RateQueue)
		}
		time.Sleep(3 * time.Second)
		cancel()
		expectCode(t, "queued call whose caller left", <-ch, pipeline.CodeCanceled)
		if l.State().RateQueue != 0 {
			t.Fatalf("after the cancel: RateQueueDepth() = %d, want 0 (place given back)", l.State().RateQueue)
		}
		// The freed place can be taken again, and its permit is used.
		ch = goLimited(t.Context(), h)
		synctest.Wait()
		expectCode(t, "next queued call", <-ch, "")
	})
}

func TestConcurrencyLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var order []int
		var mu sync.Mutex
		h, l := limitStack(t, resilience.Policy{ConcurrencyLimit: 2, ConcurrencyQueueLimit: 2}, func(ctx context.Context, inv *pipeline.Invocation) (any, error) {
			mu.Lock()
			order = append(order, inv.Input().(int))
			mu.Unlock()
			<-release
			return nil, nil
		})
		var chans []<-chan error
		for i := range 4 {
			ch := make(chan error, 1)
			go func() { ch <- call(h, t.Context(), i) }()
			synctest.Wait() // arrival order = i
			chans = append(chans, ch)
		}
		if l.State().InFlight != 2 || l.State().ConcurrencyQueue != 2 {
			t.Fatalf("InFlight, ConcurrencyQueueDepth = %d, %d; want 2, 2", l.State().InFlight, l.State().ConcurrencyQueue)
		}
		err := callLimited(t.Context(), h)
		expectCode(t, "fifth call", err, resilience.CodeConcurrencyLimited)
		pe := pipeline.AsError(err)
		if id, _ := pe.Details()["id"]; id != opID || pe.Kind() != pipeline.KindUnavailable {
			t.Errorf("rejection = %v, details %v; want UNAVAILABLE with id", pe, pe.Details())
		}
		if _, has := pe.RetryAfter(); has {
			t.Errorf("concurrency rejection has retryAfter; want none")
		}
		release <- struct{}{} // one of 0, 1 finishes; 2 starts
		synctest.Wait()
		mu.Lock()
		if fmt.Sprint(order[2:]) != "[2]" {
			t.Errorf("after one release, started %v, want [0 1 2] in some order of 0,1 then 2", order)
		}
		mu.Unlock()
		close(release)
		for i, ch := range chans {
			expectCode(t, fmt.Sprintf("call %d", i), <-ch, "")
		}
		if fmt.Sprint(order[2:]) != "[2 3]" {
			t.Errorf("queued calls started in order %v, want 2 then 3", order[2:])
		}
		if l.State().InFlight != 0 || l.State().ConcurrencyQueue != 0 {
			t.Errorf("at rest: InFlight, ConcurrencyQueueDepth = %d, %d; want 0, 0", l.State().InFlight, l.State().ConcurrencyQueue)
		}
	})
}

func TestConcurrencySlotReleasedOnEveryExitPath(t *testing.T) {
	boom := pipeline.MiddlewareFunc(func(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
		if inv.Input() == "panic in middleware" {
			panic("boom")
		}
		return next(ctx, inv)
	})
	tests := []struct {
		name  string
		input string
		ctx   func(context.Context) (context.Context, context.CancelFunc)
		code  string
	}{
		{"success", "ok", nil, ""},
		{"error", "error", nil, pipeline.CodeUnexpected},
		{"panic in handler", "panic", nil, pipeline.CodeUnexpected},
		{"panic in later middleware", "panic in middleware", nil, pipeline.CodeUnexpected},
		{"cancellation", "block", func(ctx context.Context) (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(ctx)
			go func() { time.Sleep(time.Second); cancel() }()
			return ctx, cancel
		}, pipeline.CodeCanceled},
		{"deadline", "block", func(ctx context.Context) (context.Context, context.CancelFunc) {
			return context.WithTimeout(ctx, time.Second)
		}, pipeline.CodeTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h, l := limitStack(t, resilience.Policy{ConcurrencyLimit: 1}, func(ctx context.Context, inv *pipeline.Invocation) (any, error) {
					switch inv.Input() {
					case "error":
						return nil, errors.New("db down")
					case "panic":
						panic("boom")
					case "block":
						<-ctx.Done()
						return nil, ctx.Err()
					}
					return nil, nil
				}, boom)
				ctx := t.Context()
				if tt.ctx != nil {
					var cancel context.CancelFunc
					ctx, cancel = tt.ctx(ctx)
					defer cancel()
				}
				expectCode(t, tt.name, call(h, ctx, tt.input), tt.code)
				if l.State().InFlight != 0 {
					t.Fatalf("after %s: InFlight() = %d, want 0", tt.name, l.State().InFlight)
				}
				expectCode(t, "next call", call(h, t.Context(), "ok"), "")
			})
		})
	}
}

func TestQueueWaitsEndAtDeadlineOrCancel(t *testing.T) {
	tests := []struct {
		name      string
		p         resilience.Policy
		deadline  time.Duration // of the queued call (0: none)
		cancelAt  time.Duration // 0: never
		wantCode  string
		wantEndAt time.Duration
		holder    string // the slot holder's outcome code
	}{
		{"concurrency queue, deadline", resilience.Policy{ConcurrencyLimit: 1, ConcurrencyQueueLimit: 1}, 3 * time.Second, 0, pipeline.CodeTimeout, 3 * time.Second, ""},
		{"concurrency queue, operation timeout", resilience.Policy{ConcurrencyLimit: 1, ConcurrencyQueueLimit: 1, Timeout: 4 * time.Second}, 0, 0, pipeline.CodeTimeout, 4 * time.Second, pipeline.CodeTimeout},
		{"concurrency queue, cancelled", resilience.Policy{ConcurrencyLimit: 1, ConcurrencyQueueLimit: 1}, 5 * time.Second, 2 * time.Second, pipeline.CodeCanceled, 2 * time.Second, ""},
		{"rate queue, cancelled", resilience.Policy{PermitLimit: 1, Window: time.Minute, QueueLimit: 1}, 2 * time.Minute, 2 * time.Second, pipeline.CodeCanceled, 2 * time.Second, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				hold := make(chan struct{})
				h, l := limitStack(t, tt.p, func(ctx context.Context, inv *pipeline.Invocation) (any, error) {
					if inv.Input() == "holder" {
						<-hold
					}
					return nil, nil
				})
				holder := make(chan error, 1)
				go func() { holder <- call(h, t.Context(), "holder") }()
				time.Sleep(time.Second) // the holder has started and holds the slot or permit

				ctx := t.Context()
				var cancel context.CancelFunc = func() {}
				if tt.deadline > 0 {
					ctx, cancel = context.WithTimeout(ctx, tt.deadline)
				}
				defer cancel()
				if tt.cancelAt > 0 {
					var stop context.CancelFunc
					ctx, stop = context.WithCancel(ctx)
					defer stop()
					time.AfterFunc(tt.cancelAt, stop)
				}
				start := time.Now()
				expectCode(t, "queued call", callLimited(ctx, h), tt.wantCode)
				if ended := time.Since(start); ended != tt.wantEndAt {
					t.Errorf("queued call ended after %v, want %v", ended, tt.wantEndAt)
				}
				if l.State().RateQueue != 0 || l.State().ConcurrencyQueue != 0 {
					t.Errorf("queues after the wait: %d, %d; want empty", l.State().RateQueue, l.State().ConcurrencyQueue)
				}
				close(hold)
				expectCode(t, "holder", <-holder, tt.holder)
				if l.State().InFlight != 0 {
					t.Errorf("InFlight() = %d, want 0", l.State().InFlight)
				}
			})
		})
	}
}

// expectBreaker fails unless l's breaker is in state want.
func expectBreaker(t *testing.T, when string, l *resilience.Limits, want resilience.BreakerState) {
	t.Helper()
	if got := l.State().Breaker; got != want {
		t.Fatalf("%s: BreakerState() = %v, want %v", when, got, want)
	}
}

// breakerStack is a stack with a breaker of threshold 1 and a long break;
// its handler returns whatever the invocation's input says.
func breakerStack(t *testing.T, p resilience.Policy) (pipeline.Handler, *resilience.Limits) {
	t.Helper()
	if p.FailureThreshold == 0 {
		p.FailureThreshold = 1
	}
	if p.BreakDuration == 0 {
		p.BreakDuration = 30 * time.Second
	}
	return limitStack(t, p, func(ctx context.Context, inv *pipeline.Invocation) (any, error) {
		switch in := inv.Input().(type) {
		case error:
			return nil, in
		case func(context.Context, *pipeline.Invocation) (any, error):
			return in(ctx, inv)
		case string:
			if in == "panic" {
				panic("boom")
			}
		}
		return nil, nil
	})
}

func invokeLimited(ctx context.Context, h pipeline.Handler, input any) error {
	_, err := h(ctx, newInv(input))
	return err
}

func TestBreakerFailureClassification(t *testing.T) {
	waitOwnDeadline := func(ctx context.Context, inv *pipeline.Invocation) (any, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	waitOwnDeadlineCoded := func(ctx context.Context, inv *pipeline.Invocation) (any, error) {
		<-ctx.Done()
		return nil, pipeline.ErrTimeout()
	}
	tests := []struct {
		name     string
		input    any
		timeout  time.Duration
		wantOpen bool
	}{
		{"success", nil, 0, false},
		{"VALIDATION", pipeline.NewError(pipeline.KindValidation, "SHOP_VALIDATION_001", "bad"), 0, false},
		{"NOT_FOUND", pipeline.NewError(pipeline.KindNotFound, "SHOP_NOT_FOUND_001", "no"), 0, false},
		{"FORBIDDEN", pipeline.NewError(pipeline.KindForbidden, "SHOP_FORBIDDEN_001", "no"), 0, false},
		{"UNAUTHENTICATED", pipeline.NewError(pipeline.KindUnauthenticated, "SHOP_UNAUTHENTICATED_001", "who"), 0, false},
		{"CONFLICT", pipeline.NewError(pipeline.KindConflict, "SHOP_CONFLICT_001", "exists"), 0, false},
		{"CANCELLED", pipeline.ErrCanceled(), 0, false},
		{"context.Canceled", context.Canceled, 0, false},
		{"UNAVAILABLE", pipeline.NewError(pipeline.KindUnavailable, "SHOP_UNAVAILABLE_001", "db down"), 0, true},
		{"downstream TIMEOUT, own context alive", pipeline.NewError(pipeline.KindTimeout, "SHOP_TIMEOUT_001", "payment gateway timed out"), 0, true},
		{"downstream context.DeadlineExceeded, own context alive", fmt.Errorf("gateway: %w", context.DeadlineExceeded), 0, true},
		{"UNEXPECTED", pipeline.NewError(pipeline.KindUnexpected, pipeline.CodeUnexpected, "bug"), 0, true},
		{"unhandled error", errors.New("nil pointer"), 0, true},
		{"panic", "panic", 0, true},
		{"operation's deadline fired while the handler waited", waitOwnDeadline, time.Second, true},
		{"operation's deadline fired, handler wrote TIMEOUT itself", waitOwnDeadlineCoded, time.Second, true},
		{"an inner rate limit rejection", resilience.RateLimited("tenant.acme", time.Second), 0, false},
		{"an inner concurrency rejection", resilience.ConcurrencyLimited("tenant.acme"), 0, false},
		{"a dependency's open breaker", resilience.CircuitOpen("payments.charge", time.Second), 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h, l := breakerStack(t, resilience.Policy{Timeout: tt.timeout})
				_ = invokeLimited(t.Context(), h, tt.input)
				want := resilience.BreakerClosed
				if tt.wantOpen {
					want = resilience.BreakerOpen
				}
				if got := l.State().Breaker; got != want {
					t.Fatalf("after one %s outcome with FailureThreshold 1: BreakerState() = %v, want %v", tt.name, got, want)
				}
			})
		})
	}
}

func TestBreakerOpenHalfOpenProbe(t *testing.T) {
	fail := pipeline.NewError(pipeline.KindUnavailable, "SHOP_UNAVAILABLE_001", "db down")
	tests := []struct {
		name       string
		probe      any // the probe's outcome
		wantState  resilience.BreakerState
		wantNextOK bool
	}{
		{"probe success closes", nil, resilience.BreakerClosed, true},
		{"probe failure re-opens", fail, resilience.BreakerOpen, false},
		{"caller error frees the slot (it says nothing of the operation)", pipeline.NewError(pipeline.KindValidation, "V", "bad"), resilience.BreakerHalfOpen, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h, l := breakerStack(t, resilience.Policy{FailureThreshold: 2, BreakDuration: 10 * time.Second})
				expectCode(t, "failure 1", invokeLimited(t.Context(), h, fail), "SHOP_UNAVAILABLE_001")
				expectCode(t, "failure 2", invokeLimited(t.Context(), h, fail), "SHOP_UNAVAILABLE_001")
				expectBreaker(t, "after two failures", l, resilience.BreakerOpen)
				time.Sleep(2500 * time.Millisecond)
				err := invokeLimited(t.Context(), h, nil)
				expectCode(t, "call while open", err, resilience.CodeCircuitOpen)
				pe := pipeline.AsError(err)
				if ra, _ := pipelinetest.RetryAfterSeconds(pe); ra != 8 { // 7.5 s rounded up
					t.Errorf("retryAfter = %v, want 8", ra)
				}
				if want := "Operation 'orders.create' is unavailable: its circuit breaker is open; retry after 8 seconds."; pe.Message() != want {
					t.Errorf("message = %q, want %q", pe.Message(), want)
				}
				time.Sleep(7500 * time.Millisecond)
				expectBreaker(t, "after the break", l, resilience.BreakerHalfOpen)
				release := make(chan struct{})
				probe := make(chan error, 1)
				go func() {
					probe <- invokeLimited(t.Context(), h, func(context.Context, *pipeline.Invocation) (any, error) {
						<-release
						if e, isErr := tt.probe.(error); isErr {
							return nil, e
						}
						return nil, nil
					})
				}()
				synctest.Wait()
				for i := range 3 {
					err := invokeLimited(t.Context(), h, nil)
					expectCode(t, fmt.Sprintf("call %d while the probe runs", i), err, resilience.CodeCircuitOpen)
					if ra, _ := pipelinetest.RetryAfterSeconds(pipeline.AsError(err)); ra != 1 {
						t.Errorf("retryAfter while probing = %v, want 1", ra)
					}
				}
				close(release)
				<-probe
				if got := l.State().Breaker; got != tt.wantState {
					t.Fatalf("after the probe: BreakerState() = %v, want %v", got, tt.wantState)
				}
				err = invokeLimited(t.Context(), h, nil)
				if (err == nil) != tt.wantNextOK {
					t.Fatalf("call after the probe = %v, want success %v", err, tt.wantNextOK)
				}
				if !tt.wantNextOK {
					if ra, _ := pipelinetest.RetryAfterSeconds(pipeline.AsError(err)); ra != 10 {
						t.Errorf("re-opened: retryAfter = %v, want a full break of 10", ra)
					}
				}
			})
		})
	}
}

func TestBreakerIgnoresCallsRunningWhenItOpened(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, l := breakerStack(t, resilience.Policy{FailureThreshold: 1, BreakDuration: 10 * time.Second})
		release := make(chan error)
		slow := func(context.Context, *pipeline.Invocation) (any, error) { return nil, <-release }
		running := make(chan error, 3) // outcomes of the calls admitted while closed, in finishing order
		for range 3 {
			go func() { running <- invokeLimited(t.Context(), h, slow) }()
		}
		synctest.Wait()
		expectCode(t, "failure", invokeLimited(t.Context(), h, errors.New("db down")), pipeline.CodeUnexpected)
		expectBreaker(t, "after the failure", l, resilience.BreakerOpen)
		release <- nil                   // a success must not close it
		release <- errors.New("db down") // a failure must not extend the break
		<-running
		<-running
		expectBreaker(t, "after old calls finished", l, resilience.BreakerOpen)
		time.Sleep(10 * time.Second)
		expectBreaker(t, "the old failure extended the break", l, resilience.BreakerHalfOpen)
		probe := make(chan error, 1)
		block := make(chan struct{})
		go func() {
			probe <- invokeLimited(t.Context(), h, func(context.Context, *pipeline.Invocation) (any, error) { <-block; return nil, nil })
		}()
		synctest.Wait()
		release <- nil // an old success during half-open must not close it
		<-running
		expectBreaker(t, "old success during the probe", l, resilience.BreakerHalfOpen)
		close(block)
		expectCode(t, "probe", <-probe, "")
		expectBreaker(t, "after the probe", l, resilience.BreakerClosed)
	})
}

func TestBreakerLostProbeFreesTheSlot(t *testing.T) {
	tests := []struct {
		name string
		// lose runs the half-open probe so that it does not finish, and
		// returns its outcome code.
		lose func(t *testing.T, h pipeline.Handler) string
	}{
		{"caller cancels", func(t *testing.T, h pipeline.Handler) string {
			ctx, cancel := context.WithCancel(t.Context())
			time.AfterFunc(time.Second, cancel)
			return pipelinetest.CodeOf(invokeLimited(ctx, h, func(ctx context.Context, inv *pipeline.Invocation) (any, error) {
				<-ctx.Done()
				return nil, ctx.Err()
			}))
		}},
		{"probe's own deadline fires", func(t *testing.T, h pipeline.Handler) string {
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			return pipelinetest.CodeOf(invokeLimited(ctx, h, func(ctx context.Context, inv *pipeline.Invocation) (any, error) {
				<-ctx.Done()
				return nil, pipeline.ErrCanceled() // the handler's own words; attribution says TIMEOUT
			}))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h, l := breakerStack(t, resilience.Policy{FailureThreshold: 1, BreakDuration: 10 * time.Second})
				expectCode(t, "failure", invokeLimited(t.Context(), h, errors.New("db down")), pipeline.CodeUnexpected)
				time.Sleep(10 * time.Second)
				code := tt.lose(t, h)
				if code != pipeline.CodeCanceled && code != pipeline.CodeTimeout {
					t.Fatalf("lost probe outcome = %q, want CANCELLED or TIMEOUT", code)
				}
				expectBreaker(t, "after a lost probe", l, resilience.BreakerHalfOpen)
				expectCode(t, "next call probes and closes", invokeLimited(t.Context(), h, nil), "")
				expectBreaker(t, "after the next probe", l, resilience.BreakerClosed)
			})
		})
	}
}

// slowRelease is a limit whose permits are ReleasedAtContextEnd and take
// a second to give back.
type slowRelease struct {
	releasing chan struct{} // closed when Release starts
	released  atomic.Bool
	done      chan struct{} // closed when Release returns
}

func (s *slowRelease) Acquire(context.Context, *pipeline.Invocation) (resilience.Permit, error) {
	return resilience.NewPermit(s).ReleasedAtContextEnd(), nil
}

func (s *slowRelease) Release(resilience.Outcome) {
	close(s.releasing)
	time.Sleep(time.Second)
	s.released.Store(true)
	close(s.done)
}

// TestCallReturnsAfterItsWatchedPermitIsGivenBack: when the call's context
// ends before its handler returns, the permit is given back at the end of
// the context, and the call returns only once that is done. Otherwise the
// caller's next call can still meet it (a lost probe's half-open slot).
func TestCallReturnsAfterItsWatchedPermitIsGivenBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &slowRelease{releasing: make(chan struct{}), done: make(chan struct{})}
		l := resilience.NewLimits(opID, resilience.Policy{}, resilience.WithLimit(s))
		h := pipeline.Chain(func(ctx context.Context, _ *pipeline.Invocation) (any, error) {
			<-ctx.Done()
			<-s.releasing // the end of the context gives the permit back, not the return
			return nil, ctx.Err()
		}, l)
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(time.Second, cancel)
		if _, err := h(ctx, newInv(nil)); !errors.Is(err, context.Canceled) && pipelinetest.CodeOf(err) != pipeline.CodeCanceled {
			t.Errorf("outcome %v, want cancelled", err)
		}
		given := s.released.Load()
		<-s.done
		if !given {
			t.Fatal("the call returned before its permit was given back")
		}
	})
}

func TestBreakerProbeCancelledInTheConcurrencyQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, l := breakerStack(t, resilience.Policy{FailureThreshold: 1, BreakDuration: 10 * time.Second, ConcurrencyLimit: 1, ConcurrencyQueueLimit: 1})
		first, second := make(chan error), make(chan error)
		firstDone, secondDone := make(chan error, 1), make(chan error, 1)
		go func() {
			firstDone <- invokeLimited(t.Context(), h, func(context.Context, *pipeline.Invocation) (any, error) { return nil, <-first })
		}()
		synctest.Wait()
		go func() {
			secondDone <- invokeLimited(t.Context(), h, func(context.Context, *pipeline.Invocation) (any, error) { return nil, <-second })
		}()
		synctest.Wait() // second waits for the slot
		first <- errors.New("db down")
		expectCode(t, "first", <-firstDone, pipeline.CodeUnexpected)
		synctest.Wait() // second now holds the slot, admitted before the breaker opened
		if l.State().Breaker != resilience.BreakerOpen || l.State().InFlight != 1 {
			t.Fatalf("BreakerState, InFlight = %v, %d; want open, 1", l.State().Breaker, l.State().InFlight)
		}
		time.Sleep(10 * time.Second)
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(time.Second, cancel)
		expectCode(t, "probe cancelled in the queue", invokeLimited(ctx, h, nil), pipeline.CodeCanceled)
		expectBreaker(t, "after the lost probe", l, resilience.BreakerHalfOpen)
		second <- nil
		expectCode(t, "second", <-secondDone, "")
		expectBreaker(t, "after an old call succeeded", l, resilience.BreakerHalfOpen)
		expectCode(t, "next call probes", invokeLimited(t.Context(), h, nil), "")
		expectBreaker(t, "after the probe", l, resilience.BreakerClosed)
	})
}

func TestProbeRejectedByARateLimitFreesTheSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, l := breakerStack(t, resilience.Policy{FailureThreshold: 1, BreakDuration: 10 * time.Second, PermitLimit: 1, Window: 11 * time.Second})
		expectCode(t, "failure", invokeLimited(t.Context(), h, errors.New("db down")), pipeline.CodeUnexpected)
		time.Sleep(10 * time.Second) // half-open; the rate window (11 s) is still used up
		expectCode(t, "probe", invokeLimited(t.Context(), h, nil), resilience.CodeRateLimited)
		expectBreaker(t, "after the rate-limited probe", l, resilience.BreakerHalfOpen)
		time.Sleep(time.Second)
		expectCode(t, "next probe", invokeLimited(t.Context(), h, nil), "")
		expectBreaker(t, "after the next probe", l, resilience.BreakerClosed)
	})
}

func TestExpiredOnArrivalNeverReachesTheLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reached := 0
		h, l := limitStack(t, resilience.Policy{FailureThreshold: 1, PermitLimit: 1, Window: time.Hour, ConcurrencyLimit: 1}, func(context.Context, *pipeline.Invocation) (any, error) {
			reached++
			return nil, nil
		})
		inv := pipeline.NewInvocation(pipeline.Spec{Operation: op(opID), Deadline: time.Now().Add(-time.Second), DeadlineSource: pipeline.DeadlineOperation})
		_, err := h(t.Context(), inv)
		expectCode(t, "expired on arrival", err, pipeline.CodeTimeout)
		if reached != 0 || l.State().Breaker != resilience.BreakerClosed {
			t.Fatalf("reached %d, breaker %v; want 0, closed", reached, l.State().Breaker)
		}
		expectCode(t, "next call takes the only permit", callLimited(t.Context(), h), "")
	})
}

func TestPanicThroughTheLimitsCountsAsFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		panicky := pipeline.MiddlewareFunc(func(context.Context, *pipeline.Invocation, pipeline.Handler) (any, error) { panic("boom") })
		h, l := limitStack(t, resilience.Policy{FailureThreshold: 1, ConcurrencyLimit: 1}, okHandler, panicky)
		expectCode(t, "panicking middleware", callLimited(t.Context(), h), pipeline.CodeUnexpected)
		if l.State().Breaker != resilience.BreakerOpen || l.State().InFlight != 0 {
			t.Fatalf("after a panic inside the limits: breaker %v, in flight %d; want open, 0", l.State().Breaker, l.State().InFlight)
		}
	})
}

// call runs h on a new invocation of the operation with input.
func call(h pipeline.Handler, ctx context.Context, input any) error {
	_, err := h(ctx, newInv(input))
	return err
}
