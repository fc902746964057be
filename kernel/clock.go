package kernel

import (
	"sync/atomic"
	"time"
)

// arrivalClock reads the time of a call's arrival, and of an observed call's
// end. It reads the monotonic clock alone, where time.Now reads two clocks.
// It adds the time since a full reading it keeps, taken again once that is a
// second old. So the wall part of its times can lag a step of the system
// clock by up to a second: an NTP step, a manual set. Deadlines, budgets and
// durations use the monotonic part, which is exact.
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
