package deadline_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience/deadline"
)

// endings are the ways a handler reports that its context ended. Each is
// attributed by the context's state alone; the attributed outcome wraps
// what the handler returned.
var endings = []struct {
	name string
	ret  func(ctx context.Context) error
}{
	{"returns ctx.Err()", func(ctx context.Context) error { return ctx.Err() }},
	{"returns wrapped ctx.Err()", func(ctx context.Context) error { return fmt.Errorf("orders: load: %w", ctx.Err()) }},
	{"returns context.Canceled", func(context.Context) error { return context.Canceled }},
	{"returns context.Cause", func(ctx context.Context) error { return context.Cause(ctx) }},
	{"writes KERNEL_CANCELLED_001", func(context.Context) error { return pipeline.ErrCanceled() }},
	{"writes its own CANCELLED", func(context.Context) error {
		return pipeline.NewError(pipeline.KindCanceled, "SHOP_CANCELLED_001", "Order aborted.")
	}},
	{"writes a TIMEOUT", func(context.Context) error {
		return pipeline.NewError(pipeline.KindTimeout, "SHOP_TIMEOUT_001", "Inventory timed out.")
	}},
	{"returns success", func(context.Context) error { return nil }},
	{"returns another error", func(context.Context) error { return errors.New("db: connection reset") }},
}

// blocked is what a handler that waited for its context to end saw.
type blocked struct {
	released time.Duration   // since the call to invokeBlocked
	cause    error           // context.Cause of its context
	ctx      context.Context // its context
	ret      error           // what it returned
}

// invokeBlocked runs mw on inv under ctx with a handler that waits for its
// context to end and reports the end with ret.
func invokeBlocked(mw pipeline.Middleware, ctx context.Context, inv *pipeline.Invocation, ret func(context.Context) error) (blocked, error) {
	start := time.Now()
	var b blocked
	_, err := mw.Invoke(ctx, inv, func(ctx context.Context, _ *pipeline.Invocation) (any, error) {
		b.ctx = ctx
		<-ctx.Done()
		b.released, b.cause = time.Since(start), context.Cause(ctx)
		b.ret = ret(ctx)
		return nil, b.ret
	})
	return b, err
}

// due returns an invocation whose effective deadline, from source, is
// after from now.
func due(after time.Duration, source pipeline.DeadlineSource) *pipeline.Invocation {
	return pipeline.NewInvocation(pipeline.Spec{Deadline: time.Now().Add(after), DeadlineSource: source})
}

// noDeadline returns an invocation without a deadline.
func noDeadline() *pipeline.Invocation { return pipeline.NewInvocation(pipeline.Spec{}) }

func wantCode(t *testing.T, what string, err error, code string) {
	t.Helper()
	if got := pipelinetest.CodeOf(err); got != code {
		t.Errorf("%s = %v (code %q), want code %q", what, err, got, code)
	}
}

// wantCause fails unless the attributed outcome err wraps what the handler
// returned, ret (nothing when ret is nil or the attributed outcome itself).
func wantCause(t *testing.T, err, ret error) {
	t.Helper()
	var want error
	if ret != nil && ret != err {
		want = ret
	}
	if got := errors.Unwrap(pipeline.AsError(err)); got != want {
		t.Errorf("errors.Unwrap(%v) = %v, want the handler's outcome %v", err, got, want)
	}
}

// TestDeadlineReleasesBlockedHandlerAsTimeout: the deadline fires ->
// TIMEOUT, however the handler reports it; the handler blocked on
// <-ctx.Done() is released at the deadline exactly.
func TestDeadlineReleasesBlockedHandlerAsTimeout(t *testing.T) {
	for _, e := range endings {
		t.Run(e.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mw := deadline.Middleware()
				b, err := invokeBlocked(mw, t.Context(), due(time.Second, pipeline.DeadlineCaller), e.ret)
				wantCode(t, "Invoke", err, pipeline.CodeTimeout)
				if b.released != time.Second {
					t.Errorf("handler released after %v, want 1s (the deadline)", b.released)
				}
				if b.cause != deadline.ErrDeadline || !errors.Is(b.cause, context.DeadlineExceeded) {
					t.Errorf("context.Cause(handler ctx) = %v, want ErrDeadline wrapping context.DeadlineExceeded", b.cause)
				}
				wantCause(t, err, b.ret)
			})
		})
	}
}

// TestDeadlineCallerCanceledIsCanceled: the deadline has not fired and
// the caller cancels -> CANCELLED, however the handler reports it.
func TestDeadlineCallerCanceledIsCanceled(t *testing.T) {
	for _, e := range endings {
		t.Run(e.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mw := deadline.Middleware()
				parent, cancel := context.WithCancel(t.Context())
				defer cancel()
				go func() {
					time.Sleep(500 * time.Millisecond)
					cancel()
				}()
				b, err := invokeBlocked(mw, parent, due(time.Second, pipeline.DeadlineCaller), e.ret)
				wantCode(t, "Invoke", err, pipeline.CodeCanceled)
				if b.released != 500*time.Millisecond {
					t.Errorf("handler released after %v, want 500ms (the caller's cancel)", b.released)
				}
				wantCause(t, err, b.ret)
			})
		})
	}
}

// TestDeadlineCanceledStaysCanceledPastDeadline: a caller cancels before
// the deadline and the handler, ignoring its context, returns after the
// deadline: the clock reads past the deadline but the context ended by
// cancellation -> CANCELLED.
func TestDeadlineCanceledStaysCanceledPastDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mw := deadline.Middleware()
		start := time.Now()
		parent, cancel := context.WithCancel(t.Context())
		_, err := mw.Invoke(parent, due(time.Second, pipeline.DeadlineCaller), func(ctx context.Context, inv *pipeline.Invocation) (any, error) {
			time.Sleep(500 * time.Millisecond)
			cancel()
			time.Sleep(time.Second) // ignores the cancellation
			if !pipelinetest.Expired(inv, time.Now()) {
				t.Errorf("Expired(%v) = false at 1.5s, want true", time.Now().Sub(start))
			}
			return nil, ctx.Err()
		})
		wantCode(t, "Invoke", err, pipeline.CodeCanceled)
	})
}

// heldDeadline is a handler context whose deadline does not fire by
// itself: the test fires it.
type heldDeadline struct {
	context.Context
	d time.Time
}

func (h heldDeadline) Deadline() (time.Time, bool) { return h.d, true }

// hiddenDeadline is a context that ends at its deadline without reporting
// it.
type hiddenDeadline struct{ context.Context }

func (hiddenDeadline) Deadline() (time.Time, bool) { return time.Time{}, false }

// holdToken returns a deadline middleware whose deadline fires only when
// the returned function is called.
func holdToken() (mw pipeline.Middleware, fire func()) {
	var fireCause context.CancelCauseFunc
	var cause error
	mw = deadline.MiddlewareWithDeriveForTest(func(parent context.Context, d time.Time, c error) (context.Context, context.CancelFunc) {
		ctx, cancel := context.WithCancelCause(parent)
		fireCause, cause = cancel, c
		return heldDeadline{ctx, d}, func() { cancel(context.Canceled) }
	})
	return mw, func() { fireCause(cause) }
}

// TestDeadlineClockPastDeadlineTokenNotFired uses the test seam to hold the
// deadline back while the clock moves past it (as a timer running late
// does): the caller's cancellation is then CANCELLED, because attribution
// reads the context, not the clock. When the late deadline fires before
// the caller cancels, it is TIMEOUT.
func TestDeadlineClockPastDeadlineTokenNotFired(t *testing.T) {
	for _, tc := range []struct {
		name      string
		fireAt    time.Duration // 0: never
		cancelAt  time.Duration
		wantCode  string
		wantAfter time.Duration
	}{
		{"caller cancels, token not fired", 0, 1500 * time.Millisecond, pipeline.CodeCanceled, 1500 * time.Millisecond},
		{"late token fires, then caller cancels", 1200 * time.Millisecond, 1500 * time.Millisecond, pipeline.CodeTimeout, 1200 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mw, fire := holdToken()
				start := time.Now()
				parent, cancel := context.WithCancel(t.Context())
				defer cancel()
				var released time.Duration
				_, err := mw.Invoke(parent, due(time.Second, pipeline.DeadlineCaller), func(ctx context.Context, inv *pipeline.Invocation) (any, error) {
					if tc.fireAt > 0 {
						go func() { time.Sleep(tc.fireAt); fire() }()
					}
					go func() { time.Sleep(tc.cancelAt); cancel() }()
					<-ctx.Done()
					released = time.Since(start)
					if !pipelinetest.Expired(inv, time.Now()) {
						t.Errorf("Expired(now) = false %v after start, want true (clock past the deadline)", released)
					}
					time.Sleep(time.Second) // let the caller's cancel land too
					return nil, ctx.Err()
				})
				wantCode(t, "Invoke", err, tc.wantCode)
				if released != tc.wantAfter {
					t.Errorf("handler released after %v, want %v", released, tc.wantAfter)
				}
			})
		})
	}
}

// TestDeadlineTies: "the caller cancels at the same instant the deadline
// fires" is TIMEOUT whenever the two events have an order — a caller whose
// own deadline is the same instant, a cancellation landing (at that
// instant or later) after the deadline fired.
func TestDeadlineTies(t *testing.T) {
	t.Run("caller deadline at the same instant", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// A gRPC server context carries the caller's deadline like this.
			start := time.Now()
			parent, cancel := context.WithDeadline(t.Context(), start.Add(time.Second))
			defer cancel()
			b, err := invokeBlocked(deadline.Middleware(), parent, due(time.Second, pipeline.DeadlineCaller), context.Context.Err)
			wantCode(t, "Invoke", err, pipeline.CodeTimeout)
			if b.released != time.Second {
				t.Errorf("handler released after %v, want 1s", b.released)
			}
		})
	})
	t.Run("caller deadline earlier", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// The parent's deadline ends the handler's context first; its
			// cause is a DeadlineExceeded (the parent records no sentinel
			// cause), so it is TIMEOUT.
			start := time.Now()
			parent, cancel := context.WithDeadline(t.Context(), start.Add(500*time.Millisecond))
			defer cancel()
			b, err := invokeBlocked(deadline.Middleware(), parent, due(time.Second, pipeline.DeadlineOperation), context.Context.Err)
			wantCode(t, "Invoke", err, pipeline.CodeTimeout)
			if b.released != 500*time.Millisecond || !errors.Is(b.cause, context.DeadlineExceeded) {
				t.Errorf("released after %v with cause %v, want 500ms and a cause wrapping context.DeadlineExceeded", b.released, b.cause)
			}
		})
	})
	t.Run("upstream deadline without the sentinel cause", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// A parent that ends with a plain DeadlineExceeded and does not
			// report its deadline: the sentinel cause is absent, and that
			// must not be read as "the caller canceled".
			start := time.Now()
			up, cancel := context.WithDeadline(t.Context(), start.Add(500*time.Millisecond))
			defer cancel()
			b, err := invokeBlocked(deadline.Middleware(), hiddenDeadline{up}, due(time.Second, pipeline.DeadlineCaller), context.Context.Err)
			wantCode(t, "Invoke", err, pipeline.CodeTimeout)
			if b.released != 500*time.Millisecond || b.cause != context.DeadlineExceeded {
				t.Errorf("released after %v with cause %v, want 500ms and context.DeadlineExceeded", b.released, b.cause)
			}
		})
	})
	t.Run("cancel at the deadline instant after the token fired", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			start := time.Now()
			parent, cancel := context.WithCancel(t.Context())
			canceled := make(chan time.Duration)
			go func() {
				time.Sleep(time.Second)
				synctest.Wait() // the deadline's timer has run
				cancel()
				canceled <- time.Since(start)
			}()
			_, err := deadline.Middleware().Invoke(parent, due(time.Second, pipeline.DeadlineCaller), func(ctx context.Context, _ *pipeline.Invocation) (any, error) {
				<-ctx.Done()
				if at := <-canceled; at != time.Second {
					t.Errorf("caller canceled at %v, want 1s (the deadline instant)", at)
				}
				return nil, ctx.Err()
			})
			wantCode(t, "Invoke", err, pipeline.CodeTimeout)
		})
	})
	t.Run("cancel after the deadline while the handler runs", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			parent, cancel := context.WithCancel(t.Context())
			_, err := deadline.Middleware().Invoke(parent, due(time.Second, pipeline.DeadlineCaller), func(context.Context, *pipeline.Invocation) (any, error) {
				time.Sleep(1500 * time.Millisecond)
				cancel()
				return nil, pipeline.ErrCanceled()
			})
			wantCode(t, "Invoke", err, pipeline.CodeTimeout)
		})
	})
}

// TestDeadlineTieRawCancelAgreesWithToken: a raw cancel() racing the
// deadline's timer at one synctest instant has no order for attribution to
// read; the runtime runs one first. Whichever it is, the outcome agrees with
// the handler's context: TIMEOUT exactly when the deadline ended it.
func TestDeadlineTieRawCancelAgreesWithToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		parent, cancel := context.WithCancel(t.Context())
		go func() { time.Sleep(time.Second); cancel() }()
		b, err := invokeBlocked(deadline.Middleware(), parent, due(time.Second, pipeline.DeadlineCaller), context.Context.Err)
		want := pipeline.CodeCanceled
		if errors.Is(context.Cause(b.ctx), context.DeadlineExceeded) {
			want = pipeline.CodeTimeout
		}
		wantCode(t, "Invoke", err, want)
		if b.released != time.Second {
			t.Errorf("handler released after %v, want 1s", b.released)
		}
		t.Logf("raw cancel at the deadline instant: %s", pipelinetest.CodeOf(err))
	})
}

// TestDeadlinePastOnArrival: a deadline at or before arrival ends the
// invocation with TIMEOUT before the handler runs, even when the caller is
// gone too; a caller gone on arrival is CANCELLED.
func TestDeadlinePastOnArrival(t *testing.T) {
	type setup func(t *testing.T, start time.Time) (context.Context, time.Time)
	for _, tc := range []struct {
		name  string
		setup setup
		want  string
	}{
		{"deadline before now", func(t *testing.T, s time.Time) (context.Context, time.Time) {
			return t.Context(), s.Add(-time.Millisecond)
		}, pipeline.CodeTimeout},
		{"deadline exactly now", func(t *testing.T, s time.Time) (context.Context, time.Time) {
			return t.Context(), s
		}, pipeline.CodeTimeout},
		{"deadline past and caller gone", func(t *testing.T, s time.Time) (context.Context, time.Time) {
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			return ctx, s.Add(-time.Second)
		}, pipeline.CodeTimeout},
		{"expired parent deadline", func(t *testing.T, s time.Time) (context.Context, time.Time) {
			ctx, cancel := context.WithDeadline(t.Context(), s.Add(-time.Millisecond))
			t.Cleanup(cancel)
			return ctx, time.Time{}
		}, pipeline.CodeTimeout},
		{"caller gone, deadline ahead", func(t *testing.T, s time.Time) (context.Context, time.Time) {
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			return ctx, s.Add(time.Second)
		}, pipeline.CodeCanceled},
		{"caller gone, no deadline anywhere", func(t *testing.T, s time.Time) (context.Context, time.Time) {
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			return ctx, time.Time{}
		}, pipeline.CodeCanceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				parent, d := tc.setup(t, time.Now())
				inv := pipeline.NewInvocation(pipeline.Spec{Deadline: d})
				called := false
				_, err := deadline.Middleware().Invoke(parent, inv, func(context.Context, *pipeline.Invocation) (any, error) {
					called = true
					return nil, nil
				})
				wantCode(t, "Invoke", err, tc.want)
				if called {
					t.Error("the handler was called")
				}
				if c := errors.Unwrap(pipeline.AsError(err)); c != nil {
					t.Errorf("outcome on arrival wraps %v, want nothing", c)
				}
			})
		})
	}
}

// TestDeadlineHandlerSeesEffectiveDeadline: the handler's context carries
// the invocation's deadline.
func TestDeadlineHandlerSeesEffectiveDeadline(t *testing.T) {
	for _, src := range []pipeline.DeadlineSource{pipeline.DeadlineCaller, pipeline.DeadlineOperation, pipeline.DeadlineKernel} {
		t.Run(src.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				want := start.Add(2 * time.Second)
				out, err := deadline.Middleware().Invoke(t.Context(), due(2*time.Second, src), func(ctx context.Context, inv *pipeline.Invocation) (any, error) {
					d, ok := inv.Deadline()
					cd, cok := ctx.Deadline()
					if !ok || !cok || !d.Equal(want) || !cd.Equal(want) {
						t.Errorf("Deadline() = %v, %v; ctx.Deadline() = %v, %v; want %v", d, ok, cd, cok, want)
					}
					time.Sleep(1500 * time.Millisecond)
					if r, exp := pipelinetest.Remaining(inv, time.Now()), pipelinetest.Expired(inv, time.Now()); r != 500*time.Millisecond || exp {
						t.Errorf("after 1.5s: Remaining = %v, Expired = %v; want 500ms, false", r, exp)
					}
					return "done", nil
				})
				if err != nil || out != "done" {
					t.Errorf("Invoke = %v, %v; want done, nil", out, err)
				}
			})
		})
	}
}

// TestDeadlineOutcomeWhileLive: while the handler's context is live, the
// result and outcome pass through unchanged; a downstream TIMEOUT is a real
// TIMEOUT.
func TestDeadlineOutcomeWhileLive(t *testing.T) {
	downstream := pipeline.NewError(pipeline.KindTimeout, "SHOP_TIMEOUT_001", "Inventory did not answer in time.")
	for _, tc := range []struct {
		name string
		ret  error
	}{
		{"success", nil},
		{"validation", pipeline.NewError(pipeline.KindValidation, "SHOP_VALIDATION_001", "bad")},
		{"downstream 504", downstream},
		{"downstream call's own deadline", fmt.Errorf("inventory: %w", context.DeadlineExceeded)},
		{"downstream canceled", context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var own bool
				out, err := deadline.Middleware().Invoke(t.Context(), due(time.Second, pipeline.DeadlineCaller), func(ctx context.Context, _ *pipeline.Invocation) (any, error) {
					time.Sleep(100 * time.Millisecond)
					own = deadline.IsOwnCancellation(ctx, tc.ret)
					return 42, tc.ret
				})
				if err != tc.ret || out != 42 {
					t.Errorf("Invoke = %v, %v; want 42, %v unchanged", out, err, tc.ret)
				}
				if own {
					t.Errorf("IsOwnCancellation(live ctx, %v) = true, want false", tc.ret)
				}
			})
		})
	}
}

// TestDeadlineWithoutAnyDeadline: with no deadline from anywhere, only the
// caller ends the call.
func TestDeadlineWithoutAnyDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		parent, cancel := context.WithCancel(t.Context())
		go func() { time.Sleep(time.Hour); cancel() }()
		b, err := invokeBlocked(deadline.Middleware(), parent, noDeadline(), context.Context.Err)
		wantCode(t, "Invoke", err, pipeline.CodeCanceled)
		if _, ok := b.ctx.Deadline(); ok || b.released != time.Hour {
			t.Errorf("handler context has a deadline: %v; released after %v; want none and 1h", ok, b.released)
		}
	})
}

func TestAttribute(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	ours, cancel3 := context.WithDeadlineCause(context.Background(), time.Now().Add(-time.Second), deadline.ErrDeadline)
	defer cancel3()
	causeDeadline, cancel4 := context.WithCancelCause(context.Background())
	cancel4(fmt.Errorf("upstream: %w", context.DeadlineExceeded))
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want *pipeline.Error
	}{
		{"live", context.Background(), nil},
		{"canceled", canceled, pipeline.ErrCanceled()},
		{"deadline", expired, pipeline.ErrTimeout()},
		{"ErrDeadline", ours, pipeline.ErrTimeout()},
		{"canceled with a deadline cause", causeDeadline, pipeline.ErrTimeout()},
	} {
		if got := deadline.Attribute(tc.ctx); got != tc.want {
			t.Errorf("Attribute(%s) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestIsOwnCancellation(t *testing.T) {
	live := context.Background()
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want bool
	}{
		{"nil error", ended, nil, false},
		{"ctx.Err() of an ended context", ended, ended.Err(), true},
		{"wrapped DeadlineExceeded, ended", ended, fmt.Errorf("x: %w", context.DeadlineExceeded), true},
		{"TIMEOUT outcome, ended", ended, pipeline.ErrTimeout(), true},
		{"CANCELLED outcome, ended", ended, pipeline.ErrCanceled(), true},
		{"UNEXPECTED, ended", ended, errors.New("boom"), false},
		{"UNAVAILABLE, ended", ended, pipeline.NewError(pipeline.KindUnavailable, "X", "down"), false},
		{"TIMEOUT, live (downstream)", live, pipeline.NewError(pipeline.KindTimeout, "SHOP_TIMEOUT_001", "slow"), false},
		{"DeadlineExceeded, live (downstream)", live, context.DeadlineExceeded, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := deadline.IsOwnCancellation(tc.ctx, tc.err); got != tc.want {
				t.Errorf("IsOwnCancellation(%s, %v) = %v, want %v", tc.name, tc.err, got, tc.want)
			}
		})
	}
}

// TestDeadlineAllocations: the middleware costs no allocation beyond the
// context.WithDeadlineCause it needs.
func TestDeadlineAllocations(t *testing.T) {
	mw := deadline.Middleware()
	inv := due(time.Hour, pipeline.DeadlineOperation)
	ctx := context.Background()
	ok := func(context.Context, *pipeline.Invocation) (any, error) { return nil, nil }
	got := testing.AllocsPerRun(500, func() { _, _ = mw.Invoke(ctx, inv, ok) })
	floor := testing.AllocsPerRun(500, func() {
		ctx, cancel := context.WithDeadlineCause(context.Background(), time.Now().Add(time.Second), deadline.ErrDeadline)
		_ = ctx.Err()
		cancel()
	})
	if got > floor {
		t.Errorf("AllocsPerRun(the deadline middleware.Invoke) = %v, want at most %v (context.WithDeadlineCause)", got, floor)
	}
}
