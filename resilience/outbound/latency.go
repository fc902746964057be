package outbound

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Hedge delays follow a quantile of recent latency. The ring of the last
// latencySamples successes is small. An exact quantile is recomputed every
// latencyRefresh samples: a sort of 128 durations per 16 calls. A call reads
// it with one atomic load.
const (
	latencySamples = 128 // successful attempts the quantile is taken over
	latencyMin     = 20  // samples before the quantile replaces HedgeDelay
	latencyRefresh = 16  // samples between recomputations
)

// latencies keeps the latencies of a dependency's last successful
// attempts and the quantile of them that hedged calls wait for. It
// belongs to the Dependency, so a reload keeps what it learned.
type latencies struct {
	mu    sync.Mutex
	ring  [latencySamples]time.Duration
	n     int // samples recorded, ever
	quant atomic.Int64
}

// record adds the latency d of a successful attempt; every latencyRefresh
// samples (from latencyMin on) it recomputes the q-quantile.
func (l *latencies) record(d time.Duration, q float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ring[l.n%latencySamples] = d
	l.n++
	if l.n < latencyMin || (l.n-latencyMin)%latencyRefresh != 0 {
		return
	}
	s := slices.Clone(l.ring[:min(l.n, latencySamples)])
	slices.Sort(s)
	l.quant.Store(int64(s[min(int(q*float64(len(s))), len(s)-1)]))
}

// delay returns the hedge delay: the quantile once latencyMin samples are
// in (at least 1 ns), fallback before.
func (l *latencies) delay(fallback time.Duration) time.Duration {
	if q := time.Duration(l.quant.Load()); q > 0 {
		return q
	}
	return fallback
}
