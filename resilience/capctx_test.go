package resilience_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
)

// capOnly is a DeadlineMiddleware under which a call without a deadline of
// its own is bounded by the kernel-wide cap alone.
func capOnly() *resilience.DeadlineMiddleware {
	return resilience.NewDeadlineMiddleware(0, time.Minute)
}

// TestCapReleasesBlockedHandlerAsTimeout: a handler waiting on its context
// under the cap alone is released at the cap exactly, with ErrDeadline as
// the cause, however it reports it.
func TestCapReleasesBlockedHandlerAsTimeout(t *testing.T) {
	for _, e := range endings {
		t.Run(e.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				inv := pipeline.NewInvocation(t.Context(), nil, nil)
				b, err := invokeBlocked(capOnly(), inv, e.ret)
				wantCode(t, "Invoke", err, pipeline.CodeTimeout)
				if b.released != time.Minute || !errors.Is(b.cause, resilience.ErrDeadline) {
					t.Errorf("handler released after %v with cause %v, want 1m and ErrDeadline", b.released, b.cause)
				}
				if k := pipeline.KindOf(inv.OriginalOutcome()); k != e.wantOriginal {
					t.Errorf("OriginalOutcome() kind = %v, want %v", k, e.wantOriginal)
				}
			})
		})
	}
}

// TestCapCallerCancelled: the caller leaving before the cap is CANCELLED,
// at once.
func TestCapCallerCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		parent, cancel := context.WithCancel(t.Context())
		inv := pipeline.NewInvocation(parent, nil, nil)
		time.AfterFunc(time.Second, cancel)
		b, err := invokeBlocked(capOnly(), inv, context.Context.Err)
		wantCode(t, "Invoke", err, pipeline.CodeCancelled)
		if b.released != time.Second || !errors.Is(b.cause, context.Canceled) {
			t.Errorf("handler released after %v with cause %v, want 1s and context.Canceled", b.released, b.cause)
		}
	})
}

// TestCapIgnoredContext: a handler that never looks at its context and
// outlives the cap is a TIMEOUT — also when the caller left too, before or
// after the cap (nothing looked, so the cap wins: see DeadlineMiddleware);
// one that returns in time is not.
func TestCapIgnoredContext(t *testing.T) {
	for _, tc := range []struct {
		name       string
		run, leave time.Duration // leave 0: the caller stays
		want       string
	}{
		{"returns before the cap", 59 * time.Second, 0, ""},
		{"outlives the cap", 61 * time.Second, 0, pipeline.CodeTimeout},
		{"outlives the cap, caller left after it", 61 * time.Second, 60500 * time.Millisecond, pipeline.CodeTimeout},
		{"outlives the cap, caller left before it", 61 * time.Second, 30 * time.Second, pipeline.CodeTimeout},
		{"caller left, returns before the cap", 59 * time.Second, 30 * time.Second, pipeline.CodeCancelled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				parent, cancel := context.WithCancel(t.Context())
				defer cancel()
				if tc.leave > 0 {
					time.AfterFunc(tc.leave, cancel)
				}
				inv := pipeline.NewInvocation(parent, nil, nil)
				err := capOnly().Invoke(inv, func(*pipeline.Invocation) error {
					time.Sleep(tc.run)
					return nil
				})
				wantCode(t, "Invoke", err, tc.want)
				if orig := inv.OriginalOutcome(); orig != nil {
					t.Errorf("OriginalOutcome() = %v, want nil (the handler succeeded)", orig)
				}
			})
		})
	}
}

// TestCapContextBehavesAsAContext: under the cap alone the handler's
// context reports the cap as its deadline, carries the parent's values,
// ends its children at the cap, and is cancelled once the invocation has
// returned — whether or not anything waited on it during the call.
func TestCapContextBehavesAsAContext(t *testing.T) {
	type key struct{}
	for _, armed := range []bool{false, true} {
		name := map[bool]string{false: "never waited on", true: "waited on"}[armed]
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				parent := context.WithValue(t.Context(), key{}, "v")
				inv := pipeline.NewInvocation(parent, nil, nil)
				start := time.Now()
				var ctx context.Context
				err := capOnly().Invoke(inv, func(inv *pipeline.Invocation) error {
					ctx = inv.Context()
					if d, ok := ctx.Deadline(); !ok || !d.Equal(start.Add(time.Minute)) {
						t.Errorf("ctx.Deadline() = %v, %v; want %v", d, ok, start.Add(time.Minute))
					}
					if armed {
						select {
						case <-ctx.Done():
							t.Error("ctx.Done() closed during the call")
						default:
						}
					}
					if err := ctx.Err(); err != nil {
						t.Errorf("ctx.Err() during the call = %v, want nil", err)
					}
					if v := ctx.Value(key{}); v != "v" {
						t.Errorf("ctx.Value(key) = %v, want the parent's %q", v, "v")
					}
					return nil
				})
				if err != nil {
					t.Fatalf("Invoke = %v, want nil", err)
				}
				select {
				case <-ctx.Done():
				default:
					t.Error("ctx.Done() still open after the invocation returned")
				}
				if err := ctx.Err(); err != context.Canceled {
					t.Errorf("ctx.Err() after the invocation = %v, want context.Canceled", err)
				}
				if v := ctx.Value(key{}); v != "v" {
					t.Errorf("ctx.Value(key) after the invocation = %v, want %q", v, "v")
				}
			})
		})
	}
	t.Run("child context", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			inv := pipeline.NewInvocation(t.Context(), nil, nil)
			start := time.Now()
			err := capOnly().Invoke(inv, func(inv *pipeline.Invocation) error {
				child, cancel := context.WithCancel(inv.Context())
				defer cancel()
				<-child.Done()
				if e := time.Since(start); e != time.Minute || !errors.Is(context.Cause(child), resilience.ErrDeadline) {
					t.Errorf("child ended after %v with cause %v, want 1m and ErrDeadline", e, context.Cause(child))
				}
				return child.Err()
			})
			wantCode(t, "Invoke", err, pipeline.CodeTimeout)
		})
	})
}

// TestCapContextConcurrentWaiters: goroutines that wait on the context at
// once all see one channel, closed at the cap (run it with -race).
func TestCapContextConcurrentWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inv := pipeline.NewInvocation(t.Context(), nil, nil)
		start := time.Now()
		err := capOnly().Invoke(inv, func(inv *pipeline.Invocation) error {
			ctx := inv.Context()
			var wg sync.WaitGroup
			chans := make([]<-chan struct{}, 8)
			for i := range chans {
				wg.Go(func() {
					chans[i] = ctx.Done()
					<-chans[i]
				})
			}
			wg.Wait()
			for i, ch := range chans {
				if ch != chans[0] {
					t.Errorf("waiter %d got another Done channel", i)
				}
			}
			if e := time.Since(start); e != time.Minute {
				t.Errorf("waiters released after %v, want 1m", e)
			}
			return ctx.Err()
		})
		wantCode(t, "Invoke", err, pipeline.CodeTimeout)
	})
}

// TestCapAllocations: a call bounded by the cap alone that does not wait
// on its context costs one allocation, not a context.WithDeadlineCause;
// one with its own deadline still gets a real context.
func TestCapAllocations(t *testing.T) {
	ok := func(*pipeline.Invocation) error { return nil }
	inv := pipeline.NewInvocation(context.Background(), nil, nil)
	mw := capOnly()
	if n := testing.AllocsPerRun(500, func() {
		inv.SetDeadline(time.Time{})
		_ = mw.Invoke(inv, ok)
	}); n > 1 {
		t.Errorf("AllocsPerRun(cap only) = %v, want at most 1", n)
	}
	withTimeout := resilience.NewDeadlineMiddleware(time.Second, time.Minute)
	if n := testing.AllocsPerRun(500, func() {
		inv.SetDeadline(time.Time{})
		_ = withTimeout.Invoke(inv, ok)
	}); n < 2 {
		t.Errorf("AllocsPerRun(operation timeout) = %v, want a real deadline context (at least 2)", n)
	}
}

// TestParentBoundDeadline: when the parent context ends at the effective
// deadline by itself, the handler's context follows the parent exactly —
// its deadline, its cancellation, and the order of the two even when
// nothing looked at the context until the handler returned.
func TestParentBoundDeadline(t *testing.T) {
	for _, tc := range []struct {
		name         string
		wait         bool          // the handler waits on its context
		run          time.Duration // otherwise it works this long, ignoring it
		leave        time.Duration // the caller cancels then (0: never)
		want         string
		wantReleased time.Duration
	}{
		{"waits, deadline", true, 0, 0, pipeline.CodeTimeout, time.Second},
		{"waits, caller leaves first", true, 0, 500 * time.Millisecond, pipeline.CodeCancelled, 500 * time.Millisecond},
		{"ignores, returns in time", false, 900 * time.Millisecond, 0, "", 0},
		{"ignores, outlives the deadline, caller leaves after it", false, 1500 * time.Millisecond, 1200 * time.Millisecond, pipeline.CodeTimeout, 0},
		{"ignores, caller leaves before the deadline", false, 1500 * time.Millisecond, 500 * time.Millisecond, pipeline.CodeCancelled, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				dl, cancelDeadline := context.WithDeadline(t.Context(), start.Add(time.Second))
				defer cancelDeadline()
				parent, cancel := context.WithCancel(dl)
				defer cancel()
				if tc.leave > 0 {
					time.AfterFunc(tc.leave, cancel)
				}
				inv := pipeline.NewInvocation(parent, nil, nil)
				var released time.Duration
				err := capOnly().Invoke(inv, func(inv *pipeline.Invocation) error {
					ctx := inv.Context()
					if d, ok := ctx.Deadline(); !ok || !d.Equal(start.Add(time.Second)) {
						t.Errorf("ctx.Deadline() = %v, %v; want the parent's, %v", d, ok, start.Add(time.Second))
					}
					if !tc.wait {
						time.Sleep(tc.run)
						return nil
					}
					<-ctx.Done()
					released = time.Since(start)
					return ctx.Err()
				})
				wantCode(t, "Invoke", err, tc.want)
				if released != tc.wantReleased {
					t.Errorf("handler released after %v, want %v", released, tc.wantReleased)
				}
			})
		})
	}
}

// TestParentBoundAllocations: a call whose parent carries the deadline
// costs one allocation when it does not wait on its context.
func TestParentBoundAllocations(t *testing.T) {
	parent, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	inv := pipeline.NewInvocation(parent, nil, nil)
	mw := capOnly()
	ok := func(*pipeline.Invocation) error { return nil }
	if n := testing.AllocsPerRun(500, func() {
		inv.SetDeadline(time.Time{})
		_ = mw.Invoke(inv, ok)
	}); n > 1 {
		t.Errorf("AllocsPerRun(parent-bound deadline) = %v, want at most 1", n)
	}
}
