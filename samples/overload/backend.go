package main

import (
	"container/heap"
	"context"
	"math"
	"runtime"
	"sync"
	"time"
)

// backend is the simulated work every guard protects: a processor-sharing
// server of capacity c. Each call brings a demand (its service time when
// it runs alone). With n calls running, each progresses at min(1, c/n) of
// full speed, divided by the slowdown: up to c calls run at their service
// time, and beyond c every call slows alike, as on a saturated CPU or a
// database at its knee. A call whose context ends leaves at once and stops
// taking a share (the work is context-aware).
//
// The state is derived from timestamps: v is the work each running call
// has received since the start (every call receives the same), and a call
// is done when v reaches its tag, v at its arrival plus its demand. One
// goroutine wakes at the next tag to answer the calls that are done.
//
// A package such as resilience/internal/overload has a FIFO pool of
// workers instead; processor sharing is the harder case for a limit
// (latency grows with every call past the knee, and nothing queues
// visibly), and it is what the CPU-based shedders assume.
type backend struct {
	c int

	mu   sync.Mutex // guards what follows
	jobs jobHeap
	v    float64   // work received by each running call, in seconds
	last time.Time // when v was last advanced
	slow float64   // slowdown factor (1: normal)

	wake chan struct{}
	stop chan struct{}
	wg   sync.WaitGroup
}

// job is one call in the backend.
type job struct {
	tag  float64 // v at which it is done
	done chan struct{}
	i    int // index in the heap; -1 once out
}

type jobHeap []*job

func (h jobHeap) Len() int           { return len(h) }
func (h jobHeap) Less(i, j int) bool { return h[i].tag < h[j].tag }
func (h jobHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i]; h[i].i = i; h[j].i = j }
func (h *jobHeap) Push(x any)        { j := x.(*job); j.i = len(*h); *h = append(*h, j) }
func (h *jobHeap) Pop() any {
	old := *h
	j := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	j.i = -1
	return j
}

// newBackend starts a backend of capacity c; burn, when true, also burns
// CPU in proportion to its utilisation (see burn). Stop it with close.
func newBackend(c int, burn bool) *backend {
	b := &backend{c: c, slow: 1, last: time.Now(), wake: make(chan struct{}, 1), stop: make(chan struct{})}
	b.wg.Go(b.loop)
	if burn {
		for range runtime.GOMAXPROCS(0) {
			b.wg.Go(b.burn)
		}
	}
	return b
}

func (b *backend) close() {
	close(b.stop)
	b.wg.Wait()
}

// rate is the work per second each running call receives (b.mu held).
func (b *backend) rate() float64 {
	n := len(b.jobs)
	if n == 0 {
		return 0
	}
	return math.Min(1, float64(b.c)/float64(n)) / b.slow
}

// advance brings v to now (b.mu held).
func (b *backend) advance(now time.Time) {
	b.v += now.Sub(b.last).Seconds() * b.rate()
	b.last = now
}

func (b *backend) signal() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// setSlowdown changes the slowdown factor from now on (5: five times
// slower; 1: normal again).
func (b *backend) setSlowdown(f float64) {
	b.mu.Lock()
	b.advance(time.Now())
	b.slow = f
	b.mu.Unlock()
	b.signal()
}

// utilisation is the share of the capacity in use, 0 to 1.
func (b *backend) utilisation() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return math.Min(1, float64(len(b.jobs))/float64(b.c))
}

// inFlight is the calls in the backend.
func (b *backend) inFlight() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.jobs)
}

// serve runs one call of the given demand: it returns nil when the call
// is done, or ctx's error when ctx ends first.
func (b *backend) serve(ctx context.Context, demand time.Duration) error {
	j := &job{done: make(chan struct{})}
	b.mu.Lock()
	b.advance(time.Now())
	j.tag = b.v + demand.Seconds()
	heap.Push(&b.jobs, j)
	b.mu.Unlock()
	b.signal()
	select {
	case <-j.done:
		return nil
	case <-ctx.Done():
	}
	b.mu.Lock()
	b.advance(time.Now())
	gone := j.i >= 0
	if gone {
		heap.Remove(&b.jobs, j.i)
	}
	b.mu.Unlock()
	if !gone { // it was done at the same moment
		return nil
	}
	b.signal()
	return ctx.Err()
}

// loop answers the calls that are done and sleeps until the next one is.
func (b *backend) loop() {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		b.mu.Lock()
		b.advance(time.Now())
		for len(b.jobs) > 0 && b.jobs[0].tag <= b.v+1e-9 {
			close(heap.Pop(&b.jobs).(*job).done)
		}
		next := time.Hour
		if len(b.jobs) > 0 {
			next = time.Duration((b.jobs[0].tag - b.v) / b.rate() * float64(time.Second))
		}
		b.mu.Unlock()
		t.Reset(max(next, 0))
		select {
		case <-t.C:
		case <-b.wake:
		case <-b.stop:
			return
		}
	}
}

// burn makes this process use CPU in proportion to the backend's
// utilisation, on each of GOMAXPROCS goroutines: in every 5 ms it spins
// for utilisation × 5 ms and sleeps for the rest. The CPU-based shedders
// (kratos BBR, go-zero) read the machine's CPU; with a sleeping backend
// they would read only what else the machine does. With burn, a saturated
// backend reads as a saturated CPU, which is what those shedders assume.
// Only their runs burn: the spinning goroutines delay every other
// goroutine of the process by up to a scheduler slice, which the
// latency-based limits would read as queueing in the backend.
func (b *backend) burn() {
	const slice = 5 * time.Millisecond
	for {
		select {
		case <-b.stop:
			return
		default:
		}
		busy := time.Duration(b.utilisation() * float64(slice))
		start := time.Now()
		for time.Since(start) < busy {
		}
		time.Sleep(slice - busy)
	}
}
