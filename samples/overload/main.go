// Command overload puts five overload guards side by side in front of the
// same simulated backend, in one run: Sundial's adaptive concurrency
// limit and a static one (through a real kernel, in process), failsafe-go's
// adaptivelimiter, kratos's BBR and go-zero's AdaptiveShedder. It offers
// open-loop Poisson arrivals at 1×, 2× and 4× the backend's capacity and
// through a 5× slowdown of the backend, and prints the goodput (successes
// answered before their deadline, per second) and the p99 latency of the
// admitted calls for each.
//
// It is a module of its own, so that the peers are no dependency of
// Sundial. Run it from the repository's root with `make bench-overload`.
// It sends nothing over a network, takes about three minutes and stops by
// itself. See docs/performance.md for a run's figures and how to read them.
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/zeromicro/go-zero/core/load"
	"github.com/zeromicro/go-zero/core/logx"
	"github.com/zeromicro/go-zero/core/stat"
)

// params is the backend and the calls.
type params struct {
	c        int           // backend capacity, in calls at once
	s        time.Duration // mean service time of a call alone
	deadline time.Duration // every call's deadline, from its arrival
	burn     bool          // in the CPU-based shedders' runs (backend.burn)
	scale    float64       // multiplies every scenario's durations
	seed     uint64
	trace    bool // print each run's trace (see trial.watch)
}

// capacity is the backend's throughput, in calls per second.
func (p params) capacity() float64 { return float64(p.c) / p.s.Seconds() }

// phase is a span of a scenario reported on its own, by arrival time.
type phase struct {
	name       string
	from, to   time.Duration
	capacity   float64 // the backend's capacity then, calls/s
	headline   bool    // the phase printed in the main table
	slowFactor float64 // 0: unchanged
}

// scenario is one run's load.
type scenario struct {
	name     string
	load     float64 // arrival rate, in multiples of the capacity
	duration time.Duration
	phases   []phase
	// slow, when set, slows the backend 5× for its span.
	slowFrom, slowTo time.Duration
}

func scenarios(p params) []scenario {
	sc := func(d float64) time.Duration { return time.Duration(d * p.scale * float64(time.Second)) }
	cp := p.capacity()
	over := func(name string, load float64, dur, warm float64) scenario {
		return scenario{name: name, load: load, duration: sc(dur),
			phases: []phase{{name: "steady", from: sc(warm), to: sc(dur), capacity: cp, headline: true}}}
	}
	return []scenario{
		over("1x", 1, 7, 3),
		over("2x", 2, 7, 3),
		over("4x", 4, 7, 3),
		{name: "slow5x", load: 0.5, duration: sc(11), slowFrom: sc(3), slowTo: sc(7),
			phases: []phase{
				{name: "before", from: sc(1), to: sc(3), capacity: cp},
				{name: "slowed", from: sc(3), to: sc(7), capacity: cp / 5},
				{name: "after", from: sc(7), to: sc(11), capacity: cp},
				{name: "whole", from: sc(1), to: sc(11), capacity: cp, headline: true},
			}},
	}
}

// record is how one call went.
type record struct {
	at       time.Duration // arrival, since the start
	latency  time.Duration // arrival to answer
	lag      time.Duration // how late the call started (the host's scheduling)
	admitted bool          // it reached the backend
	ok       bool          // the backend served it (no error)
}

func main() {
	p := params{}
	flag.IntVar(&p.c, "capacity", 40, "backend capacity: calls served at once at full speed")
	flag.DurationVar(&p.s, "service", 200*time.Millisecond, "mean service time of a call alone (uniform, ±50%)")
	flag.DurationVar(&p.deadline, "deadline", 2*time.Second, "every call's deadline from its arrival")
	static := flag.Int("static", 100, "Sundial's static ConcurrencyLimit (the guess)")
	flag.BoolVar(&p.burn, "burn", true, "in the CPU-based shedders' runs, burn CPU in proportion to the backend's utilisation")
	flag.Float64Var(&p.scale, "scale", 1, "multiply every scenario's duration (0.2 for a smoke run)")
	flag.Uint64Var(&p.seed, "seed", 29, "seed of the arrivals and service times")
	only := flag.String("only", "", "run only the contenders whose name contains this")
	flag.BoolVar(&p.trace, "trace", false, "print each run's limit, calls in the backend and calls turned away, every 250 ms")
	flag.Parse()
	if p.c < 1 || p.s <= 0 || p.deadline <= 0 || *static < 1 || p.scale <= 0 {
		fmt.Fprintln(os.Stderr, "overload: -capacity, -service, -deadline, -static and -scale must be positive")
		os.Exit(2)
	}
	// go-zero logs every dropped call and its CPU statistics each minute.
	logx.Disable()
	load.DisableLog()
	stat.DisableLog()

	fmt.Printf("backend: processor sharing, capacity %d calls at once, service %v (uniform ±50%%) → %.0f calls/s; deadline %v; CPU burn %v; GOMAXPROCS %d; load average %s\n",
		p.c, p.s, p.capacity(), p.deadline, p.burn, runtime.GOMAXPROCS(0), loadavg())
	var all []contender
	for _, c := range contenders(*static) {
		if strings.Contains(c.name, *only) {
			all = append(all, c)
			fmt.Printf("  %-28s %s\n", c.name, c.options)
		}
	}
	type row struct {
		contender string
		sc        scenario
		runResult
	}
	var rows []row
	start := time.Now()
	for _, sc := range scenarios(p) {
		for _, c := range all {
			res, err := run(p, sc, c)
			if err != nil {
				fmt.Fprintf(os.Stderr, "overload: %s: %v\n", c.name, err)
				os.Exit(1)
			}
			rows = append(rows, row{c.name, sc, res})
			if p.trace {
				fmt.Printf("trace %s %s: t ms, limit, calls in the backend, turned away in the last 250 ms\n%s", sc.name, c.name, res.trace)
			}
			fmt.Fprintf(os.Stderr, "  done %-6s %-28s (%v)\n", sc.name, c.name, time.Since(start).Round(time.Second))
		}
	}

	fmt.Println()
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight|tabwriter.Debug)
	fmt.Fprintln(w, "scenario\tcontender\toffered/s\tgoodput/s\tof capacity\tp99 admitted ms\tadmitted\tadmitted timed out\tlimit p50 [min-max]\tCPU‰ read\tstart lag p99 ms\t")
	for _, r := range rows {
		for _, ph := range r.phases {
			if !ph.headline {
				continue
			}
			fmt.Fprintf(w, "%s\t%s\t%.0f\t%.0f\t%.0f%%\t%s\t%.0f%%\t%d\t%s\t%s\t%s\t\n", r.sc.name, r.contender,
				ph.offered, ph.goodput, 100*ph.goodput/ph.capacity, ms(ph.p99), 100*ph.admitted, ph.timedOut, r.limit, cpuText(r.cpu), ms(ph.lag))
		}
	}
	w.Flush()
	fmt.Println("\nslow5x by phase (goodput/s, p99 admitted ms):")
	w = tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight|tabwriter.Debug)
	fmt.Fprintln(w, "contender\tbefore\tslowed\tafter\t")
	for _, r := range rows {
		if r.sc.slowTo == 0 {
			continue
		}
		cells := []string{r.contender}
		for _, ph := range r.phases {
			if !ph.headline {
				cells = append(cells, fmt.Sprintf("%.0f (%s)", ph.goodput, ms(ph.p99)))
			}
		}
		fmt.Fprintln(w, strings.Join(cells, "\t")+"\t")
	}
	w.Flush()
	fmt.Printf("\ntook %v; load average at the end: %s\n", time.Since(start).Round(time.Second), loadavg())
}

// loadavg is the machine's load average (1, 5, 15 min), or "?" off Linux.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}

func ms(d time.Duration) string {
	if d < 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond))
}

func cpuText(c int64) string {
	if c < 0 {
		return "-"
	}
	return fmt.Sprint(c)
}

// phaseResult is what a run did in one phase.
type phaseResult struct {
	phase
	offered  float64       // arrivals per second
	goodput  float64       // successes answered before their deadline, per second
	p99      time.Duration // of admitted calls (-1: none admitted)
	admitted float64       // share of the arrivals admitted
	timedOut int           // admitted calls not answered before their deadline
	lag      time.Duration // p99 of how late the calls started: the host's noise
}

// runResult is what one run measured.
type runResult struct {
	phases []phaseResult
	// cpu is the mean of what the guard read of the CPU over the run (-1:
	// it reads none); limit, the concurrency it allowed in the headline
	// phase, sampled every 250 ms.
	cpu   int64
	limit string
	trace string // one line per 250 ms (see trial.watch)
}

// run offers sc's arrivals to a fresh guard in front of a fresh backend,
// waits for every call to end, and measures each phase.
func run(p params, sc scenario, c contender) (runResult, error) {
	g, err := c.build(p.deadline)
	if err != nil {
		return runResult{}, err
	}
	defer g.close()
	b := newBackend(p.c, p.burn && c.cpuBased)
	defer b.close()
	t := &trial{g: g, b: b, stop: make(chan struct{}), start: time.Now()}
	var bg sync.WaitGroup
	bg.Go(func() { t.watch(headlineOf(sc)) })
	if sc.slowTo > 0 {
		bg.Go(func() { t.slow(sc) })
	}
	t.offer(p, sc)
	close(t.stop)
	bg.Wait()
	return t.result(p, sc), nil
}

// trial is one run of one contender in one scenario.
type trial struct {
	g     guard
	b     *backend
	stop  chan struct{} // closed when every call has ended
	start time.Time

	mu      sync.Mutex
	records []record
	limits  []int // sampled in the headline phase
	trace   strings.Builder
	refused atomic.Int64 // calls turned away so far
	cpuSum  atomic.Int64
	cpuN    atomic.Int64
}

// headlineOf returns sc's headline phase.
func headlineOf(sc scenario) phase {
	for _, ph := range sc.phases {
		if ph.headline {
			return ph
		}
	}
	return phase{}
}

// watch samples the CPU the guard reads and, within headline, its limit,
// every 250 ms until the trial stops. It also writes the trace: the limit,
// the calls in the backend and the calls turned away since the last line.
func (t *trial) watch(headline phase) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var refused int64
	for {
		select {
		case <-tick.C:
			t.cpuSum.Add(t.g.cpu())
			t.cpuN.Add(1)
			at, limit := time.Since(t.start), t.g.limit()
			n := t.refused.Load()
			t.mu.Lock()
			fmt.Fprintf(&t.trace, "  %6d %4d %4d %4d\n", at.Milliseconds(), limit, t.b.inFlight(), n-refused)
			if at >= headline.from && at < headline.to {
				t.limits = append(t.limits, limit)
			}
			t.mu.Unlock()
			refused = n
		case <-t.stop:
			return
		}
	}
}

// slow slows the backend 5x from sc.slowFrom to sc.slowTo.
func (t *trial) slow(sc scenario) {
	for _, ev := range []struct {
		at time.Duration
		f  float64
	}{{sc.slowFrom, 5}, {sc.slowTo, 1}} {
		select {
		case <-time.After(time.Until(t.start.Add(ev.at))):
			t.b.setSlowdown(ev.f)
		case <-t.stop:
			return
		}
	}
}

// offer sends sc's arrivals, the same arrivals and demands for every
// contender, and waits for every call to end.
func (t *trial) offer(p params, sc scenario) {
	rng := rand.New(rand.NewPCG(p.seed, uint64(len(sc.name))*0x9e3779b97f4a7c15+uint64(sc.load*1000)))
	rate := sc.load * p.capacity()
	var calls sync.WaitGroup
	var next time.Duration
	for {
		next += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
		if next >= sc.duration {
			break
		}
		demand := time.Duration((0.5 + rng.Float64()) * float64(p.s))
		at := next
		time.Sleep(time.Until(t.start.Add(at)))
		calls.Go(func() { t.call(p, at, demand) })
	}
	calls.Wait()
}

// call makes one call, due at at with demand, and records it.
func (t *trial) call(p params, at, demand time.Duration) {
	arrival := time.Now()
	var admitted atomic.Bool
	err := t.g.do(arrival, p.deadline, func(ctx context.Context) error {
		admitted.Store(true)
		return t.b.serve(ctx, demand)
	})
	r := record{at: at, lag: arrival.Sub(t.start.Add(at)), latency: time.Since(arrival), admitted: admitted.Load(), ok: err == nil}
	if !r.admitted {
		t.refused.Add(1)
	}
	t.mu.Lock()
	t.records = append(t.records, r)
	t.mu.Unlock()
}

// result measures each phase of the trial.
func (t *trial) result(p params, sc scenario) runResult {
	res := runResult{cpu: -1, limit: "-", trace: t.trace.String()}
	if n := t.cpuN.Load(); n > 0 && t.cpuSum.Load() >= 0 {
		res.cpu = t.cpuSum.Load() / n
	}
	if slices.Sort(t.limits); len(t.limits) > 0 && t.limits[0] >= 0 {
		res.limit = fmt.Sprintf("%d [%d-%d]", t.limits[len(t.limits)/2], t.limits[0], t.limits[len(t.limits)-1])
	}
	for _, ph := range sc.phases {
		res.phases = append(res.phases, measure(ph, t.records, p.deadline))
	}
	return res
}

func p99(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[int(math.Ceil(0.99*float64(len(d))))-1]
}

// measure sums up the calls that arrived within ph (offered, admitted,
// p99, timed out) and the successes answered within it (goodput).
func measure(ph phase, records []record, deadline time.Duration) phaseResult {
	r := phaseResult{phase: ph, p99: -1}
	var n, admitted, good int
	var lat, lag []time.Duration
	for _, c := range records {
		if c.at < ph.from || c.at >= ph.to {
			continue
		}
		n++
		lag = append(lag, c.lag)
		if c.admitted {
			admitted++
			lat = append(lat, c.latency)
			if !c.ok || c.latency > deadline {
				r.timedOut++
			}
		}
	}
	for _, c := range records { // goodput by the time of the answer
		if end := c.at + c.latency; end >= ph.from && end < ph.to && c.ok && c.latency <= deadline {
			good++
		}
	}
	secs := (ph.to - ph.from).Seconds()
	r.offered = float64(n) / secs
	r.goodput = float64(good) / secs
	if n > 0 {
		r.admitted = float64(admitted) / float64(n)
	}
	if len(lat) > 0 {
		r.p99 = p99(lat)
	}
	if len(lag) > 0 {
		r.lag = p99(lag)
	}
	return r
}
