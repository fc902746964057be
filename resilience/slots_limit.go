package resilience

import (
	"context"

	"github.com/sundial-go/sundial/pipeline"
)

// slotsLimit is the operation's concurrency limit (ConcurrencyLimit,
// ConcurrencyQueueLimit, Priority, PriorityReserve) as a [Limit]; see
// [ConcurrencyLimiter]. Rejection: KERNEL_UNAVAILABLE_003, or
// KERNEL_UNAVAILABLE_008 (shed) for a call below its operation's class or
// sheddable. The slot is given back on every exit path, panics included.
type slotsLimit struct {
	conc *ConcurrencyLimiter
	l    *Limits
}

func (l *Limits) slotsOf(old *chain, p Policy) *slotsLimit {
	conc := newConcurrencyLimiter(p.ConcurrencyLimit, p.ConcurrencyQueueLimit)
	if old.slots != nil {
		conc = old.slots.conc
		conc.setLimits(p.ConcurrencyLimit, p.ConcurrencyQueueLimit)
	}
	conc.setPriority(p.Priority, reserveThousandths(p.PriorityReserve))
	return &slotsLimit{conc: conc, l: l}
}

// reserveThousandths returns a PriorityReserve in thousandths of the
// limit, within 0 to 999.
func reserveThousandths(f float64) int64 {
	if !(f > 0) { // NaN too
		return 0
	}
	return min(int64(f*1000), 999)
}

// TryAcquire implements [Admitter]: without a queue the limit never
// waits, whatever the context.
func (sl *slotsLimit) TryAcquire(inv *pipeline.Invocation) (Permit, bool, error) {
	if sl.conc.queueLimit.Load() != 0 {
		return Permit{}, true, nil
	}
	c := inv.Priority()
	if sl.conc.acquire(context.Background(), c) != nil {
		return Permit{}, false, sl.l.concRejection(c, sl.conc)
	}
	return NewPermit(sl, 0), false, nil
}

// Acquire implements [Limit].
func (sl *slotsLimit) Acquire(ctx context.Context, inv *pipeline.Invocation) (Permit, error) {
	c := inv.Priority()
	switch err := sl.conc.acquire(ctx, c); {
	case err == nil:
		return NewPermit(sl, 0), nil
	case err == ErrLimited:
		return Permit{}, sl.l.concRejection(c, sl.conc)
	}
	return Permit{}, Attribute(ctx)
}

// Release implements [Releaser].
func (sl *slotsLimit) Release(uint64, Outcome) { sl.conc.Release() }

// concRejection returns the rejection of a call of class c that conc
// turned away: shed when c is sheddable or below the operation's class
// (conc's), the concurrency limit's otherwise.
func (l *Limits) concRejection(c pipeline.Priority, conc *ConcurrencyLimiter) *pipeline.Error {
	if c == pipeline.PrioritySheddable || conc != nil && int32(c) < conc.class.Load() {
		l.shedRejected.Add(1)
		return l.shedErr[min(max(c, pipeline.PrioritySheddable), pipeline.PriorityDefault)-pipeline.PrioritySheddable]
	}
	l.concRejected.Add(1)
	return l.concLimitErr
}
