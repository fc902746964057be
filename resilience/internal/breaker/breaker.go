// Package breaker is the consecutive-failure circuit breaker behind the
// resilience package's Limits.
//
// It is written here rather than taken from github.com/sony/gobreaker/v2.
// Since v2.4.0 gobreaker has the third outcome this breaker needs besides
// success and failure. Settings.IsExcluded leaves a call uncounted, and an
// excluded half-open request frees its slot. Our Neutral verdict would map
// onto it. Three needs still are not met.
//
//   - The instant the breaker will half-open, to answer a rejection with a
//     retry-after. Gobreaker keeps it private and returns ErrOpenState.
//   - A reload that changes FailureThreshold or BreakSeconds in place,
//     keeping the run of failures or the break in progress. Gobreaker's
//     Settings are fixed at creation: a new breaker forgets its state.
//   - A closed-state cost of one atomic load on entry and one on exit,
//     with no lock and no clock read. Gobreaker takes a mutex and reads
//     the clock twice per call.
//
// The generation rule is the same idea gobreaker uses: a call counts only
// against the state it was admitted in.
package breaker

import (
	"sync"
	"sync/atomic"
	"time"
)

// State is the breaker's state as an observer sees it.
type State uint8

// The states.
const (
	// Closed: calls pass; consecutive failures are counted.
	Closed State = iota
	// Open: calls are rejected until the break ends.
	Open
	// HalfOpen: the break has ended; one probe call decides.
	HalfOpen
)

func (s State) String() string {
	switch s {
	case Open:
		return "open"
	case HalfOpen:
		return "half-open"
	}
	return "closed"
}

// Result is how a call admitted by the breaker ended, as far as the breaker
// is concerned.
type Result uint8

// The results.
const (
	// Success closes a half-open breaker and resets the failure count.
	Success Result = iota
	// Failure counts towards opening; a failed probe re-opens.
	Failure
	// Neutral changes nothing: a call that did not run (a limiter turned
	// it away) or whose caller left. A neutral probe frees the half-open
	// slot, so the next call probes.
	Neutral
)

// The state word packs, from the low bits: the phase (2 bits), the
// consecutive failures of a closed breaker (30 bits) and the generation
// (32 bits). Every transition bumps the generation. So a Ticket issued in
// one state cannot change a later one. All transitions are single CAS
// operations on the word, except opening. Opening also writes the break's
// end, so a mutex serialises it.
const (
	phaseClosed  = 0
	phaseOpen    = 1
	phaseIdle    = 2 // half-open, no probe running
	phaseProbing = 3 // half-open, the probe is running

	phaseBits    = 2
	phaseMask    = 1<<phaseBits - 1
	failureShift = phaseBits
	failureBits  = 30
	failureMask  = 1<<failureBits - 1
	genShift     = failureShift + failureBits

	// MaxThreshold is the largest failure threshold the breaker counts
	// to; larger thresholds are clamped to it.
	MaxThreshold = failureMask
)

func phase(w uint64) uint64    { return w & phaseMask }
func failures(w uint64) uint64 { return w >> failureShift & failureMask }
func gen(w uint64) uint64      { return w >> genShift }
func word(g, f, p uint64) uint64 {
	return g<<genShift | f<<failureShift | p
}

// Ticket is a breaker's admission of one call. Pass it back to Done.
type Ticket struct {
	gen   uint64
	probe bool
}

// Probe reports whether the call is the half-open probe.
func (t Ticket) Probe() bool { return t.probe }

// Token packs t into one word (a generation fits in 32 bits).
func (t Ticket) Token() uint64 {
	if t.probe {
		return t.gen<<1 | 1
	}
	return t.gen << 1
}

// TicketOf unpacks a Token.
func TicketOf(token uint64) Ticket { return Ticket{gen: token >> 1, probe: token&1 == 1} }

// Breaker opens after a number of consecutive failures and stays open
// for a fixed break. Then it lets exactly one probe through. The probe's
// success closes it, and its failure re-opens it. A neutral end lets the
// next call probe.
//
// A Breaker is safe for concurrent use. It starts no goroutine: the end of
// a break is noticed by the first call that arrives after it.
type Breaker struct {
	threshold uint64
	breakFor  time.Duration
	origin    time.Time // monotonic base of openUntil

	w         atomic.Uint64
	openUntil atomic.Int64 // end of the current break, ns since origin; written before the word says Open
	mu        sync.Mutex   // serialises opening (the write of openUntil and the CAS that publishes it)
}

// New returns a closed breaker that opens after threshold consecutive
// failures (at least 1, at most MaxThreshold) for breakFor (at least 1ns).
func New(threshold int, breakFor time.Duration) *Breaker {
	return &Breaker{
		threshold: uint64(min(max(threshold, 1), MaxThreshold)),
		breakFor:  max(breakFor, 1),
		origin:    time.Now(),
	}
}

// Allow admits a call, or rejects it and says how long until the breaker
// half-opens. That is 0 when it already has, and its probe is running.
//
// A closed breaker costs one atomic load. An open one reads the clock; the
// first call after the break ends becomes the probe.
func (b *Breaker) Allow() (t Ticket, ok bool, retryAfter time.Duration) {
	for {
		w := b.w.Load()
		switch phase(w) {
		case phaseClosed:
			return Ticket{gen: gen(w)}, true, 0
		case phaseProbing:
			return Ticket{}, false, 0
		case phaseOpen:
			left := time.Duration(b.openUntil.Load() - b.now())
			if left > 0 {
				return Ticket{}, false, left
			}
		}
		// Open and the break is over, or half-open and idle: try to
		// become the probe.
		g := gen(w) + 1
		if b.w.CompareAndSwap(w, word(g, 0, phaseProbing)) {
			return Ticket{gen: g, probe: true}, true, 0
		}
	}
}

// Done records how the call admitted with t ended. A ticket issued before
// the breaker last changed state changes nothing: calls still running when
// it opened cannot close or re-open it.
func (b *Breaker) Done(t Ticket, r Result) {
	if t.probe {
		switch r {
		case Success:
			b.w.CompareAndSwap(word(t.gen, 0, phaseProbing), word(t.gen+1, 0, phaseClosed))
		case Failure:
			b.open(word(t.gen, 0, phaseProbing))
		case Neutral:
			b.w.CompareAndSwap(word(t.gen, 0, phaseProbing), word(t.gen+1, 0, phaseIdle))
		}
		return
	}
	if r == Neutral {
		return
	}
	for {
		w := b.w.Load()
		if w&^(failureMask<<failureShift) != word(t.gen, 0, phaseClosed) {
			return // another generation
		}
		f := failures(w)
		if r == Success {
			if f == 0 || b.w.CompareAndSwap(w, word(t.gen, 0, phaseClosed)) {
				return
			}
			continue
		}
		if f+1 >= b.threshold {
			if b.open(w) {
				return
			}
			continue
		}
		if b.w.CompareAndSwap(w, word(t.gen, f+1, phaseClosed)) {
			return
		}
	}
}

// open moves the breaker from the state word from to Open and reports
// whether it did (false: the word had changed).
func (b *Breaker) open(from uint64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.w.Load() != from {
		return false
	}
	b.openUntil.Store(b.now() + int64(b.breakFor))
	return b.w.CompareAndSwap(from, word(gen(from)+1, 0, phaseOpen))
}

// State returns the breaker's state. An open breaker whose break is over
// reports HalfOpen: the next call will probe.
func (b *Breaker) State() State {
	w := b.w.Load()
	switch phase(w) {
	case phaseClosed:
		return Closed
	case phaseOpen:
		if b.openUntil.Load() > b.now() {
			return Open
		}
	}
	return HalfOpen
}

// OpenFor returns how long the breaker stays open before it half-opens (0
// when it is not open).
func (b *Breaker) OpenFor() time.Duration {
	if phase(b.w.Load()) != phaseOpen {
		return 0
	}
	return max(time.Duration(b.openUntil.Load()-b.now()), 0)
}

// Failures returns the consecutive failures counted while closed.
func (b *Breaker) Failures() int { return int(failures(b.w.Load())) }

func (b *Breaker) now() int64 { return int64(time.Since(b.origin)) }

// Carry returns a breaker with new thresholds that takes over the state of
// old. A nil old gives a closed breaker, as New does.
//
//   - A closed one keeps its run of failures, capped at threshold-1. So
//     the next failure opens it when the run already reaches the new
//     threshold.
//   - An open one stays open until its current break ends. The new break
//     applies from its next opening.
//   - A half-open one, probing or not, is open with that break over. So
//     the next call probes the new breaker. A probe still running reports
//     to old, which no longer decides anything.
func Carry(old *Breaker, threshold int, breakFor time.Duration) *Breaker {
	b := New(threshold, breakFor)
	if old == nil {
		return b
	}
	b.origin = old.origin
	w := old.w.Load()
	if phase(w) == phaseClosed {
		b.w.Store(word(0, min(failures(w), b.threshold-1), phaseClosed))
		return b
	}
	until := old.openUntil.Load()
	if phase(w) != phaseOpen {
		until = min(until, old.now())
	}
	b.openUntil.Store(until)
	b.w.Store(word(0, 0, phaseOpen))
	return b
}

// Thresholds returns the failure threshold and the break.
func (b *Breaker) Thresholds() (int, time.Duration) { return int(b.threshold), b.breakFor }
