package resilience_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/resilience"
)

// TestFixedWindowQueueStaysFIFOAfterCancel is the case where one
// permit per 1 s window, a queue of 3; B, C and D queue for windows 1, 2
// and 3, C gives up, then E arrives. Oldest first means D moves up into
// C's window and E waits behind it: B at 1 s, D at 2 s, E at 3 s (before
// the fix E took C's freed permit: B at 1 s, E at 2 s, D at 3 s). The
// queue's other promises hold around the move: the limit, the retryAfter
// of a rejection, and a deadline before the window a caller would wait
// for. F, queued at 1 s, waits behind E for window 4.
func TestFixedWindowQueueStaysFIFOAfterCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := resilience.NewFixedWindow(1, time.Second, 3)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if _, err := l.Wait(t.Context()); err != nil { // A takes window 0
			t.Fatalf("Wait(A) = %v", err)
		}
		type result struct {
			name string
			at   time.Duration
			err  error
		}
		results := make(chan result, 5)
		queue := func(ctx context.Context, name string) {
			go func() {
				_, err := l.Wait(ctx)
				results <- result{name, time.Since(start), err}
			}()
			synctest.Wait() // queued, in this order
		}
		cctx, cancelC := context.WithCancel(t.Context())
		queue(t.Context(), "B")
		queue(cctx, "C")
		queue(t.Context(), "D")
		if n := resilience.WindowQueueDepth(l); n != 3 {
			t.Fatalf("QueueDepth() with B, C, D queued = %d, want 3", n)
		}
		time.Sleep(100 * time.Millisecond)
		cancelC()
		if r := <-results; r.name != "C" || !errors.Is(r.err, context.Canceled) {
			t.Fatalf("C after its cancellation: %s, %v; want C, context.Canceled", r.name, r.err)
		}
		if n := resilience.WindowQueueDepth(l); n != 2 {
			t.Fatalf("QueueDepth() after C left = %d, want 2", n)
		}
		dl, cancel := context.WithDeadline(t.Context(), start.Add(3*time.Second+500*time.Millisecond))
		defer cancel()
		queue(dl, "E") // must not be moved back past its deadline either
		if n := resilience.WindowQueueDepth(l); n != 3 {
			t.Fatalf("QueueDepth() with B, D, E queued = %d, want 3", n)
		}
		if retry, err := l.Wait(t.Context()); !errors.Is(err, resilience.ErrLimited) || retry != 900*time.Millisecond {
			t.Fatalf("Wait() with the queue full = %v, %v; want 900ms, ErrLimited", retry, err)
		}
		time.Sleep(900 * time.Millisecond) // B's window opens; a queue place is free
		// F would wait for window 4 (opens at 4 s): a deadline at 4 s
		// turns it away at once, with the time until the next window.
		dl4, cancel4 := context.WithDeadline(t.Context(), start.Add(4*time.Second))
		retry, err := l.Wait(dl4)
		cancel4()
		if !errors.Is(err, resilience.ErrLimited) || retry != time.Second {
			t.Fatalf("Wait() at 1s with a deadline at the opening of its window = %v, %v; want 1s, ErrLimited", retry, err)
		}
		dlF, cancelF := context.WithDeadline(t.Context(), start.Add(4*time.Second+500*time.Millisecond))
		defer cancelF()
		queue(dlF, "F")
		var got []string
		for range 4 {
			r := <-results
			if r.err != nil {
				t.Fatalf("Wait(%s) = %v after %v, want nil", r.name, r.err, r.at)
			}
			got = append(got, fmt.Sprintf("%s at %v", r.name, r.at))
		}
		t.Logf("admitted: %v", got)
		if want := []string{"B at 1s", "D at 2s", "E at 3s", "F at 4s"}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("admitted %v, want %v (oldest first)", got, want)
		}
	})
}

// TestKeyedFixedWindowFullSweepRate floods a keyed limiter at its cap with
// a new key every millisecond for 3 s: limiters turn idle one by one as
// their own windows end, so before the fix nearly every sweep freed a few
// and the next new key swept the whole set again. A set at the cap is
// swept at most once per 100 ms, and the cap holds exactly.
func TestKeyedFixedWindowFullSweepRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const maxKeys, flood = 100, 3 * time.Second
		l, err := resilience.NewKeyedFixedWindow(1, time.Second, 0, resilience.WithMaxKeys(maxKeys))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		var full []time.Duration // when a set at the cap was swept
		sweeps := 0
		l.OnSweepForTest(func(keys int) {
			sweeps++
			if keys >= maxKeys {
				full = append(full, time.Since(start))
			}
		})
		admitted := 0
		for i := 0; time.Since(start) < flood; i++ {
			if _, err := l.Wait(t.Context(), fmt.Sprint("flood-", i)); err == nil {
				admitted++
			} else if !errors.Is(err, resilience.ErrLimited) {
				t.Fatalf("Wait(flood-%d) = %v", i, err)
			}
			if n := l.Len(); n > maxKeys {
				t.Fatalf("after %d keys: Len() = %d, want at most %d", i+1, n, maxKeys)
			}
			time.Sleep(time.Millisecond)
		}
		perSecond := make([]int, int(flood/time.Second))
		for _, at := range full {
			perSecond[at/time.Second]++
		}
		t.Logf("3000 new keys at 1/ms, cap %d: %d sweeps, %d of a full set (per second: %v), %d keys admitted", maxKeys, sweeps, len(full), perSecond, admitted)
		for i := 1; i < len(full); i++ {
			if gap := full[i] - full[i-1]; gap < 100*time.Millisecond {
				t.Fatalf("full set swept at %v and again at %v (%v apart), want at least 100ms apart", full[i-1], full[i], gap)
			}
		}
		if admitted < 2*maxKeys {
			t.Errorf("%d keys admitted over 3 windows, want at least %d: idle limiters must still be swept", admitted, 2*maxKeys)
		}
	})
}
