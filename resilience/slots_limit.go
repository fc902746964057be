package resilience

import (
	"context"

	"github.com/sundial-go/sundial/pipeline"
)

// slotsLimit is the operation's concurrency limit (ConcurrencyLimit,
// ConcurrencyQueueLimit) as a [Limit]; see [ConcurrencyLimiter].
// Rejection: KERNEL_UNAVAILABLE_003. The slot is given back on every exit
// path, panics included.
type slotsLimit struct {
	conc *ConcurrencyLimiter
	l    *Limits
}

func (l *Limits) slotsOf(old *chain, p Policy) *slotsLimit {
	if old.slots != nil {
		old.slots.conc.setLimits(p.ConcurrencyLimit, p.ConcurrencyQueueLimit)
		return &slotsLimit{conc: old.slots.conc, l: l}
	}
	return &slotsLimit{conc: newConcurrencyLimiter(p.ConcurrencyLimit, p.ConcurrencyQueueLimit), l: l}
}

// TryAcquire implements [Admitter]: without a queue the limit never
// waits, whatever the context.
func (sl *slotsLimit) TryAcquire(*pipeline.Invocation) (Permit, bool, error) {
	if sl.conc.queueLimit.Load() != 0 {
		return Permit{}, true, nil
	}
	if sl.conc.Acquire(context.Background()) != nil {
		return Permit{}, false, sl.l.concRejection()
	}
	return NewPermit(sl, 0), false, nil
}

// Acquire implements [Limit].
func (sl *slotsLimit) Acquire(ctx context.Context, _ *pipeline.Invocation) (Permit, error) {
	switch err := sl.conc.Acquire(ctx); {
	case err == nil:
		return NewPermit(sl, 0), nil
	case err == ErrLimited:
		return Permit{}, sl.l.concRejection()
	}
	return Permit{}, Attribute(ctx)
}

// Release implements [Releaser].
func (sl *slotsLimit) Release(uint64, Outcome) { sl.conc.Release() }

func (l *Limits) concRejection() *pipeline.Error {
	return l.concLimitErr
}
