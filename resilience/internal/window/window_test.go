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
		wantWins            map[int]int64 // window of the waiter queued by step i, at the end
		wantMoved           map[int]bool  // whether that waiter was told it moved
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
			name: "a waiter leaving moves those behind it up; the next arrival queues at the back", limit: 1, queue: 3, length: 10 * s,
			steps: []step{
				reserve(0, Admit, 0),
				reserve(1*s, Wait, 1),  // B
				reserve(1*s, Wait, 2),  // C
				reserve(1*s, Wait, 3),  // D
				{at: 2 * s, cancel: 2}, // C leaves: D moves to window 2
				reserve(3*s, Wait, 3),  // E, behind D
				{at: 3 * s, cancel: -1, want: Reject, retry: 7 * s},
			},
			at: 3 * s, wantUsed: 1, wantQueue: 3,
			wantWins:  map[int]int64{1: 1, 3: 2, 5: 3},
			wantMoved: map[int]bool{1: false, 3: true, 5: false},
		},
		{
			name: "the permit of a waiter that left goes to the one behind it, not to a later arrival", limit: 1, queue: 2, length: 10 * s,
			steps: []step{
				reserve(0, Admit, 0),
				reserve(1*s, Wait, 1),
				reserve(1*s, Wait, 2),
				{at: 2 * s, cancel: 1}, // window 1 passes to the next waiter
				reserve(10*s, Wait, 2),
				reserve(10*s, Wait, 3),
				{at: 10 * s, cancel: -1, want: Reject, retry: 10 * s},
			},
			at: 10 * s, wantUsed: 1, wantQueue: 2,
			wantWins:  map[int]int64{2: 1, 4: 2, 5: 3},
			wantMoved: map[int]bool{2: true, 4: false},
		},
		{
			name: "with several permits per window only a waiter crossing a window boundary moves", limit: 2, queue: 4, length: 10 * s,
			steps: []step{
				reserve(0, Admit, 0),
				reserve(0, Admit, 0),
				reserve(0, Wait, 1),
				reserve(0, Wait, 1),
				reserve(0, Wait, 2),
				reserve(0, Wait, 2),
				{at: 1 * s, cancel: 3},
				reserve(1*s, Wait, 2),
			},
			at: 1 * s, wantUsed: 2, wantQueue: 4,
			wantWins:  map[int]int64{2: 1, 4: 1, 5: 2, 7: 2},
			wantMoved: map[int]bool{2: false, 4: true, 5: false, 7: false},
		},
		{
			name: "a permit given back in its own window goes to the oldest waiter", limit: 1, queue: 2, length: 10 * s,
			steps: []step{
				reserve(0, Admit, 0),
				reserve(1*s, Wait, 1),
				reserve(1*s, Wait, 2),
				{at: 10 * s, cancel: 1}, // its window opened but it left before proceeding
				reserve(10*s, Wait, 2),
			},
			at: 10 * s, wantUsed: 1, wantQueue: 1,
			wantWins:  map[int]int64{2: 1, 4: 2},
			wantMoved: map[int]bool{2: true, 4: false},
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
				{at: 10 * s, cancel: 1}, // a second Cancel gives nothing back
				reserve(10*s, Admit, 1),
				reserve(10*s, Wait, 2), // window 1 is used up again
			},
			at: 10 * s, wantUsed: 1, wantQueue: 1,
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
			wts := make([]*Waiter, len(tt.steps))
			for i, st := range tt.steps {
				if st.cancel >= 0 {
					w.Cancel(st.at, wts[st.cancel])
					continue
				}
				d, wt, retry := w.Reserve(st.at, st.deadline, true)
				win := w.Index(st.at)
				if wt != nil {
					wts[i], win = wt, wt.Win()
				}
				if d != st.want || (d == Wait && win != st.wantWin) || (d == Reject && retry != st.retry) {
					t.Fatalf("step %d: Reserve(%v, %v) = %v, window %d, retry %v; want %v, window %d, retry %v",
						i, st.at, st.deadline, d, win, retry, st.want, st.wantWin, st.retry)
				}
			}
			w.Advance(tt.at)
			if w.Used() != tt.wantUsed || w.Queued() != tt.wantQueue {
				t.Errorf("at %v: Used, Queued = %d, %d; want %d, %d", tt.at, w.Used(), w.Queued(), tt.wantUsed, tt.wantQueue)
			}
			for i, want := range tt.wantWins {
				if got := wts[i].Win(); got != want {
					t.Errorf("waiter of step %d: Win() = %d, want %d", i, got, want)
				}
			}
			for i, want := range tt.wantMoved {
				if got := len(wts[i].Moved) > 0; got != want {
					t.Errorf("waiter of step %d: told it moved = %v, want %v", i, got, want)
				}
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
// arrivals, cancellations (queued, and just after the window opened) and
// time steps, and checks after every step that no window admits more than
// the limit, the queue never exceeds its limit, Queued matches the live
// waiters exactly, and the queue is FIFO: waiters hold windows in arrival
// order, an arrival is admitted only when nobody waits, and a waiter's
// window never moves later.
func TestInvariants(t *testing.T) {
	t.Parallel()
	for _, cfg := range []struct{ limit, queue int }{{1, 1}, {1, 5}, {3, 2}, {2, 7}, {3, 10}} {
		t.Run(fmt.Sprintf("limit%d_queue%d", cfg.limit, cfg.queue), func(t *testing.T) {
			w := New(cfg.limit, 10*s, cfg.queue)
			taken := map[int64]int{} // permits taken per window, by admission or by a waiter proceeding
			type waiter struct {
				wt    *Waiter
				first int64 // the window it was given on arrival
			}
			var live []waiter // oldest first
			now := time.Duration(0)
			seed := uint32(12345)
			rnd := func(n int) int { seed = seed*1664525 + 1013904223; return int(seed>>16) % n }
			leave := func(j int) {
				w.Cancel(now, live[j].wt)
				live = append(live[:j], live[j+1:]...)
			}
			for i := range 5000 {
				switch rnd(4) {
				case 0: // time passes; waiters whose window opened proceed, or some leave just then
					now += time.Duration(rnd(7)) * s
					idx := w.Index(now)
					for j := 0; j < len(live); {
						win := live[j].wt.Win()
						switch {
						case win > idx:
							j++
						case win == idx && rnd(4) == 0:
							leave(j) // may move a waiter behind into this window: look again from the start
							j = 0
						default:
							taken[win]++
							live = append(live[:j], live[j+1:]...)
						}
					}
				case 1: // a queued waiter leaves
					if len(live) > 0 {
						leave(rnd(len(live)))
					}
				default:
					switch d, wt, _ := w.Reserve(now, 0, true); d {
					case Admit:
						if len(live) > 0 {
							t.Fatalf("step %d: admitted at once while %d older calls wait", i, len(live))
						}
						taken[w.Index(now)]++
					case Wait:
						if n := len(live); n > 0 && wt.Win() < live[n-1].wt.Win() {
							t.Fatalf("step %d: an arrival got window %d ahead of an older waiter's %d", i, wt.Win(), live[n-1].wt.Win())
						}
						live = append(live, waiter{wt, wt.Win()})
					}
				}
				w.Advance(now)
				idx := w.Index(now)
				pending := map[int64]int{}
				for j, l := range live {
					win := l.wt.Win()
					pending[win]++
					if win > l.first || win < idx || (j > 0 && win < live[j-1].wt.Win()) {
						t.Fatalf("step %d: waiter %d holds window %d (given %d, current %d, the one ahead %d)", i, j, win, l.first, idx, live[max(j-1, 0)].wt.Win())
					}
				}
				for win, n := range pending {
					if n+taken[win] > cfg.limit {
						t.Fatalf("step %d: window %d holds %d permits, limit %d", i, win, n+taken[win], cfg.limit)
					}
				}
				if got := taken[idx]; got > cfg.limit {
					t.Fatalf("step %d: window %d took %d permits, limit %d", i, idx, got, cfg.limit)
				}
				queued := 0
				for _, l := range live {
					if l.wt.Win() > idx {
						queued++
					}
				}
				if int(w.Queued()) != queued || queued > cfg.queue {
					t.Fatalf("step %d: Queued() = %d, live waiters %d, queue limit %d", i, w.Queued(), queued, cfg.queue)
				}
			}
		})
	}
}
