// Package window is the bookkeeping of a fixed-window rate limiter with a
// queue: which window each admitted or queued call takes a permit in.
//
// Time is an offset from the limiter's origin; window i covers
// [i*Length, (i+1)*Length). Nothing here reads the clock, sleeps or locks:
// the caller serialises access and waits (see resilience.FixedWindow).
//
// A call that finds the current window used up joins a FIFO queue and
// waits for a later window. The queue is packed: its i-th waiter holds a
// permit in window cur+1+i/Limit, so the oldest waiter is admitted first.
// A waiter that gives up leaves the queue, and every waiter behind it moves
// up one place. A waiter that crosses a window boundary so moves into an
// earlier window, and its Moved channel reports it. So a later arrival
// never takes a freed permit ahead of an older waiter. A waiter only ever moves to an earlier
// window, so none is admitted later than the window it was first given.
// At most Limit permits are ever taken in one window.
package window

import (
	"cmp"
	"slices"
	"time"
)

// Window is the state of one fixed-window limiter. The zero value is not
// usable; call New.
type Window struct {
	length time.Duration
	limit  int64
	queue  int // most waiters

	cur  int64     // index of the current window, as of the last Advance
	used int64     // permits taken in cur; limit whenever q is not empty
	q    []*Waiter // waiting for later windows, oldest first; q[i] holds a permit in cur+1+i/limit
	seq  uint64    // of the last waiter queued
}

// A Waiter is a call queued for a later window by Reserve.
type Waiter struct {
	// Moved receives a value when the waiter is moved to an earlier
	// window, because a waiter ahead of it left. It should then read Win
	// again and wait for that window instead.
	Moved chan struct{}

	win    int64  // the window it holds a permit in
	seq    uint64 // order of arrival: q is sorted by it
	queued bool   // in q: its window has not opened and it has not left
}

// Win returns the window the waiter holds a permit in. It only ever
// decreases.
func (wt *Waiter) Win() int64 { return wt.win }

// New returns a window state admitting limit calls per length, with up to
// queue calls waiting for later windows. limit and length must be
// positive and queue non-negative; the caller validates them.
func New(limit int, length time.Duration, queue int) *Window {
	return &Window{length: length, limit: int64(limit), queue: queue}
}

// Limit returns the permits per window.
func (w *Window) Limit() int { return int(w.limit) }

// Length returns the window's length.
func (w *Window) Length() time.Duration { return w.length }

// Index returns the index of the window containing now.
func (w *Window) Index(now time.Duration) int64 { return int64(now / w.length) }

// Start returns the offset at which window i opens.
func (w *Window) Start(i int64) time.Duration { return time.Duration(i) * w.length }

// Advance moves the state to the window containing now. Waiters whose
// window has opened leave the queue; those holding a permit in that window
// count as used.
func (w *Window) Advance(now time.Duration) {
	i := w.Index(now)
	if i <= w.cur {
		return
	}
	w.cur, w.used = i, 0
	n := 0
	for n < len(w.q) && w.q[n].win <= i {
		if w.q[n].win == i {
			w.used++
		}
		w.q[n].queued = false
		n++
	}
	w.q = slices.Delete(w.q, 0, n)
}

// Used returns the permits taken in the current window (as of the last
// Advance).
func (w *Window) Used() int64 { return w.used }

// LastWin returns the window the newest waiter holds a permit in (the
// latest: the queue is packed oldest first), and false when none waits.
func (w *Window) LastWin() (int64, bool) {
	if len(w.q) == 0 {
		return 0, false
	}
	return w.q[len(w.q)-1].win, true
}

// Queued returns the number of calls waiting for a later window (as of the
// last Advance).
func (w *Window) Queued() int64 { return int64(len(w.q)) }

// Decision is the result of Reserve.
type Decision uint8

// The decisions.
const (
	// Admit: a permit in the current window was taken.
	Admit Decision = iota
	// Wait: the call joined the queue; wait until its window opens.
	Wait
	// Reject: the window is used up and the queue is full, or the call's
	// deadline comes before the window it would wait for.
	Reject
)

// Reserve takes a permit for a call arriving at now whose deadline is at
// offset deadline (deadline <= 0: none). On Admit the call proceeds. On
// Wait it has joined the queue as wt. It must wait until Start(wt.Win()),
// reading Win again whenever wt.Moved fires. Then it proceeds, or leaves
// with Cancel. On Reject, retryAfter is the time until the next window
// opens. With mayWait false the call is never queued.
func (w *Window) Reserve(now, deadline time.Duration, mayWait bool) (d Decision, wt *Waiter, retryAfter time.Duration) {
	w.Advance(now)
	if w.used < w.limit { // then nobody is queued: admitting is not overtaking
		w.used++
		return Admit, nil, 0
	}
	retryAfter = w.Start(w.cur+1) - now
	if !mayWait || len(w.q) >= w.queue {
		return Reject, nil, retryAfter
	}
	win := w.winAt(len(w.q))
	if deadline > 0 && deadline <= w.Start(win) {
		return Reject, nil, retryAfter
	}
	w.seq++
	wt = &Waiter{Moved: make(chan struct{}, 1), win: win, seq: w.seq, queued: true}
	w.q = append(w.q, wt)
	return Wait, wt, 0
}

// winAt returns the window of the waiter at place i of the queue.
func (w *Window) winAt(i int) int64 { return w.cur + 1 + int64(i)/w.limit }

// Cancel gives back the permit of a waiter (a Wait decision) that did not
// use it, at now. Every waiter behind it moves up one place; so does the
// oldest waiter, into the current window, when the permit given back is
// the current window's. A permit of a window that has already ended is
// gone and Cancel does nothing. Cancelling a waiter twice does nothing.
func (w *Window) Cancel(now time.Duration, wt *Waiter) {
	w.Advance(now)
	switch {
	case wt.queued:
		i, _ := slices.BinarySearchFunc(w.q, wt.seq, func(q *Waiter, seq uint64) int {
			return cmp.Compare(q.seq, seq)
		})
		wt.queued = false
		w.q = slices.Delete(w.q, i, i+1)
		w.moveUp(i)
	case wt.win == w.cur && w.used > 0:
		wt.win = -1 // given back: a second Cancel does nothing
		w.used--
		if len(w.q) == 0 {
			return
		}
		head := w.q[0]
		head.queued, head.win = false, w.cur
		w.used++
		notify(head)
		w.q = slices.Delete(w.q, 0, 1)
		w.moveUp(0)
	}
}

// moveUp gives each waiter from place i on the window of its place, after
// the waiter ahead of it left, and tells those whose window changed.
func (w *Window) moveUp(i int) {
	for ; i < len(w.q); i++ {
		if win := w.winAt(i); win != w.q[i].win {
			w.q[i].win = win
			notify(w.q[i])
		}
	}
}

// notify tells wt that its window moved.
func notify(wt *Waiter) {
	select {
	case wt.Moved <- struct{}{}:
	default: // already told; it reads Win afresh
	}
}

// SetLimit changes the permits per window, at now. It keeps the permits
// taken in the current window. With a lower limit, nothing more is
// admitted in it until they fall below the new one: not before the next
// window. Every waiter is given the window of its place under the new
// limit. That is a later one when the limit is lower, and an earlier one
// when it is higher. The oldest get the current one while permits are
// left in it. Those whose window changed are told on Moved. No waiter is
// dropped. limit must be positive.
func (w *Window) SetLimit(now time.Duration, limit int) {
	w.Advance(now)
	w.limit = int64(limit)
	for len(w.q) > 0 && w.used < w.limit {
		head := w.q[0]
		head.queued, head.win = false, w.cur
		w.used++
		notify(head)
		w.q = slices.Delete(w.q, 0, 1)
	}
	w.moveUp(0)
}

// SetQueue changes the most waiters. Waiters beyond a lower bound keep
// their place; only arrivals see the new bound.
func (w *Window) SetQueue(queue int) { w.queue = queue }

// Reset starts the state over at window cur with used permits taken in
// it and nobody waiting (a limiter rebuilt from another's counts).
func (w *Window) Reset(cur, used int64) { w.cur, w.used = cur, used }
