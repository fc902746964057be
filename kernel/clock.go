package kernel

import (
	"sync/atomic"
	"time"
)

// arrivalClock reads the time of a call's arrival, and of an observed
// call's end. time.Now reads two clocks, the wall clock and the monotonic
// one (about 40 ns each on a virtual machine's vDSO); arrivalClock reads
// the monotonic clock alone and adds the time since a full reading it
// keeps, taken again once that is a second old. The wall part of its times
// can thus lag a step of the system clock (an NTP step, a manual set) by up
// to a second; deadlines, budgets and durations use the monotonic part,
// which is exact. No library offers this: Go's time package reads both
// clocks on every Now.
type arrivalClock struct {
	base atomic.Pointer[time.Time]
}

// clockRefresh is how old the full reading may get.
const clockRefresh = time.Second

// now returns the time now, with a monotonic reading.
func (c *arrivalClock) now() time.Time {
	if b := c.base.Load(); b != nil {
		if d := time.Since(*b); d >= 0 && d < clockRefresh {
			return b.Add(d)
		}
	}
	t := time.Now()
	c.base.Store(&t)
	return t
}
