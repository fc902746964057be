package streamctx

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// TestFollow: the context ends with the caller's cause while the stream
// runs, not once the stream has ended, and keeps the caller's deadline.
func TestFollow(t *testing.T) {
	errLeft := errors.New("caller left")
	t.Run("caller leaves", func(t *testing.T) {
		caller, leave := context.WithCancelCause(context.Background())
		ctx, stop := Follow(caller, func() bool { return false })
		defer stop()
		leave(errLeft)
		<-ctx.Done()
		if !errors.Is(context.Cause(ctx), errLeft) {
			t.Fatalf("cause %v, want %v", context.Cause(ctx), errLeft)
		}
	})
	t.Run("stream ended first", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			caller, leave := context.WithCancelCause(context.Background())
			ctx, stop := Follow(caller, func() bool { return true })
			leave(errLeft)
			synctest.Wait() // the caller's end has been seen
			if ctx.Err() != nil {
				t.Fatalf("ended with %v after the stream's own end", context.Cause(ctx))
			}
			stop()
			if ctx.Err() == nil {
				t.Fatal("stop left the context running")
			}
		})
	})
	t.Run("deadline kept", func(t *testing.T) {
		d := time.Now().Add(time.Hour)
		caller, cancel := context.WithDeadline(context.Background(), d)
		defer cancel()
		ctx, stop := Follow(caller, func() bool { return false })
		defer stop()
		if got, ok := ctx.Deadline(); !ok || !got.Equal(d) {
			t.Fatalf("deadline %v, %v; want %v", got, ok, d)
		}
	})
}

// TestAwaitEnd: AwaitEnd returns as the context ends, and after
// resetGrace when it does not end: an error that only looks like a
// reset holds nothing for long.
func TestAwaitEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		start := time.Now()
		go func() {
			time.Sleep(time.Millisecond)
			cancel()
		}()
		AwaitEnd(ctx)
		if d := time.Since(start); d != time.Millisecond {
			t.Fatalf("returned after %v, want 1ms, as the context ended", d)
		}
		start = time.Now()
		AwaitEnd(context.Background())
		if d := time.Since(start); d != resetGrace {
			t.Fatalf("returned after %v for a context that never ends, want %v", d, resetGrace)
		}
	})
}
