package deadline_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience/deadline"
)

// capOnly is a deadline middleware; capped returns an invocation bounded by
// the kernel-wide cap alone, a minute from now.
func capOnly() pipeline.Middleware {
	return deadline.Middleware()
}

func capped() *pipeline.Invocation { return due(time.Minute, pipeline.DeadlineKernel) }

// TestCapReleasesBlockedHandlerAsTimeout: a handler waiting on its context
// under the cap alone is released at the cap exactly, with ErrDeadline as
// the cause, however it reports it.
func TestCapReleasesBlockedHandlerAsTimeout(t *testing.T) {
	for _, e := range endings {
		t.Run(e.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b, err := invokeBlocked(capOnly(), t.Context(), capped(), e.ret)
				wantCode(t, "Invoke", err, pipeline.CodeTimeout)
				if b.released != time.Minute || !errors.Is(b.cause, deadline.ErrDeadline) {
					t.Errorf("handler released after %v with cause %v, want 1m and ErrDeadline", b.released, b.cause)
				}
				wantCause(t, err, b.ret)
			})
		})
	}
}

// TestCapCallerCancelled: the caller leaving before the cap is CANCELLED,
// at once.
func TestCapCallerCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		parent, cancel := context.WithCancel(t.Context())
		time.AfterFunc(time.Second, cancel)
		b, err := invokeBlocked(capOnly(), parent, capped(), context.Context.Err)
		wantCode(t, "Invoke", err, pipeline.CodeCanceled)
		if b.released != time.Second || !errors.Is(b.cause, context.Canceled) {
			t.Errorf("handler released after %v with cause %v, want 1s and context.Canceled", b.released, b.cause)
		}
	})
}

// TestCapIgnoredContext: a handler that never looks at its context and
// outlives the cap is a TIMEOUT — also when the caller left too, before or
// after the cap (nothing looked, so the cap wins: see the deadline middleware);
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
		{"caller left, returns before the cap", 59 * time.Second, 30 * time.Second, pipeline.CodeCanceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				parent, cancel := context.WithCancel(t.Context())
				defer cancel()
				if tc.leave > 0 {
					time.AfterFunc(tc.leave, cancel)
				}
				_, err := capOnly().Invoke(parent, capped(), func(context.Context, *pipeline.Invocation) (any, error) {
					time.Sleep(tc.run)
					return nil, nil
				})
				wantCode(t, "Invoke", err, tc.want)
				if c := errors.Unwrap(pipeline.AsError(err)); c != nil {
					t.Errorf("outcome wraps %v, want nothing (the handler succeeded)", c)
				}
			})
		})
	}
}

// TestCapContextBehavesAsAContext: under the cap alone the handler's
// context reports the cap as its deadline, carries the parent's values,
// ends its children at the cap, and is canceled once the invocation has
// returned — whether or not anything waited on it during the call.
func TestCapContextBehavesAsAContext(t *testing.T) {
	type key struct{}
	for _, armed := range []bool{false, true} {
		name := map[bool]string{false: "never waited on", true: "waited on"}[armed]
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				parent := context.WithValue(t.Context(), key{}, "v")
				start := time.Now()
				var ctx context.Context
				_, err := capOnly().Invoke(parent, capped(), func(hctx context.Context, _ *pipeline.Invocation) (any, error) {
					ctx = hctx
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
					return nil, nil
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
			start := time.Now()
			_, err := capOnly().Invoke(t.Context(), capped(), func(ctx context.Context, _ *pipeline.Invocation) (any, error) {
				child, cancel := context.WithCancel(ctx)
				defer cancel()
				<-child.Done()
				if e := time.Since(start); e != time.Minute || !errors.Is(context.Cause(child), deadline.ErrDeadline) {
					t.Errorf("child ended after %v with cause %v, want 1m and ErrDeadline", e, context.Cause(child))
				}
				return nil, child.Err()
			})
			wantCode(t, "Invoke", err, pipeline.CodeTimeout)
		})
	})
}

// TestCapContextConcurrentWaiters: goroutines that wait on the context at
// once all see one channel, closed at the cap (run it with -race).
func TestCapContextConcurrentWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		_, err := capOnly().Invoke(t.Context(), capped(), func(ctx context.Context, _ *pipeline.Invocation) (any, error) {
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
			return nil, ctx.Err()
		})
		wantCode(t, "Invoke", err, pipeline.CodeTimeout)
	})
}

// TestCapAllocations: a call bounded by the cap alone, or by any deadline
// under a parent that can never be cancelled, that does not wait on its
// context costs one allocation, not a context.WithDeadlineCause; one with
// its own deadline under a cancellable parent still gets a real context
// (its cancellation and its deadline must be ordered exactly).
func TestCapAllocations(t *testing.T) {
	ok := func(context.Context, *pipeline.Invocation) (any, error) { return nil, nil }
	ctx := context.Background()
	mw := capOnly()
	inv := due(time.Hour, pipeline.DeadlineKernel)
	if n := testing.AllocsPerRun(500, func() { _, _ = mw.Invoke(ctx, inv, ok) }); n > 1 {
		t.Errorf("AllocsPerRun(cap only) = %v, want at most 1", n)
	}
	withTimeout := due(time.Hour, pipeline.DeadlineOperation)
	if n := testing.AllocsPerRun(500, func() { _, _ = mw.Invoke(ctx, withTimeout, ok) }); n > 1 {
		t.Errorf("AllocsPerRun(operation timeout, uncancellable parent) = %v, want at most 1", n)
	}
	cancellable, cancel := context.WithCancel(ctx)
	defer cancel()
	_ = cancellable.Done() // its channel exists already, as a server's request context's does
	if n := testing.AllocsPerRun(500, func() { _, _ = mw.Invoke(cancellable, withTimeout, ok) }); n < 2 {
		t.Errorf("AllocsPerRun(operation timeout, cancellable parent) = %v, want a real deadline context (at least 2)", n)
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
		{"waits, caller leaves first", true, 0, 500 * time.Millisecond, pipeline.CodeCanceled, 500 * time.Millisecond},
		{"ignores, returns in time", false, 900 * time.Millisecond, 0, "", 0},
		{"ignores, outlives the deadline, caller leaves after it", false, 1500 * time.Millisecond, 1200 * time.Millisecond, pipeline.CodeTimeout, 0},
		{"ignores, caller leaves before the deadline", false, 1500 * time.Millisecond, 500 * time.Millisecond, pipeline.CodeCanceled, 0},
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
				inv := pipeline.NewInvocation(pipeline.Spec{Deadline: start.Add(time.Second), DeadlineSource: pipeline.DeadlineCaller})
				var released time.Duration
				_, err := capOnly().Invoke(parent, inv, func(ctx context.Context, _ *pipeline.Invocation) (any, error) {
					if d, ok := ctx.Deadline(); !ok || !d.Equal(start.Add(time.Second)) {
						t.Errorf("ctx.Deadline() = %v, %v; want the parent's, %v", d, ok, start.Add(time.Second))
					}
					if !tc.wait {
						time.Sleep(tc.run)
						return nil, nil
					}
					<-ctx.Done()
					released = time.Since(start)
					return nil, ctx.Err()
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
	d, _ := parent.Deadline()
	inv := pipeline.NewInvocation(pipeline.Spec{Deadline: d, DeadlineSource: pipeline.DeadlineCaller})
	mw := capOnly()
	ok := func(context.Context, *pipeline.Invocation) (any, error) { return nil, nil }
	if n := testing.AllocsPerRun(500, func() { _, _ = mw.Invoke(parent, inv, ok) }); n > 1 {
		t.Errorf("AllocsPerRun(parent-bound deadline) = %v, want at most 1", n)
	}
}

// TestUncancellableParentDeadline: under a parent that can never be
// cancelled, an operation's deadline armed lazily still ends a handler
// blocked on its context at the deadline exactly, and a handler that
// ignored its context and returns after the deadline is TIMEOUT.
func TestUncancellableParentDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mw := deadline.Middleware()
		start := time.Now()
		var released time.Duration
		var cause error
		_, err := mw.Invoke(context.Background(), due(time.Second, pipeline.DeadlineOperation), func(ctx context.Context, _ *pipeline.Invocation) (any, error) {
			<-ctx.Done()
			released, cause = time.Since(start), context.Cause(ctx)
			return nil, ctx.Err()
		})
		wantCode(t, "blocked handler", err, pipeline.CodeTimeout)
		if released != time.Second || cause != deadline.ErrDeadline {
			t.Errorf("handler released after %v with cause %v, want 1s and ErrDeadline", released, cause)
		}
		_, err = mw.Invoke(context.Background(), due(time.Second, pipeline.DeadlineOperation), func(ctx context.Context, _ *pipeline.Invocation) (any, error) {
			time.Sleep(2 * time.Second) // never looks at ctx
			return "late", nil
		})
		wantCode(t, "handler ignoring its context", err, pipeline.CodeTimeout)
	})
}
