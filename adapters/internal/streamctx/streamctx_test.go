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
