package outclock

import (
	"context"
	"math"
	"testing"
	"testing/synctest"
	"time"
)

// TestClocks runs each clock under synctest and asserts the virtual
// instant at which it ends the stream, and with which cause.
func TestClocks(t *testing.T) {
	const idle, stall = 2 * time.Second, time.Second
	cases := []struct {
		name  string
		run   func(k *Clocks) // what the stream does after it opens
		want  error
		after time.Duration
	}{
		{"idle from the start", func(*Clocks) {}, ErrIdle, idle},
		{"a message restarts idle", func(k *Clocks) {
			time.Sleep(1500 * time.Millisecond)
			k.Touch()
		}, ErrIdle, 1500*time.Millisecond + idle},
		{"a send blocked for the stall", func(k *Clocks) {
			time.Sleep(300 * time.Millisecond)
			k.Sending(true)
		}, ErrStall, 300*time.Millisecond + stall},
		{"a send that returns clears the stall", func(k *Clocks) {
			k.Sending(true)
			time.Sleep(900 * time.Millisecond)
			k.Sending(false)
			k.Touch()
		}, ErrIdle, 900*time.Millisecond + idle},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				ctx, cancel := context.WithCancelCause(t.Context())
				k := Start(idle, stall, cancel)
				defer k.Stop()
				tc.run(k)
				<-ctx.Done()
				if got := context.Cause(ctx); got != tc.want {
					t.Errorf("cause %v, want %v", got, tc.want)
				}
				if at := time.Since(start); at != tc.after {
					t.Errorf("ended at %v, want %v", at, tc.after)
				}
				if got := Outcome(ctx, context.Canceled); got != tc.want {
					t.Errorf("Outcome %v, want %v", got, tc.want)
				}
			})
		})
	}
}

// TestStop: stopped clocks end nothing, and Outcome leaves an error of
// another cause as it is.
func TestStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancelCause(t.Context())
		k := Start(time.Second, time.Second, cancel)
		k.Stop()
		time.Sleep(time.Minute)
		if ctx.Err() != nil || !k.Stopped() {
			t.Fatalf("after Stop: context %v, stopped %v", ctx.Err(), k.Stopped())
		}
		cancel(nil)
		if got := Outcome(ctx, context.Canceled); got != context.Canceled {
			t.Fatalf("Outcome of a cancel: %v", got)
		}
	})
}

// TestIdleClocksSleep: while no send is blocked, the timer sleeps until
// the idle clock, whatever the stall; with no idle clock it does not run.
// A send that blocks brings it forward, and the stall ends the stream.
func TestIdleClocksSleep(t *testing.T) {
	for _, idle := range []time.Duration{time.Hour, 0} {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithCancelCause(t.Context())
			k := Start(idle, time.Second, cancel)
			defer k.Stop()
			want := int64(idle)
			if idle == 0 {
				want = math.MaxInt64
			}
			for range 2 {
				if at := k.armed.Load(); at != want {
					t.Fatalf("idle %v: the timer fires at %v, want %v", idle, time.Duration(at), time.Duration(want))
				}
				time.Sleep(10 * time.Minute)
			}
			start := time.Now()
			k.Sending(true)
			<-ctx.Done()
			if got, at := context.Cause(ctx), time.Since(start); got != ErrStall || at != time.Second {
				t.Fatalf("idle %v: ended with %v after %v, want %v after 1s", idle, got, at, ErrStall)
			}
		})
	}
}
