package resilience

import "github.com/sundial-go/sundial/pipeline"

// OnSweepForTest makes k call f, under its lock, each time it sweeps its
// limiters for idle ones, with the number of keys swept.
func (k *KeyedFixedWindow) OnSweepForTest(f func(keys int)) { k.onSweep = f }

// DefaultMaxKeys is the keys a KeyedFixedWindow holds by default.
const DefaultMaxKeys = defaultMaxKeys

// The controls of the limiters that Limits and the shared limits'
// fallbacks use (package internal/limiter), for the limiters' tests.

func InFlight(l *ConcurrencyLimiter) int                      { return l.l.InFlight() }
func SlotsQueueDepth(l *ConcurrencyLimiter) int               { return l.l.QueueDepth() }
func SetLimits(l *ConcurrencyLimiter, limit, queue int) error { return l.l.SetLimits(limit, queue) }
func WindowQueueDepth(l *FixedWindow) int                     { return l.w.QueueDepth() }
func WindowQuota(l *FixedWindow) pipeline.Quota               { return l.w.Quota() }
func SetPermitLimit(l *FixedWindow, limit int) error          { return l.w.SetPermitLimit(limit) }

// VerdictOf is verdictOf, for the verdict's tests.
var VerdictOf = verdictOf
