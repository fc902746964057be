// Package adaptive is the controller of an adaptive concurrency limit. It
// watches how long the calls it lets in take. It moves the limit to the
// concurrency the protected work can serve without queueing.
//
// # Which controller, and why
//
// It is a latency-gradient controller of the Vegas family (Netflix
// concurrency-limits' VegasLimit, TCP Vegas). It measures per window, as
// failsafe-go's adaptivelimiter and Envoy's adaptive concurrency filter
// do. Little's law sets its steps.
//
//   - Each window (Config.Window, and at least MinSamples samples) yields
//     three figures. r is the mean latency of the calls measured in it. n
//     is the mean number of calls in flight they saw. x is the calls that
//     ended per second. The baseline m is the lowest window mean seen: the
//     latency of the work when nothing queues. By Little's law n·m/r of
//     the calls in flight were being served. The other n·(1−m/r) were
//     queued inside the protected work. Past the knee, x·m is the knee
//     itself. The work served x per second, which takes x·m calls at m
//     each.
//   - While no knee is known, the limit doubles after a window without a
//     queue in which it held calls back, as TCP's slow start does. From
//     20, a knee of 40 is crossed in 2 windows. The limit held calls back
//     when the calls in flight averaged 80 % of it. Random arrivals that
//     would keep 20 calls in flight find a limit of 20 full one time in
//     six (Erlang's loss formula). The calls in flight then average 84 %
//     of it.
//   - When the queue is above α (3·log10 limit, at least 1), the limit
//     takes the lower of n·m/r and x·m. It goes no lower than half the
//     calls in flight. That is the knee, in one step. The latency's
//     figure is right when the window began below the knee. The calls'
//     figure is right when the window began past it: the calls it let in
//     wait, and end, later. That is the knee the controller keeps. The
//     window after a cut does not cut again: its calls are those the cut
//     drains.
//   - Below the knee it kept, the limit climbs back by 2α a window, and
//     to it. At the knee it holds: its calls wait for nothing. After 10
//     windows there with no queue (less than α/4), it probes one call
//     past it. A probe whose window shows a queue (α/4 or more) is undone.
//     One that shows none is the new knee.
//   - A window in which at least 1 % of the calls that ended were drops
//     (the operation's own timeouts) multiplies the limit by 0.9. That is
//     Netflix's AIMD backoff. The step above applies instead when it is
//     lower.
//   - Above the knee it kept, the limit leaves room for bursts while the
//     load offered fits under the knee (see headroom). The load offered
//     is the calls that ended and those the limit turned away (Refuse),
//     at the baseline latency. A limit at the knee turns away what random
//     arrivals bring above their mean: 12 % at a knee of 40. The room
//     lets them wait a little instead, and its queue is no sign of a
//     knee. The room goes with drops, above the ceiling, or when a full
//     limit still shows a queue. The work is then past its knee, or
//     slower. While there is room the limit does not probe: the knee
//     does not bind.
//
// Under overload the limit settles at the knee, not past it. Past it,
// every call waits. On a processor-sharing backend (a CPU, a database at
// its knee) each call past the knee slows all of them. So a limit one
// Vegas band (α to 2α) past the knee costs its tail latency that band.
// Holding at the knee and probing one call at a time, rarely, costs a
// window at most one call past it in ten.
//
// Vegas was chosen over Gradient2, whose baseline is an average of the
// latencies it causes. Under sustained load that baseline drifts up with
// them, and the limit with it, so it is not held near the knee. Vegas was
// chosen over Envoy's gradient too, whose probe sheds calls every time it
// runs.
//
// A minimum baseline does not drift. But work that became slower for good
// fools it, as when a dependency slowed down. Every window then looks
// queued, and the limit would fall to its minimum. The controller tests
// that case instead of guessing. Take a cut of at least 20 % with the
// limit still in use (the calls in flight averaged 90 % of it). If it did
// not bring the latency down by a tenth, the latency was not a queue. The
// baseline then becomes the current latency. A cut that undoes a doubling
// is no such test: the doubling made the queue. The knee is then unknown.
// So it is when the latency falls a tenth below the baseline (faster
// work). The limit doubles again to find it. To keep the limit down while
// latency is above what the operation's callers can live with, set
// Config.Ceiling. Above it, the limit never grows.
//
// Only the caller says which calls are samples. Sundial samples successes
// and the operation's own timeouts (as drops). Cancellations, timeouts at
// a caller's deadline, rejections and faults of the caller are not
// samples. So callers that give up cannot move the limit (see
// resilience.Outcome).
//
// # Concurrency
//
// Nothing here reads the clock: times are offsets from an epoch the caller
// chooses. Measure and Sample are safe for concurrent use and cost a few
// atomic operations. A busy window measures one call in a stride (see
// Measure), so most calls read no clock. Once per window the call that
// ends it takes a mutex to compute the next limit. There is no goroutine.
//
// A Vegas baseline is learned while load is below the knee. Some
// controllers see only queued latency and settle too high: one that
// starts above the knee under sustained overload, or a shadow behind a
// static limit above it. Start low (InitialLimit), and let a shadow watch
// a day's traffic.
package adaptive

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Config.
const (
	DefaultMin     = 1
	DefaultMax     = 1000
	DefaultInitial = 20
	DefaultWindow  = time.Second
)

// MinSamples is the fewest samples a window needs. A window that has
// fewer when its time is up goes on until it has them.
const MinSamples = 10

// Config is the controller's parameters.
type Config struct {
	// Min and Max bound the limit; Initial is where it starts.
	Min, Max, Initial int
	// Window is the shortest window the controller computes a limit over.
	Window time.Duration
	// Ceiling is the healthy-latency ceiling: while a window's mean
	// latency is above it, the limit never grows. 0: none.
	Ceiling time.Duration
}

// Normalize returns c with its zero values replaced by the defaults,
// Initial clamped to [Min, Max] and Max raised to Min.
func (c Config) Normalize() Config {
	if c.Min <= 0 {
		c.Min = DefaultMin
	}
	if c.Max <= 0 {
		c.Max = DefaultMax
	}
	c.Max = max(c.Max, c.Min)
	if c.Initial <= 0 {
		c.Initial = DefaultInitial
	}
	c.Initial = min(max(c.Initial, c.Min), c.Max)
	if c.Window <= 0 {
		c.Window = DefaultWindow
	}
	c.Ceiling = max(c.Ceiling, 0)
	return c
}

// Controller computes one adaptive limit. Create it with New.
type Controller struct {
	limit atomic.Int64

	// The window being filled.
	start   atomic.Int64 // ns since the epoch
	ended   atomic.Int64 // calls that ended (Measure)
	stride  atomic.Int64 // of Measure: a power of 2
	count   atomic.Int64 // samples
	sum     atomic.Int64 // ns
	drops   atomic.Int64
	busy    atomic.Int64 // sum of the calls in flight each sample saw
	refused atomic.Int64 // calls the limit turned away (Refuse)
	closing atomic.Bool  // a Sample is ending the window
	window  atomic.Int64 // cfg.Window, for Sample

	mu      sync.Mutex // guards the fields below
	cfg     Config
	vegas   int64         // the limit the rule keeps; the limit is vegas plus room
	room    float64       // the room for bursts above it (see headroom)
	base    time.Duration // the baseline latency; 0: none yet
	lastR   time.Duration // the previous window's mean latency
	lastX   float64       // and its samples per second
	lastCut bool          // the previous window cut the limit by 20 % or more
	knee    float64       // the limit set by the last cut; 0: none known
	doubled float64       // the limit before the previous window doubled it; 0: it did not
	quiet   int           // windows in a row at the knee without a queue
	cut     bool          // the previous window lowered the limit
	windows int64         // windows ended
	apply   func(int)     // applies a new limit; nil: none (shadow)
}

// New returns a controller of the normalized cfg whose first window starts
// at now.
func New(cfg Config, now time.Duration) *Controller {
	c := &Controller{cfg: cfg.Normalize()}
	c.limit.Store(int64(c.cfg.Initial))
	c.vegas = int64(c.cfg.Initial)
	c.window.Store(int64(c.cfg.Window))
	c.stride.Store(1)
	c.start.Store(int64(now))
	return c
}

// Limit returns the limit computed last.
func (c *Controller) Limit() int { return int(c.limit.Load()) }

// Windows returns the number of windows ended.
func (c *Controller) Windows() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.windows
}

// Configure puts cfg in force, keeping what the controller learned. The
// limit is clamped to the new bounds; a new Initial applies only to a new
// controller. From now on every limit the controller computes is handed
// to apply (nil: to nothing), under a lock. So limits are applied in the
// order they are computed. Configure hands it the limit at once.
func (c *Controller) Configure(cfg Config, apply func(limit int)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cfg = cfg.Normalize()
	c.window.Store(int64(c.cfg.Window))
	c.vegas = c.clamp(float64(c.vegas))
	n := c.clamp(float64(c.vegas) + c.room)
	c.limit.Store(n)
	c.apply = apply
	if apply != nil {
		apply(int(n))
	}
}

// probeAfter is the windows in a row at the knee without a queue after
// which the limit probes one call above it.
const probeAfter = 10

// Target samples per window, and the most calls one sample stands for. A
// window of many calls measures one in stride of them. A call that is not
// measured then costs one atomic add and no clock reading.
const (
	targetSamples = 256
	maxStride     = 64
)

// Measure counts a call that ended and reports whether to measure it:
// read the clock and Sample it. It measures every drop, and one call in
// stride. The stride is a power of 2, at most 64, that keeps about 256
// samples per window. It is set at the end of each window from its count.
// It doubles whenever a window's samples reach a power of 2 from 512 on.
func (c *Controller) Measure(drop bool) bool {
	n := c.ended.Add(1)
	return drop || n&(c.stride.Load()-1) == 0
}

// Refuse counts a call the limit turned away: with the calls that end, it
// is the load offered to the operation.
func (c *Controller) Refuse() { c.refused.Add(1) }

// Detach stops handing limits to the function Configure gave. When it
// returns, none is handed any more: a reload is about to set the limit
// itself. Configure attaches one again.
func (c *Controller) Detach() {
	c.mu.Lock()
	c.apply = nil
	c.mu.Unlock()
}

// Sample records one call that ended at now after rtt. drop says it
// ended at the operation's own deadline. inFlight is the calls in flight
// when it ended, itself included. When the sample ends a window, Sample
// computes the next limit and returns it with true. Otherwise it returns
// the limit in force and false.
func (c *Controller) Sample(now, rtt time.Duration, drop bool, inFlight int) (int, bool) {
	if n := c.count.Add(1); n >= 2*targetSamples && n&(n-1) == 0 {
		// Many samples before the window ends: measure fewer calls.
		if st := c.stride.Load(); st < maxStride {
			c.stride.CompareAndSwap(st, st*2)
		}
	}
	c.sum.Add(int64(max(rtt, 0)))
	if drop {
		c.drops.Add(1)
	}
	c.busy.Add(int64(inFlight))
	if int64(now)-c.start.Load() < c.window.Load() || c.count.Load() < MinSamples {
		return int(c.limit.Load()), false
	}
	if !c.closing.CompareAndSwap(false, true) {
		return int(c.limit.Load()), false
	}
	defer c.closing.Store(false)
	return c.endWindow(now), true
}

// endWindow ends the window at now and computes the next limit.
func (c *Controller) endWindow(now time.Duration) int {
	elapsed := time.Duration(int64(now) - c.start.Swap(int64(now)))
	n, sum, drops, busy := c.count.Swap(0), c.sum.Swap(0), c.drops.Swap(0), c.busy.Swap(0)
	refused := c.refused.Swap(0)
	ended := max(c.ended.Swap(0), n) // n when the caller samples without Measure
	stride := int64(1)
	for stride < maxStride && stride*2*targetSamples <= ended {
		stride *= 2
	}
	c.stride.Store(stride)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.windows++
	limit, vegas := float64(c.limit.Load()), c.vegas
	next, ok := c.next(limit, elapsed, ended, refused, time.Duration(sum/max(n, 1)), drops, float64(busy)/float64(max(n, 1)))
	c.vegas = c.clamp(next)
	out := c.clamp(float64(c.vegas) + c.room)
	if ok {
		c.remember(limit, float64(out), c.vegas < vegas)
	}
	c.limit.Store(out)
	if c.apply != nil {
		c.apply(int(out))
	}
	return int(out)
}

// clamp returns the limit n, rounded, within the bounds (c.mu held).
func (c *Controller) clamp(n float64) int64 {
	return int64(math.Round(min(max(n, float64(c.cfg.Min)), float64(c.cfg.Max))))
}

// next is the controller's rule: the limit, without room, after a window
// of elapsed. In the window n calls ended (successes and drops), drops of
// them at their own deadline, and refused were turned away. The samples
// saw a mean latency r and inFlight calls in flight on average. The limit
// was limit, c.room of it room for bursts. It sets the room of the
// next window. ok is false when the window measured nothing. c.mu is held.
func (c *Controller) next(limit float64, elapsed time.Duration, n, refused int64, r time.Duration, drops int64, inFlight float64) (_ float64, ok bool) {
	vegas := float64(c.vegas)
	if n == 0 || elapsed <= 0 || r <= 0 {
		return vegas, false
	}
	x := float64(n) / elapsed.Seconds() // calls per second
	c.rebase(r, inFlight >= 0.9*limit)  // used: the limit held calls back
	// Little's law: of the calls in flight, inFlight·base/r would have
	// been served without queueing; the others were queued. And the x
	// calls per second the work served need x·base calls in flight at the
	// baseline latency: past the knee, that is the knee. The room let
	// bursts queue on purpose: that much queue is no sign of a knee.
	served := inFlight * c.base.Seconds() / r.Seconds()
	hot := c.cfg.Ceiling != 0 && r > c.cfg.Ceiling
	w := window{
		limit: vegas, x: x, inFlight: inFlight, served: served, queue: inFlight - served - max(limit-vegas, 0),
		alpha:   max(3*math.Log10(vegas), 1),
		held:    inFlight < 0.8*limit || hot || x < c.lastX/2,
		settles: c.cut,
	}
	next := c.step(w)
	dropping := drops*100 >= n && drops > 0
	if dropping {
		next = min(next, vegas*0.9)
	}
	// The load offered: the calls that ended and those turned away, in
	// calls in flight at the baseline latency. It is known unless the
	// calls filled the limit and none was turned away (they waited).
	offered := float64(n+refused) / elapsed.Seconds() * c.base.Seconds()
	full := inFlight >= 0.8*limit
	switch room := c.headroom(offered); {
	case dropping || hot || full && !w.settles && w.queue > w.alpha:
		// A queue behind a full limit: the work is past its knee, or
		// slower (its baseline is then stale: see rebase).
		c.room = 0
	case full && refused == 0:
		c.room = min(c.room, room)
	default:
		c.room = room
	}
	c.lastR, c.lastX = r, x
	return next, true
}

// window is what one window saw, as next reads it.
type window struct {
	limit, x, inFlight, served, queue, alpha float64
	// held: there is no reason to grow. The limit held nothing back
	// (calls in flight under 80 % of it), latency is above the healthy
	// ceiling, or calls stopped ending (news is late).
	held bool
	// settles: the window follows a cut and still holds the calls the
	// cut drains.
	settles bool
}

// rebase updates the baseline latency with a window's mean latency r;
// used: the limit held calls back.
func (c *Controller) rebase(r time.Duration, used bool) {
	if c.lastCut && used && c.lastR > 0 && r >= c.lastR*9/10 {
		// The last cut did not bring latency down: it was not a queue.
		c.base, c.knee = r, 0
	}
	if c.base == 0 || r < c.base {
		if r < c.base*9/10 {
			c.knee = 0 // faster work: its knee is elsewhere
		}
		c.base = r
	}
}

// step returns the limit after window w: cut past the knee, undo a probe
// that found a queue, hold, or grow.
func (c *Controller) step(w window) float64 {
	quiet := c.quiet
	c.quiet = 0
	switch {
	case w.settles:
		return w.limit
	case w.queue > w.alpha:
		// Past the knee: back to what was served, at most halving.
		c.knee = math.Round(max(min(w.served, w.x*c.base.Seconds()), w.inFlight/2))
		return c.knee
	case c.knee > 0 && w.limit > c.knee && w.queue >= w.alpha/4:
		return c.knee // a probe past the knee found a queue: undo it
	case w.queue >= w.alpha/4 || w.held:
		return w.limit // a queue shows, or no reason to grow: hold
	}
	return c.grow(w.limit, 2*w.alpha, quiet)
}

// grow returns the limit after a window without a queue in which the
// limit held calls back. While no knee is known, it doubles (TCP's slow
// start). Below a known knee, it climbs by beta, then snaps to the knee.
// At the knee, it holds for probeAfter windows, then probes one call past
// it.
func (c *Controller) grow(limit, beta float64, quiet int) float64 {
	switch {
	case c.knee == 0:
		return 2 * limit
	case limit+beta <= c.knee:
		return limit + beta
	case limit < c.knee:
		return c.knee
	case c.room > 0: // the load fits under the knee: nothing to probe
		c.knee = limit
		return limit
	case quiet+1 < probeAfter:
		c.quiet, c.knee = quiet+1, limit // at the knee: hold, and count
		return limit
	}
	return limit + 1
}

// Room for bursts. While the load offered is at most roomFull times the
// knee, the limit is the knee plus room. The room turns away at most
// burstLoss of random arrivals offering the knee. From roomFull to
// roomNone times the knee, the room shrinks to none.
const (
	burstLoss          = 0.025
	roomFull, roomNone = 1.1, 1.5
)

// headroom returns the room for bursts above the knee, for a load of
// offered calls in flight (at the baseline latency). c.mu is held.
//
// Random arrivals that keep k calls in flight on average find a limit of
// k full B(k) of the time. B is Erlang's loss formula: 12 % at k = 40.
// Room of h calls above the knee lets bursts wait a little instead. Take
// work that serves k at once, and arrivals at k per second. They find the
// k+h calls full B/(1+h·B) of the time, the states past k being as likely
// as k itself. So h = 1/burstLoss − 1/B(k), at most k. That is 31 calls
// at k = 40, and none from k ≈ 1000, where B(k) is under burstLoss. When
// the load is past the knee, the room buys no goodput and every call
// waits: it goes.
func (c *Controller) headroom(offered float64) float64 {
	k := c.knee
	if k <= 0 || offered <= 0 {
		return 0
	}
	b := 1.0 // Erlang's B(k) at a load of k, by its recurrence
	for i := 1; i <= int(k); i++ {
		b = k * b / (float64(i) + k*b)
	}
	room := min(k, max(1/burstLoss-1/b, 0))
	load := offered / k
	return room * min(max((roomNone-load)/(roomNone-roomFull), 0), 1)
}

// remember keeps what the next window's rule needs of this one. The
// limit went from limit to next. cut says the rule lowered it, not only
// the room.
func (c *Controller) remember(limit, next float64, cut bool) {
	// A cut that undoes a doubling is no test of the baseline: the
	// doubling made the queue. Nor is room that goes.
	c.lastCut = cut && next <= 0.8*limit && c.doubled == 0
	c.cut = next < limit
	c.doubled = 0
	if next == 2*limit {
		c.doubled = limit
	}
}
