// Package lazytimer runs one stream's clocks on one timer that sleeps
// until the nearest instant its owner names. A message stores a
// timestamp and arms nothing. When the timer fires, the owner ends the
// stream or names the next instant, and the timer sleeps until then.
// [Timer.Wake] brings the timer forward, as a send that starts blocking
// does for its stall.
//
// Instants are nanoseconds since the timer's base; math.MaxInt64 is never.
package lazytimer

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Never is the instant that never comes.
const Never = math.MaxInt64

// Owner decides what a firing does.
type Owner interface {
	// Expire runs when the timer fires, at now, without the lock. It
	// reports whether the owner ended: the timer then sleeps for good.
	Expire(now int64) bool
	// Next returns the instant to fire at after now, or Never. It runs
	// under the lock, after a firing that did not end the owner.
	Next(now int64) int64
}

// Timer is one lazily armed timer. Its zero value is ready for Start.
// Its lock orders re-arming with Stop; the owner may guard its own state
// with it too, through Lock and Unlock.
type Timer struct {
	sync.Mutex
	base    time.Time
	owner   Owner
	t       *time.Timer  // nil until an instant needs it
	armed   atomic.Int64 // when t fires; Never: not armed, or being re-armed
	stopped bool
}

// Start sets the base and the owner, and arms the timer for first.
func (t *Timer) Start(base time.Time, o Owner, first int64) {
	t.base, t.owner = base, o
	t.armed.Store(Never)
	if first != Never {
		t.Lock()
		t.arm(first, 0)
		t.Unlock()
	}
}

// Now returns the time since the base, in nanoseconds.
func (t *Timer) Now() int64 { return int64(time.Since(t.base)) }

// Armed returns when the timer fires next, or Never.
func (t *Timer) Armed() int64 { return t.armed.Load() }

// arm arms the timer to fire at at, under the lock.
func (t *Timer) arm(at, now int64) {
	t.armed.Store(at)
	d := time.Duration(max(at-now, 0))
	if t.t == nil {
		t.t = time.AfterFunc(d, t.fire)
	} else {
		t.t.Reset(d)
	}
}

// fire asks the owner to expire, and else arms the timer for its next
// instant.
func (t *Timer) fire() {
	now := t.Now()
	if t.owner.Expire(now) {
		return
	}
	t.Lock()
	defer t.Unlock()
	// Before Next reads the owner's clocks: a send that starts meanwhile
	// sees the timer unarmed, and wakes it.
	t.armed.Store(Never)
	if at := t.owner.Next(now); !t.stopped && at != Never {
		t.arm(at, now)
	}
}

// Wake makes the timer fire by at. It takes the lock only when the timer
// sleeps past at.
func (t *Timer) Wake(at int64) {
	if t.armed.Load() <= at {
		return
	}
	t.Lock()
	defer t.Unlock()
	if !t.stopped && t.armed.Load() > at {
		t.arm(at, t.Now())
	}
}

// Stop stops the timer for good.
func (t *Timer) Stop() {
	t.Lock()
	defer t.Unlock()
	t.stopped = true
	if t.t != nil {
		t.t.Stop()
	}
}

// Stopped reports whether Stop was called.
func (t *Timer) Stopped() bool {
	t.Lock()
	defer t.Unlock()
	return t.stopped
}
