// Package window is the bookkeeping of a fixed-window rate limiter with a
// queue: which window each admitted or queued call takes a permit in.
//
// Time is an offset from the limiter's origin; window i covers
// [i*Length, (i+1)*Length). Nothing here reads the clock, sleeps or locks:
// the caller serialises access and waits (see resilience.FixedWindow).
//
// A call that finds the current window used up reserves a permit in a
// future window and waits for that window to open. Reservations fill
// windows in arrival order, so the oldest waiter is admitted first and
// none is ever admitted later than the window it was promised. A waiter
// that gives up frees its permit: when it held the last reservation it is
// simply removed, otherwise its window keeps a hole that the next arrival
// fills (no older waiter is delayed by that). At most Limit permits are
// ever taken in one window.
package window

import (
	"slices"
	"time"
)

// Window is the state of one fixed-window limiter. The zero value is not
// usable; call New.
type Window struct {
	length time.Duration
	limit  int64
	queue  int64 // most reservations waiting in future windows

	cur   int64   // index of the current window, as of the last Advance
	used  int64   // permits taken in cur
	tail  int64   // last window holding a reservation; tail <= cur: none
	tailN int64   // reservations in tail (1..limit)
	holes []int64 // windows in (cur, tail] holding one freed permit each, ascending
}

// New returns a window state admitting limit calls per length, with up to
// queue calls waiting for later windows. limit and length must be
// positive and queue non-negative (the caller validates).
func New(limit int, length time.Duration, queue int) *Window {
	return &Window{length: length, limit: int64(limit), queue: int64(queue)}
}

// Index returns the index of the window containing now.
func (w *Window) Index(now time.Duration) int64 { return int64(now / w.length) }

// Start returns the offset at which window i opens.
func (w *Window) Start(i int64) time.Duration { return time.Duration(i) * w.length }

// Advance moves the state to the window containing now. Permits reserved
// for that window become used; holes in past windows are dropped.
func (w *Window) Advance(now time.Duration) {
	i := w.Index(now)
	if i <= w.cur {
		return
	}
	w.cur = i
	switch {
	case i < w.tail:
		w.used = w.limit
	case i == w.tail:
		w.used = w.tailN
	default:
		w.used = 0
	}
	n := 0
	for n < len(w.holes) && w.holes[n] <= i {
		if w.holes[n] == i {
			w.used--
		}
		n++
	}
	w.holes = slices.Delete(w.holes, 0, n)
}

// Used returns the permits taken in the current window (as of the last
// Advance).
func (w *Window) Used() int64 { return w.used }

// Queued returns the number of reservations waiting for a future window.
func (w *Window) Queued() int64 {
	if w.tail <= w.cur {
		return 0
	}
	return (w.tail-w.cur-1)*w.limit + w.tailN - int64(len(w.holes))
}

// Decision is the result of Reserve.
type Decision uint8

// The decisions.
const (
	// Admit: a permit in the current window was taken.
	Admit Decision = iota
	// Wait: a permit in a future window was reserved; wait until it opens.
	Wait
	// Reject: the window is used up and the queue is full, or the call's
	// deadline comes before the window it would wait for.
	Reject
)

// Reserve takes a permit for a call arriving at now whose deadline is at
// offset deadline (deadline <= 0: none). On Admit the call proceeds; on
// Wait it must wait until Start(win) and then proceed, or give the permit
// back with Cancel. On Reject, retryAfter is the time until the next
// window opens. With mayWait false the call is never queued.
func (w *Window) Reserve(now, deadline time.Duration, mayWait bool) (d Decision, win int64, retryAfter time.Duration) {
	w.Advance(now)
	if w.used < w.limit {
		w.used++
		return Admit, w.cur, 0
	}
	retryAfter = w.Start(w.cur+1) - now
	if !mayWait || w.Queued() >= w.queue {
		return Reject, 0, retryAfter
	}
	hole := len(w.holes) > 0
	switch {
	case hole:
		win = w.holes[0]
	case w.tail <= w.cur:
		win = w.cur + 1
	case w.tailN < w.limit:
		win = w.tail
	default:
		win = w.tail + 1
	}
	if deadline > 0 && deadline <= w.Start(win) {
		return Reject, 0, retryAfter
	}
	switch {
	case hole:
		w.holes = w.holes[1:]
	case win == w.tail:
		w.tailN++
	default:
		w.tail, w.tailN = win, 1
	}
	return Wait, win, 0
}

// Cancel gives back the permit a call reserved in window win (a Wait
// decision) and did not use. A permit of a window that has already ended
// is gone and Cancel does nothing.
func (w *Window) Cancel(now time.Duration, win int64) {
	w.Advance(now)
	switch {
	case win < w.cur:
	case win == w.cur:
		w.used--
	case win == w.tail:
		w.tailN--
		if w.tailN == 0 {
			w.tail--
			w.tailN = w.limit
			// The new tail may be the current window (no reservations
			// left) or end in holes; holes at the old tail cannot exist
			// since the tail's permits were just counted down.
		}
	default:
		i, _ := slices.BinarySearch(w.holes, win)
		w.holes = slices.Insert(w.holes, i, win)
	}
}
