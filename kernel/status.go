package kernel

import (
	"math/bits"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/resilience/outbound"
)

// Status is a snapshot of the kernel for a status page (see
// httpadapter.StatusPage). It holds every operation with its effective policy
// and the live state of its limits. It holds the kernel-wide counts too.
type Status struct {
	// Stragglers are invocations still running after their answer left
	// (MaxStragglers bounds them); Running counts every guarded invocation
	// whose chain has not returned.
	Stragglers, Running, MaxStragglers int
	Operations                         []OperationStatus
	// Dependencies are the configured dependencies' stats, by name.
	Dependencies map[string]outbound.Stats
}

// OperationStatus is one operation in a Status.
type OperationStatus struct {
	ID string
	// Policy is the policy the operation's limits enforce. A streaming
	// operation's ConcurrencyLimit is its MaxStreams.
	Policy resilience.Policy
	// Scope is "process" or "cluster".
	Scope string
	// Breaker is the breaker's state: "none", "closed", "open" or
	// "half-open"; BreakerOpenFor is the time until it half-opens.
	Breaker        string
	BreakerOpenFor time.Duration
	// Window is the fixed window's state in this process (HasWindow false
	// without a process-scope rate limit).
	Window    pipeline.Quota
	HasWindow bool
	// RateQueue and ConcurrencyQueue are the calls waiting in each queue,
	// InFlight those holding a concurrency slot.
	RateQueue, ConcurrencyQueue, InFlight int
	// ConcurrencyLimit is the concurrency limit enforced in this process
	// (0: none): the static one, or the adaptive limit in force.
	// AdaptiveLimit is the adaptive controller's (0: none), enforced or,
	// in shadow mode, the one it would apply.
	ConcurrencyLimit, AdaptiveLimit int
	Rejections                      resilience.Rejections
	// Shadowed counts the calls the limits would have rejected in shadow
	// mode (Policy.Shadow), and let run.
	Shadowed resilience.Rejections
	// Degraded: Scope cluster and the store unreachable.
	Degraded bool
	// Calls, P50 and P99 describe the answers of the last 30 to 60 seconds,
	// rejections included. They are zero when there were none. They are always
	// zero with the kernel's telemetry off (WithTelemetry(false)), whose clock
	// readings they reuse.
	Calls    int64
	P50, P99 time.Duration
	// Streams is a streaming operation's open streams in this process.
	// MaxStreams bounds them (0: none), counted in the operation's Scope.
	Streams, MaxStreams int
}

// Status returns a snapshot of the kernel's operations, sorted by ID.
func (k *Kernel) Status() Status {
	st := Status{Stragglers: int(k.stragglers.Load()), Running: k.Running(), MaxStragglers: k.live.Load().maxStragglers,
		Dependencies: k.dependencyStats()}
	for id, c := range k.ops {
		l := k.limitsOf(id)
		ls := l.State()
		o := OperationStatus{
			ID:               id,
			Policy:           limitsPolicy(c.desc, k.policyFor(id), *c.stream.Load()),
			Breaker:          breakerName(l.Policy(), ls.Breaker),
			BreakerOpenFor:   ls.BreakerOpenFor,
			RateQueue:        ls.RateQueue,
			ConcurrencyQueue: ls.ConcurrencyQueue,
			InFlight:         ls.InFlight,
			ConcurrencyLimit: ls.ConcurrencyLimit,
			AdaptiveLimit:    ls.AdaptiveLimit,
			Rejections:       ls.Rejections,
			Shadowed:         ls.Shadowed,
			Window:           ls.Window,
			HasWindow:        ls.HasWindow,
		}
		o.Scope = string(resilience.ScopeProcess)
		if o.Policy.Scope == resilience.ScopeCluster {
			o.Scope = string(resilience.ScopeCluster)
		}
		if st := k.store.Load(); st != nil {
			o.Degraded = st.Degraded(id)
		}
		o.Calls, o.P50, o.P99 = c.lat.snapshot(time.Now())
		if c.desc.Kind() != operations.Unary {
			o.Streams, o.MaxStreams = c.open.len(), c.stream.Load().MaxStreams
		}
		st.Operations = append(st.Operations, o)
	}
	slices.SortFunc(st.Operations, func(a, b OperationStatus) int { return strings.Compare(a.ID, b.ID) })
	return st
}

func breakerName(p resilience.Policy, b resilience.BreakerState) string {
	if p.FailureThreshold == 0 {
		return "none"
	}
	switch b {
	case resilience.BreakerOpen:
		return "open"
	case resilience.BreakerHalfOpen:
		return "half-open"
	}
	return "closed"
}

// latency is a histogram of one operation's answer times over the last 30 to
// 60 seconds. It keeps the current period and the one before. Buckets are
// log-scaled (four per doubling of nanoseconds), so a quantile is off by at
// most 19 %. Recording is an atomic add. The first call after a period ended
// replaces it.
type latency struct {
	cur, prev atomic.Pointer[latPeriod]
}

const (
	latPeriodLen = 30 * time.Second
	latBuckets   = 4 * 45 // 2^45 ns, about 9.8 hours: beyond any deadline
)

type latPeriod struct {
	start time.Time
	n     [latBuckets]atomic.Int64
}

func newLatency(now time.Time) *latency {
	l := &latency{}
	l.cur.Store(&latPeriod{start: now})
	return l
}

// bucket returns the bucket of d: 4·log2(d in ns) by its top three bits.
func bucket(d time.Duration) int {
	ns := uint64(max(d, 1))
	e := bits.Len64(ns) - 1 // 2^e <= ns < 2^(e+1)
	var frac int
	if e >= 2 {
		frac = int(ns>>(e-2)) & 3
	} else {
		frac = int(ns<<(2-e)) & 3
	}
	return min(4*e+frac, latBuckets-1)
}

// upper returns the upper bound of bucket i.
func upper(i int) time.Duration {
	e, frac := i/4, i%4
	return time.Duration(float64(uint64(1)<<e) * (1 + float64(frac+1)/4))
}

func (l *latency) observe(now time.Time, d time.Duration) {
	if l == nil {
		return
	}
	p := l.cur.Load()
	if now.Sub(p.start) >= latPeriodLen {
		np := &latPeriod{start: now}
		if l.cur.CompareAndSwap(p, np) {
			l.prev.Store(p)
		}
		p = l.cur.Load()
	}
	p.n[bucket(d)].Add(1)
}

// snapshot returns the calls of the last two periods and their p50, p99.
func (l *latency) snapshot(now time.Time) (calls int64, p50, p99 time.Duration) {
	if l == nil {
		return 0, 0, 0
	}
	var n [latBuckets]int64
	for _, p := range []*latPeriod{l.cur.Load(), l.prev.Load()} {
		if p == nil || now.Sub(p.start) >= 2*latPeriodLen {
			continue
		}
		for i := range n {
			n[i] += p.n[i].Load()
		}
	}
	for _, c := range n {
		calls += c
	}
	if calls == 0 {
		return 0, 0, 0
	}
	q := func(f float64) time.Duration {
		want := int64(f*float64(calls)) + 1
		var seen int64
		for i, c := range n {
			if seen += c; seen >= min(want, calls) {
				return upper(i)
			}
		}
		return upper(latBuckets - 1)
	}
	return calls, q(0.5), q(0.99)
}
