package window

import (
	"fmt"
	"testing"
	"time"
)

const s = time.Second

// step is one action on a Window at time at: a reservation (cancel < 0)
// or the cancellation of the reservation made by step cancel.
type step struct {
	at       time.Duration
	deadline time.Duration // for reservations; 0: none
	cancel   int           // index of the step whose reservation is given back; -1: reserve
	want     Decision
	wantWin  int64         // for Wait
	retry    time.Duration // for Reject
}

func reserve(at time.Duration, want Decision, win int64) step {
	return step{at: at, cancel: -1, want: want, wantWin: win}
}

func TestReserve(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                string
		limit, queue        int
		length              time.Duration
		steps               []step
		wantUsed, wantQueue int64
		at                  time.Duration // of the final check
	}{
		{
			name: "window exhaustion rejects until the next window", limit: 2, length: 60 * s,
			steps: []step{
				reserve(0, Admit, 0),
				reserve(1*s, Admit, 0),
				{at: 10 * s, cancel: -1, want: Reject, retry: 50 * s},
				{at: 59*s + 500*time.Millisecond, cancel: -1, want: Reject, retry: 500 * time.Millisecond},
				reserve(60*s, Admit, 1),
			},
			at: 60 * s, wantUsed: 1,
		},
		{
			name: "queue waits for the next window, then overflows", limit: 1, queue: 2, length: 10 * s,
			steps: []step{
				reserve(0, Admit, 0),
				reserve(1*s, Wait, 1),
				reserve(2*s, Wait, 2),
				{at: 3 * s, cancel: -1, want: Reject, retry: 7 * s},
			},
			at: 3 * s, wantUsed: 1, wantQueue: 2,
		},
		{
			name: "queued permits become used when their window opens", limit: 2, queue: 2, length: s,
			steps: []step{
				reserve(0, Admit, 0),
				reserve(0, Admit, 0),
				reserve(0, Wait, 1),
				reserve(0, Wait, 1),
				{at: 0, cancel: -1, want: Reject, retry: s},
				reserve(s, Wait, 2), // window 1 is full of the once-queued calls
			},
			at: s, wantUsed: 2, wantQueue: 1,
		},
		{
			name: "a deadline before the next window is rejected at once", limit: 1, queue: 5, length: 10 * s,
			steps: []step{
				reserve(0, Admit, 0),
				{at: 4 * s, deadline: 9 * s, cancel: -1, want: Reject, retry: 6 * s},
				{at: 4 * s, deadline: 10 * s, cancel: -1, want: Reject, retry: 6 * s}, // dies as the window opens
				{at: 4 * s, deadline: 11 * s, cancel: -1, want: Wait, wantWin: 1},
				{at: 4 * s, deadline: 19 * s, cancel: -1, want: Reject, retry: 6 * s}, // would wait for window 2
			},
			at: 4 * s, wantUsed: 1, wantQueue: 1,
		},
		{
			name: "cancelling the last reservation frees its queue place", limit: 1, queue: 1, length: 10 * s,
			steps: []step{
				reserve(0, Admit, 0),
				reserve(1*s, Wait, 1),
				{at: 2 * s, cancel: 1},
				reserve(3*s, Wait, 1),
			},
			at: 3 * s, wantUsed: 1, wantQueue: 1,
		},
		{
			name: "cancelling a middle reservation leaves a hole the next arrival fills", limit: 1, queue: 3, length: 10 * s,
			steps: []step{
				reserve(0, Admit, 0),
				reserve(1*s, Wait, 1),
				reserve(1*s, Wait, 2),
				reserve(1*s, Wait, 3),
				{at: 2 * s, cancel: 1}, // window 1 freed
				reserve(3*s, Wait, 1),
				{at: 3 * s, cancel: -1, want: Reject, retry: 7 * s},
			},
			at: 3 * s, wantUsed: 1, wantQueue: 3,
		},
		{
			name: "a hole nobody filled is a free permit when its window opens", limit: 1, queue: 2, length: 10 * s,
			steps: []step{
				reserve(0, Admit, 0),
				reserve(1*s, Wait, 1),
				reserve(1*s, Wait, 2),
				{at: 2 * s, cancel: 1},
				reserve(10*s, Admit, 1),
				{at: 10 * s, cancel: -1, want: Wait, wantWin: 3},
			},
			at: 10 * s, wantUsed: 1, wantQueue: 2,
		},
		{
			name: "cancelling back to the current window empties the queue", limit: 2, queue: 4, length: 10 * s,
			steps: []step{
				reserve(0, Admit, 0),
				reserve(0, Admit, 0),
				reserve(0, Wait, 1),
				reserve(0, Wait, 1),
				reserve(0, Wait, 2),
				{at: 1 * s, cancel: 2}, // hole in window 1
				{at: 1 * s, cancel: 4}, // tail 2 -> 1
				{at: 1 * s, cancel: 3}, // tail 1 -> 0 (the hole is absorbed)
			},
			at: 1 * s, wantUsed: 2, wantQueue: 0,
		},
		{
			name: "a permit given back in its own window can be taken again", limit: 1, queue: 1, length: 10 * s,
			steps: []step{
				reserve(0, Admit, 0),
				reserve(1*s, Wait, 1),
				{at: 10 * s, cancel: 1}, // the window opened but the waiter left before proceeding
				reserve(10*s, Admit, 1),
			},
			at: 10 * s, wantUsed: 1,
		},
		{
			name: "a permit of a window that has ended is gone", limit: 1, queue: 1, length: 10 * s,
			steps: []step{
				reserve(0, Admit, 0),
				reserve(1*s, Wait, 1),
				{at: 25 * s, cancel: 1},
				reserve(25*s, Admit, 2),
			},
			at: 25 * s, wantUsed: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := New(tt.limit, tt.length, tt.queue)
			wins := make([]int64, len(tt.steps))
			for i, st := range tt.steps {
				if st.cancel >= 0 {
					w.Cancel(st.at, wins[st.cancel])
					continue
				}
				d, win, retry := w.Reserve(st.at, st.deadline, true)
				wins[i] = win
				if d != st.want || (d == Wait && win != st.wantWin) || (d == Reject && retry != st.retry) {
					t.Fatalf("step %d: Reserve(%v, %v) = %v, window %d, retry %v; want %v, window %d, retry %v",
						i, st.at, st.deadline, d, win, retry, st.want, st.wantWin, st.retry)
				}
			}
			w.Advance(tt.at)
			if w.Used() != tt.wantUsed || w.Queued() != tt.wantQueue {
				t.Errorf("at %v: Used, Queued = %d, %d; want %d, %d", tt.at, w.Used(), w.Queued(), tt.wantUsed, tt.wantQueue)
			}
		})
	}
}

func TestReserveWithoutWaiting(t *testing.T) {
	t.Parallel()
	w := New(1, s, 10)
	if d, _, _ := w.Reserve(0, 0, false); d != Admit {
		t.Fatalf("first Reserve(mayWait=false) = %v, want Admit", d)
	}
	if d, _, retry := w.Reserve(s/4, 0, false); d != Reject || retry != 3*s/4 {
		t.Fatalf("second Reserve(mayWait=false) = %v, %v; want Reject, 750ms", d, retry)
	}
}

func (d Decision) String() string { return [...]string{"Admit", "Wait", "Reject"}[d] }

// TestInvariants drives a window with a deterministic pseudo-random mix of
// arrivals, cancellations and time steps, and checks after every step
// that no window admits more than the limit, the queue never exceeds its
// limit, and Queued matches the live reservations exactly.
func TestInvariants(t *testing.T) {
	t.Parallel()
	for _, cfg := range []struct{ limit, queue int }{{1, 1}, {1, 5}, {3, 2}, {2, 7}} {
		t.Run(fmt.Sprintf("limit%d_queue%d", cfg.limit, cfg.queue), func(t *testing.T) {
			w := New(cfg.limit, 10*s, cfg.queue)
			taken := map[int64]int{}   // permits taken per window, by admission or by a waiter proceeding
			pending := map[int64]int{} // live reservations per future window
			var live []int64
			now := time.Duration(0)
			seed := uint32(12345)
			rnd := func(n int) int { seed = seed*1664525 + 1013904223; return int(seed>>16) % n }
			for i := range 3000 {
				switch rnd(4) {
				case 0: // time passes; waiters whose window opened proceed
					now += time.Duration(rnd(7)) * s
					idx := w.Index(now)
					kept := live[:0]
					for _, win := range live {
						if win <= idx {
							taken[win]++
							pending[win]--
						} else {
							kept = append(kept, win)
						}
					}
					live = kept
				case 1: // a waiter leaves
					if len(live) > 0 {
						j := rnd(len(live))
						w.Cancel(now, live[j])
						pending[live[j]]--
						live = append(live[:j], live[j+1:]...)
					}
				default:
					switch d, win, _ := w.Reserve(now, 0, true); d {
					case Admit:
						taken[win]++
					case Wait:
						pending[win]++
						live = append(live, win)
					}
				}
				w.Advance(now)
				idx := w.Index(now)
				if got := taken[idx] + pending[idx]; got > cfg.limit {
					t.Fatalf("step %d: window %d holds %d permits, limit %d", i, idx, got, cfg.limit)
				}
				for win, n := range pending {
					if win > idx && n+taken[win] > cfg.limit {
						t.Fatalf("step %d: future window %d holds %d permits, limit %d", i, win, n, cfg.limit)
					}
				}
				if int(w.Queued()) != len(live) || len(live) > cfg.queue {
					t.Fatalf("step %d: Queued() = %d, live reservations %d, queue limit %d", i, w.Queued(), len(live), cfg.queue)
				}
			}
		})
	}
}
