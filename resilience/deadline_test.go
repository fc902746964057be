package resilience_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
)

// endings are the ways a handler reports that its context ended. Each is
// attributed by token state alone; wantOriginal is what the breaker inside
// the DeadlineMiddleware must see.
var endings = []struct {
	name         string
	ret          func(ctx context.Context) error
	wantOriginal pipeline.Kind
}{
	{"returns ctx.Err()", func(ctx context.Context) error { return ctx.Err() }, pipeline.KindCancelled},
	{"returns wrapped ctx.Err()", func(ctx context.Context) error { return fmt.Errorf("orders: load: %w", ctx.Err()) }, pipeline.KindCancelled},
	{"returns context.Canceled", func(context.Context) error { return context.Canceled }, pipeline.KindCancelled},
	{"returns context.Cause", func(ctx context.Context) error { return context.Cause(ctx) }, pipeline.KindCancelled},
	{"writes KERNEL_CANCELLED_001", func(context.Context) error { return pipeline.ErrCancelled() }, pipeline.KindCancelled},
	{"writes its own CANCELLED", func(context.Context) error { return pipeline.Cancelled("SHOP_CANCELLED_001", "Order aborted.") }, pipeline.KindCancelled},
	{"writes a TIMEOUT", func(context.Context) error { return pipeline.Timeout("SHOP_TIMEOUT_001", "Inventory timed out.") }, pipeline.KindCancelled},
	{"returns success", func(context.Context) error { return nil }, pipeline.KindOK},
	{"returns another error", func(context.Context) error { return errors.New("db: connection reset") }, pipeline.KindUnexpected},
}

// blocked is what a handler that waited for its context to end saw.
type blocked struct {
	released time.Duration   // since the call to invokeBlocked
	cause    error           // context.Cause of its context
	ctx      context.Context // its context
}

// invokeBlocked runs mw on inv with a handler that waits for its context to
// end and reports the end with ret.
func invokeBlocked(mw *resilience.DeadlineMiddleware, inv *pipeline.Invocation, ret func(context.Context) error) (blocked, error) {
	start := time.Now()
	var b blocked
	err := mw.Invoke(inv, func(inv *pipeline.Invocation) error {
		b.ctx = inv.Context()
		<-b.ctx.Done()
		b.released, b.cause = time.Since(start), context.Cause(b.ctx)
		return ret(b.ctx)
	})
	return b, err
}

// invocationDue returns an invocation with parent context parent and a
// deadline after from now.
func invocationDue(parent context.Context, after time.Duration) *pipeline.Invocation {
	inv := pipeline.NewInvocation(parent, nil, nil)
	inv.SetDeadline(time.Now().Add(after))
	return inv
}

func wantCode(t *testing.T, what string, err error, code string) {
	t.Helper()
	if got := pipeline.CodeOf(err); got != code {
		t.Errorf("%s = %v (code %q), want code %q", what, err, got, code)
	}
}

// TestDeadlineReleasesBlockedHandlerAsTimeout: the deadline token fires ->
// TIMEOUT, however the handler reports it; the handler blocked on
// <-ctx.Done() is released at the deadline exactly.
func TestDeadlineReleasesBlockedHandlerAsTimeout(t *testing.T) {
	for _, e := range endings {
		t.Run(e.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mw := resilience.NewDeadlineMiddleware(0, time.Minute)
				parent := t.Context()
				inv := invocationDue(parent, time.Second)
				b, err := invokeBlocked(mw, inv, e.ret)
				wantCode(t, "Invoke", err, pipeline.CodeTimeout)
				if b.released != time.Second {
					t.Errorf("handler released after %v, want 1s (the deadline)", b.released)
				}
				if b.cause != resilience.ErrDeadline || !errors.Is(b.cause, context.DeadlineExceeded) {
					t.Errorf("context.Cause(handler ctx) = %v, want ErrDeadline wrapping context.DeadlineExceeded", b.cause)
				}
				if k := pipeline.KindOf(inv.OriginalOutcome()); k != e.wantOriginal {
					t.Errorf("OriginalOutcome() = %v (%v), want %v", inv.OriginalOutcome(), k, e.wantOriginal)
				}
				if inv.Context() != parent {
					t.Error("Invoke did not restore the invocation's context")
				}
			})
		})
	}
}

// TestDeadlineCallerCancelledIsCancelled: the deadline token has not fired
// and the caller cancels -> CANCELLED, however the handler reports it.
func TestDeadlineCallerCancelledIsCancelled(t *testing.T) {
	for _, e := range endings {
		t.Run(e.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mw := resilience.NewDeadlineMiddleware(0, time.Minute)
				parent, cancel := context.WithCancel(t.Context())
				defer cancel()
				inv := invocationDue(parent, time.Second)
				go func() {
					time.Sleep(500 * time.Millisecond)
					cancel()
				}()
				b, err := invokeBlocked(mw, inv, e.ret)
				wantCode(t, "Invoke", err, pipeline.CodeCancelled)
				if b.released != 500*time.Millisecond {
					t.Errorf("handler released after %v, want 500ms (the caller's cancel)", b.released)
				}
				if k := pipeline.KindOf(inv.OriginalOutcome()); k != e.wantOriginal {
					t.Errorf("OriginalOutcome() = %v (%v), want %v", inv.OriginalOutcome(), k, e.wantOriginal)
				}
			})
		})
	}
}

// TestDeadlineCancelledStaysCancelledPastDeadline: a caller cancels before
// the deadline and the handler, ignoring its context, returns after the
// deadline: the clock reads past the deadline but the token never fired ->
// CANCELLED.
func TestDeadlineCancelledStaysCancelledPastDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mw := resilience.NewDeadlineMiddleware(0, time.Minute)
		start := time.Now()
		parent, cancel := context.WithCancel(t.Context())
		inv := invocationDue(parent, time.Second)
		err := mw.Invoke(inv, func(inv *pipeline.Invocation) error {
			time.Sleep(500 * time.Millisecond)
			cancel()
			time.Sleep(time.Second) // ignores the cancellation
			if !inv.Expired(time.Now()) {
				t.Errorf("Expired(%v) = false at 1.5s, want true", time.Now().Sub(start))
			}
			return inv.Context().Err()
		})
		wantCode(t, "Invoke", err, pipeline.CodeCancelled)
	})
}

// heldDeadline is a handler context whose deadline token does not fire by
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

// holdToken makes mw's deadline token fire only when the returned function
// is called.
func holdToken(mw *resilience.DeadlineMiddleware) (fire func()) {
	var fireCause context.CancelCauseFunc
	var cause error
	mw.SetDeriveForTest(func(parent context.Context, d time.Time, c error) (context.Context, context.CancelFunc) {
		ctx, cancel := context.WithCancelCause(parent)
		fireCause, cause = cancel, c
		return heldDeadline{ctx, d}, func() { cancel(context.Canceled) }
	})
	return func() { fireCause(cause) }
}

// TestDeadlineClockPastDeadlineTokenNotFired uses the test seam to hold the
// deadline token back while the clock moves past the deadline (as a timer
// running late does): the caller's cancellation is then CANCELLED, because
// attribution reads the token, not the clock. When the late token fires
// before the caller cancels, it is TIMEOUT.
func TestDeadlineClockPastDeadlineTokenNotFired(t *testing.T) {
	for _, tc := range []struct {
		name      string
		fireAt    time.Duration // 0: never
		cancelAt  time.Duration
		wantCode  string
		wantAfter time.Duration
	}{
		{"caller cancels, token not fired", 0, 1500 * time.Millisecond, pipeline.CodeCancelled, 1500 * time.Millisecond},
		{"late token fires, then caller cancels", 1200 * time.Millisecond, 1500 * time.Millisecond, pipeline.CodeTimeout, 1200 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mw := resilience.NewDeadlineMiddleware(0, time.Minute)
				fire := holdToken(mw)
				start := time.Now()
				parent, cancel := context.WithCancel(t.Context())
				defer cancel()
				inv := invocationDue(parent, time.Second)
				var released time.Duration
				err := mw.Invoke(inv, func(inv *pipeline.Invocation) error {
					if tc.fireAt > 0 {
						go func() { time.Sleep(tc.fireAt); fire() }()
					}
					go func() { time.Sleep(tc.cancelAt); cancel() }()
					<-inv.Context().Done()
					released = time.Since(start)
					if !inv.Expired(time.Now()) {
						t.Errorf("Expired(now) = false %v after start, want true (clock past the deadline)", released)
					}
					time.Sleep(time.Second) // let the caller's cancel land too
					return inv.Context().Err()
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
// instant or later) after the token fired.
func TestDeadlineTies(t *testing.T) {
	t.Run("caller deadline at the same instant", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// A gRPC server context carries the caller's deadline like this.
			start := time.Now()
			parent, cancel := context.WithDeadline(t.Context(), start.Add(time.Second))
			defer cancel()
			inv := invocationDue(parent, time.Second)
			b, err := invokeBlocked(resilience.NewDeadlineMiddleware(0, time.Minute), inv, context.Context.Err)
			wantCode(t, "Invoke", err, pipeline.CodeTimeout)
			if b.released != time.Second {
				t.Errorf("handler released after %v, want 1s", b.released)
			}
		})
	})
	t.Run("caller deadline earlier", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// The parent's deadline becomes the effective one; its timer and
			// the middleware's fire at the same instant, and whichever runs
			// first, the cause is a DeadlineExceeded (the parent's records
			// no sentinel cause), so it is TIMEOUT.
			start := time.Now()
			parent, cancel := context.WithDeadline(t.Context(), start.Add(500*time.Millisecond))
			defer cancel()
			inv := invocationDue(parent, time.Second)
			b, err := invokeBlocked(resilience.NewDeadlineMiddleware(0, time.Minute), inv, context.Context.Err)
			wantCode(t, "Invoke", err, pipeline.CodeTimeout)
			if b.released != 500*time.Millisecond || !errors.Is(b.cause, context.DeadlineExceeded) {
				t.Errorf("released after %v with cause %v, want 500ms and a cause wrapping context.DeadlineExceeded", b.released, b.cause)
			}
			if d, _ := inv.Deadline(); !d.Equal(start.Add(500 * time.Millisecond)) {
				t.Errorf("Deadline() = %v, want the parent's, %v", d, start.Add(500*time.Millisecond))
			}
		})
	})
	t.Run("upstream deadline without the sentinel cause", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// A parent that ends with a plain DeadlineExceeded and does not
			// report its deadline: the sentinel cause is absent, and that
			// must not be read as "the caller cancelled".
			start := time.Now()
			up, cancel := context.WithDeadline(t.Context(), start.Add(500*time.Millisecond))
			defer cancel()
			inv := invocationDue(hiddenDeadline{up}, time.Second)
			b, err := invokeBlocked(resilience.NewDeadlineMiddleware(0, time.Minute), inv, context.Context.Err)
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
			inv := invocationDue(parent, time.Second)
			cancelled := make(chan time.Duration)
			go func() {
				time.Sleep(time.Second)
				synctest.Wait() // the deadline's timer has run
				cancel()
				cancelled <- time.Since(start)
			}()
			err := resilience.NewDeadlineMiddleware(0, time.Minute).Invoke(inv, func(inv *pipeline.Invocation) error {
				<-inv.Context().Done()
				if at := <-cancelled; at != time.Second {
					t.Errorf("caller cancelled at %v, want 1s (the deadline instant)", at)
				}
				return inv.Context().Err()
			})
			wantCode(t, "Invoke", err, pipeline.CodeTimeout)
		})
	})
	t.Run("cancel after the deadline while the handler runs", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			parent, cancel := context.WithCancel(t.Context())
			inv := invocationDue(parent, time.Second)
			err := resilience.NewDeadlineMiddleware(0, time.Minute).Invoke(inv, func(inv *pipeline.Invocation) error {
				time.Sleep(1500 * time.Millisecond)
				cancel()
				return pipeline.ErrCancelled()
			})
			wantCode(t, "Invoke", err, pipeline.CodeTimeout)
		})
	})
}

// TestDeadlineTieRawCancelAgreesWithToken: a raw cancel() racing the
// deadline's timer at one synctest instant has no order for attribution to
// read; the runtime runs one first. Whichever it is, the outcome agrees with
// the handler's context: TIMEOUT exactly when the deadline token ended it.
func TestDeadlineTieRawCancelAgreesWithToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		parent, cancel := context.WithCancel(t.Context())
		inv := invocationDue(parent, time.Second)
		go func() { time.Sleep(time.Second); cancel() }()
		b, err := invokeBlocked(resilience.NewDeadlineMiddleware(0, time.Minute), inv, context.Context.Err)
		want := pipeline.CodeCancelled
		if errors.Is(context.Cause(b.ctx), context.DeadlineExceeded) {
			want = pipeline.CodeTimeout
		}
		wantCode(t, "Invoke", err, want)
		if b.released != time.Second {
			t.Errorf("handler released after %v, want 1s", b.released)
		}
		t.Logf("raw cancel at the deadline instant: %s", pipeline.CodeOf(err))
	})
}

// TestDeadlinePastOnArrival: a deadline at or before arrival ends the
// invocation with TIMEOUT before the handler runs, even when the caller is
// gone too; a caller gone on arrival is CANCELLED.
func TestDeadlinePastOnArrival(t *testing.T) {
	type setup func(t *testing.T, start time.Time) (context.Context, time.Time)
	for _, tc := range []struct {
		name  string
		mw    *resilience.DeadlineMiddleware
		setup setup
		want  string
	}{
		{"deadline before now", resilience.NewDeadlineMiddleware(0, time.Minute), func(t *testing.T, s time.Time) (context.Context, time.Time) {
			return t.Context(), s.Add(-time.Millisecond)
		}, pipeline.CodeTimeout},
		{"deadline exactly now", resilience.NewDeadlineMiddleware(0, time.Minute), func(t *testing.T, s time.Time) (context.Context, time.Time) {
			return t.Context(), s
		}, pipeline.CodeTimeout},
		{"deadline past and caller gone", resilience.NewDeadlineMiddleware(0, time.Minute), func(t *testing.T, s time.Time) (context.Context, time.Time) {
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			return ctx, s.Add(-time.Second)
		}, pipeline.CodeTimeout},
		{"expired parent deadline", resilience.NewDeadlineMiddleware(0, time.Minute), func(t *testing.T, s time.Time) (context.Context, time.Time) {
			ctx, cancel := context.WithDeadline(t.Context(), s.Add(-time.Millisecond))
			t.Cleanup(cancel)
			return ctx, time.Time{}
		}, pipeline.CodeTimeout},
		{"caller gone, deadline ahead", resilience.NewDeadlineMiddleware(0, time.Minute), func(t *testing.T, s time.Time) (context.Context, time.Time) {
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			return ctx, s.Add(time.Second)
		}, pipeline.CodeCancelled},
		{"caller gone, no deadline anywhere", resilience.NewDeadlineMiddleware(0, 0), func(t *testing.T, s time.Time) (context.Context, time.Time) {
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			return ctx, time.Time{}
		}, pipeline.CodeCancelled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				parent, d := tc.setup(t, time.Now())
				inv := pipeline.NewInvocation(parent, nil, nil)
				inv.SetDeadline(d)
				called := false
				err := tc.mw.Invoke(inv, func(*pipeline.Invocation) error { called = true; return nil })
				wantCode(t, "Invoke", err, tc.want)
				if called {
					t.Error("the handler was called")
				}
				if inv.OriginalOutcome() != err {
					t.Errorf("OriginalOutcome() = %v, want the attributed outcome %v", inv.OriginalOutcome(), err)
				}
				if inv.Context() != parent {
					t.Error("Invoke changed the invocation's context")
				}
			})
		})
	}
}

// TestDeadlineEffective: per-operation Timeout and kernel MaxTimeout cap the
// caller's deadline; the earliest of all wins; a parent deadline is never
// exceeded.
func TestDeadlineEffective(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	far := time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return now.Add(d) }
	for _, tc := range []struct {
		name                string
		timeout, maxTimeout time.Duration
		caller, parent      time.Time
		want                time.Time
	}{
		{"nothing anywhere", 0, 0, time.Time{}, time.Time{}, time.Time{}},
		{"operation default when the caller sends none", 2 * time.Second, 10 * time.Second, time.Time{}, time.Time{}, at(2 * time.Second)},
		{"operation caps a later caller", 2 * time.Second, 10 * time.Second, at(5 * time.Second), time.Time{}, at(2 * time.Second)},
		{"earlier caller kept", 2 * time.Second, 10 * time.Second, at(time.Second), time.Time{}, at(time.Second)},
		{"kernel cap bounds a far-future caller", 0, 10 * time.Second, far, time.Time{}, at(10 * time.Second)},
		{"kernel cap below the operation's", 20 * time.Second, 10 * time.Second, far, time.Time{}, at(10 * time.Second)},
		{"kernel cap alone when the caller sends none", 0, 10 * time.Second, time.Time{}, time.Time{}, at(10 * time.Second)},
		{"parent deadline earlier", 2 * time.Second, 10 * time.Second, at(time.Second), at(300 * time.Millisecond), at(300 * time.Millisecond)},
		{"parent deadline later", 2 * time.Second, 10 * time.Second, time.Time{}, at(time.Minute), at(2 * time.Second)},
		{"past caller deadline kept", 2 * time.Second, 10 * time.Second, at(-time.Second), time.Time{}, at(-time.Second)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := resilience.NewDeadlineMiddleware(tc.timeout, tc.maxTimeout)
			if got := m.Effective(now, tc.caller, tc.parent); !got.Equal(tc.want) {
				t.Errorf("Effective(now, %v, %v) = %v, want %v", tc.caller, tc.parent, got, tc.want)
			}
		})
	}
}

// TestDeadlineHandlerSeesEffectiveDeadline: the capped deadline is stored
// on the invocation (UTC) and carried by the handler's context.
func TestDeadlineHandlerSeesEffectiveDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		inv := pipeline.NewInvocation(t.Context(), nil, nil)
		inv.SetDeadline(time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC))
		err := resilience.NewDeadlineMiddleware(2*time.Second, 10*time.Second).Invoke(inv, func(inv *pipeline.Invocation) error {
			want := start.Add(2 * time.Second)
			d, ok := inv.Deadline()
			cd, cok := inv.Context().Deadline()
			if !ok || !cok || !d.Equal(want) || !cd.Equal(want) || d.Location() != time.UTC {
				t.Errorf("Deadline() = %v, %v; ctx.Deadline() = %v, %v; want %v UTC", d, ok, cd, cok, want)
			}
			if r := inv.Remaining(time.Now()); r != 2*time.Second {
				t.Errorf("Remaining(now) = %v, want 2s", r)
			}
			time.Sleep(1500 * time.Millisecond)
			if r, exp := inv.Remaining(time.Now()), inv.Expired(time.Now()); r != 500*time.Millisecond || exp {
				t.Errorf("after 1.5s: Remaining = %v, Expired = %v; want 500ms, false", r, exp)
			}
			return nil
		})
		if err != nil {
			t.Errorf("Invoke = %v, want nil", err)
		}
	})
}

// TestDeadlineOutcomeWhileLive: while the handler's context is live, the
// outcome passes through unchanged; a downstream TIMEOUT is a real TIMEOUT
// that the breaker counts.
func TestDeadlineOutcomeWhileLive(t *testing.T) {
	downstream := pipeline.Timeout("SHOP_TIMEOUT_001", "Inventory did not answer in time.")
	for _, tc := range []struct {
		name string
		ret  func() error
		kind pipeline.Kind
	}{
		{"success", func() error { return nil }, pipeline.KindOK},
		{"validation", func() error { return pipeline.Validation("SHOP_VALIDATION_001", "bad") }, pipeline.KindValidation},
		{"downstream 504", func() error { return downstream }, pipeline.KindTimeout},
		{"downstream call's own deadline", func() error { return fmt.Errorf("inventory: %w", context.DeadlineExceeded) }, pipeline.KindTimeout},
		{"downstream cancelled", func() error { return context.Canceled }, pipeline.KindCancelled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				inv := pipeline.NewInvocation(t.Context(), nil, nil)
				inv.SetDeadline(time.Now().Add(time.Second))
				var own bool
				err := resilience.NewDeadlineMiddleware(0, time.Minute).Invoke(inv, func(inv *pipeline.Invocation) error {
					time.Sleep(100 * time.Millisecond)
					e := tc.ret()
					own = resilience.IsOwnCancellation(inv.Context(), e)
					return e
				})
				if k := pipeline.KindOf(err); k != tc.kind {
					t.Errorf("Invoke = %v (%v), want %v", err, k, tc.kind)
				}
				if orig := inv.OriginalOutcome(); pipeline.CodeOf(orig) != pipeline.CodeOf(err) {
					t.Errorf("OriginalOutcome() = %v, want the outcome itself, %v", orig, err)
				}
				if own {
					t.Errorf("IsOwnCancellation(live ctx, %v) = true, want false", err)
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
		inv := pipeline.NewInvocation(parent, nil, nil)
		go func() { time.Sleep(time.Hour); cancel() }()
		b, err := invokeBlocked(resilience.NewDeadlineMiddleware(0, 0), inv, context.Context.Err)
		wantCode(t, "Invoke", err, pipeline.CodeCancelled)
		if _, ok := b.ctx.Deadline(); ok || b.released != time.Hour {
			t.Errorf("handler context has a deadline: %v; released after %v; want none and 1h", ok, b.released)
		}
		if k := pipeline.KindOf(inv.OriginalOutcome()); k != pipeline.KindCancelled {
			t.Errorf("OriginalOutcome() kind = %v, want CANCELLED", k)
		}
	})
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
		{"CANCELLED outcome, ended", ended, pipeline.ErrCancelled(), true},
		{"UNEXPECTED, ended", ended, errors.New("boom"), false},
		{"UNAVAILABLE, ended", ended, pipeline.Unavailable("X", "down"), false},
		{"TIMEOUT, live (downstream)", live, pipeline.Timeout("SHOP_TIMEOUT_001", "slow"), false},
		{"DeadlineExceeded, live (downstream)", live, context.DeadlineExceeded, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := resilience.IsOwnCancellation(tc.ctx, tc.err); got != tc.want {
				t.Errorf("IsOwnCancellation(%s, %v) = %v, want %v", tc.name, tc.err, got, tc.want)
			}
		})
	}
}

// TestDeadlineAllocations: the middleware costs no allocation beyond the
// context.WithDeadlineCause it needs.
func TestDeadlineAllocations(t *testing.T) {
	mw := resilience.NewDeadlineMiddleware(time.Second, time.Minute)
	inv := pipeline.NewInvocation(context.Background(), nil, nil)
	ok := func(*pipeline.Invocation) error { return nil }
	got := testing.AllocsPerRun(500, func() {
		inv.SetDeadline(time.Time{})
		_ = mw.Invoke(inv, ok)
	})
	floor := testing.AllocsPerRun(500, func() {
		ctx, cancel := context.WithDeadlineCause(context.Background(), time.Now().Add(time.Second), resilience.ErrDeadline)
		_ = ctx.Err()
		cancel()
	})
	if got > floor {
		t.Errorf("AllocsPerRun(DeadlineMiddleware.Invoke) = %v, want at most %v (context.WithDeadlineCause)", got, floor)
	}
}
