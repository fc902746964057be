package resilience

import (
	"context"
	"math"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience/deadline"
	"github.com/sundial-go/sundial/resilience/internal/adaptive"
	"github.com/sundial-go/sundial/resilience/internal/limiter"
)

// slotsLimit is the operation's concurrency limit as a [Limit] (see
// [ConcurrencyLimiter]). Its rejection is KERNEL_UNAVAILABLE_003. A call
// below its operation's class, or sheddable, is shed instead
// (KERNEL_UNAVAILABLE_008). The slot is given back on every exit path,
// panics included.
//
// With an adaptive controller (ad), a permit's token is when the call took
// its slot (ns since epoch). Its release is a sample of the controller
// when the call succeeded or ended at its own deadline. The controller
// moves the limiter's limit in place (enforced), or only reports it
// (shadow).
type slotsLimit struct {
	conc     *limiter.ConcurrencyLimiter
	l        *Limits
	ad       *adaptive.Controller // nil: a static limit
	epoch    time.Time            // of ad's times
	enforced bool                 // conc's limit is enforced (false: it only counts, for a shadow)
}

// unbounded is the limit of a limiter that only counts the calls in flight
// (a shadow controller without a static limit in this process).
const unbounded = math.MaxInt32

func (l *Limits) slotsOf(old *chain, p Policy, shared bool, now time.Time) *slotsLimit {
	runs, enforcedAdaptive := p.adaptive()
	sl := &slotsLimit{l: l, enforced: enforcedAdaptive || !shared && p.ConcurrencyLimit > 0}
	limit := p.ConcurrencyLimit
	cfg := adaptive.Config{Min: p.Adaptive.MinLimit, Max: p.Adaptive.MaxLimit, Initial: p.Adaptive.InitialLimit,
		Window: p.Adaptive.Window, Ceiling: p.Adaptive.HealthyLatency}
	switch {
	case !sl.enforced:
		limit = unbounded
	case enforcedAdaptive && old.slots != nil:
		limit, _ = old.slots.conc.Limits() // until Configure applies the controller's
	case enforcedAdaptive:
		limit = cfg.Normalize().Initial
	}
	if old.slots != nil {
		if old.slots.ad != nil {
			// Calls still holding the old chain's permits end windows
			// too: from now on their controller moves no limit, until
			// Configure below says so.
			old.slots.ad.Detach()
		}
		sl.conc = old.slots.conc
		sl.conc.SetLimitsUnchecked(limit, p.ConcurrencyQueueLimit)
	} else {
		sl.conc = limiter.NewSlots(limit, p.ConcurrencyQueueLimit)
	}
	sl.conc.SetPriority(p.Priority, reserveThousandths(p.PriorityReserve))
	if !runs {
		return sl
	}
	if old.slots != nil && old.slots.ad != nil {
		sl.ad, sl.epoch = old.slots.ad, old.slots.epoch // keep what it learned
	} else {
		sl.ad, sl.epoch = adaptive.New(cfg, 0), now
	}
	var apply func(int)
	if enforcedAdaptive {
		apply = sl.conc.SetLimit
	}
	sl.ad.Configure(cfg, apply)
	return sl
}

// reserveThousandths returns a PriorityReserve in thousandths of the
// limit, within 0 to 999.
func reserveThousandths(f float64) int64 {
	if !(f > 0) { // NaN too
		return 0
	}
	return min(int64(f*1000), 999)
}

// TryAcquire implements the optional method of [Limit]: without a queue the limit never
// waits, whatever the context. It never queues either, even when a reload
// gives the limit a queue meanwhile: the call has no context to wait with.
func (sl *slotsLimit) TryAcquire(inv *pipeline.Invocation) (Permit, bool, error) {
	if _, queue := sl.conc.Limits(); queue != 0 {
		return Permit{}, true, nil
	}
	c := inv.Priority()
	if !sl.conc.TakeFree(c) {
		return Permit{}, false, sl.refuse(c)
	}
	return sl.permit(inv, false), false, nil
}

// Acquire implements [Limit].
func (sl *slotsLimit) Acquire(ctx context.Context, inv *pipeline.Invocation) (Permit, error) {
	c := inv.Priority()
	if sl.ad != nil && ctx.Err() == nil && sl.conc.TakeFree(c) {
		return sl.permit(inv, false), nil
	}
	switch err := sl.conc.AcquireClass(ctx, c); {
	case err == nil:
		return sl.permit(inv, true), nil
	case err == ErrLimited:
		return Permit{}, sl.refuse(c)
	}
	return Permit{}, deadline.Attribute(ctx)
}

// refuse returns the rejection of a call of class c that the limit turned
// away, and tells the controller: the calls turned away are offered load.
func (sl *slotsLimit) refuse(c pipeline.Priority) *pipeline.Error {
	if sl.ad != nil {
		sl.ad.Refuse()
	}
	return sl.l.concRejection(c, sl.conc)
}

// permit returns the permit of a call that took its slot now, after
// waiting for it or not. With a controller, its token is when it took the
// slot. That is its arrival when it did not wait: the Resilience stage
// runs first, so no clock reading is needed.
func (sl *slotsLimit) permit(inv *pipeline.Invocation, waited bool) Permit {
	if sl.ad == nil {
		return newTokenPermit(sl, 0)
	}
	at := inv.Timing().Arrival
	ok := !at.IsZero()
	if waited || !ok {
		at = time.Now()
	}
	return newTokenPermit(sl, uint64(at.Sub(sl.epoch)))
}

// release gives back a slot: with a controller, a call that succeeded
// or ended at its own deadline (a drop) is a sample. Cancellations,
// timeouts at a caller's deadline, rejections and faults of the caller
// are not: they say nothing of how much the operation can serve.
func (sl *slotsLimit) release(token uint64, o Outcome) {
	if sl.ad != nil && o.Ran && (o.Verdict == Success || o.TimedOut) && sl.ad.Measure(o.TimedOut) {
		now := time.Since(sl.epoch)
		sl.ad.Sample(now, now-time.Duration(int64(token)), o.TimedOut, sl.conc.InFlight())
	}
	sl.conc.Release()
}

// limits returns the limit enforced (0: none) and the controller's (0:
// none).
func (sl *slotsLimit) limits() (enforced, adaptive int) {
	if sl.enforced {
		enforced, _ = sl.conc.Limits()
	}
	if sl.ad != nil {
		adaptive = sl.ad.Limit()
	}
	return enforced, adaptive
}

// concRejection returns the rejection of a call of class c that conc
// turned away. It is shed when c is sheddable or below the operation's
// class (conc's). Otherwise it is the concurrency limit's.
func (l *Limits) concRejection(c pipeline.Priority, conc *limiter.ConcurrencyLimiter) *pipeline.Error {
	if c == pipeline.PrioritySheddable || conc != nil && c < conc.Class() {
		return l.shedErr[min(max(c, pipeline.PrioritySheddable), pipeline.PriorityDefault)-pipeline.PrioritySheddable]
	}
	return l.concLimitErr
}
