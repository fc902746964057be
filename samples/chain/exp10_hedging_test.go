package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/resilience/outbound"
	"github.com/sundial-go/sundial/samples/internal/pipenet"
)

// replicas balances over Inventory replicas the way Envoy's retry host
// predicate previous_hosts does: a call's first attempt goes to the next
// replica in turn (by its X-Call number) and each further attempt (a
// hedge) to a replica the call has not tried yet.
type replicas struct {
	addrs []string
	base  http.RoundTripper
	mu    sync.Mutex
	tried map[string]int // X-Call -> attempts sent
}

func (r *replicas) RoundTrip(req *http.Request) (*http.Response, error) {
	call := req.Header.Get("X-Call")
	n, _ := strconv.Atoi(call)
	r.mu.Lock()
	i := (n + r.tried[call]) % len(r.addrs)
	r.tried[call]++
	r.mu.Unlock()
	req = req.Clone(req.Context())
	req.URL.Host = r.addrs[i]
	return r.base.RoundTrip(req)
}

// Experiment 10 (hedging): of two Inventory replicas, replica 0 answers a
// stock read in 1 s and replica 1 in 50 ms (20× faster). The client
// reads through a balancer that alternates first attempts between them.
// Without hedging, every read sent to the slow replica waits its 1 s: p99
// is at least that. With a hedge after 20 ms (the budget holds one hedge
// per call), the fast replica answers every read, those first sent to the
// slow one too, and the slow replica's journal shows that it answered
// nothing and that every attempt it got was cancelled. The test runs in a
// synctest bubble over an in-memory network, so its latencies are exact;
// over loopback on a quiet machine (p99 within 2× p50) they are
// BenchmarkExperiment10Hedging's.
func TestExperiment10HedgingHidesASlowReplica(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		// Last: the connections' goroutines end before the bubble does.
		t.Cleanup(func() { time.Sleep(time.Minute) })
		experiment10(t)
	})
}

func experiment10(t *testing.T) {
	unhedged := runHedging(t, new(pipenet.Network), 0, 10)
	for i, d := range unhedged.lat {
		want := 50 * time.Millisecond
		if i%2 == 0 { // replica 0 took the first attempt
			want = time.Second
		}
		if d != want {
			t.Errorf("without hedging, read %d took %v, want exactly %v", i, d, want)
		}
	}
	t.Logf("without hedging: p50 %v, p99 %v", unhedged.p50(), unhedged.p99())

	hedged := runHedging(t, new(pipenet.Network), 20*time.Millisecond, 40)
	for i, d := range hedged.lat {
		want := 50 * time.Millisecond
		if i%2 == 0 { // the hedge after 20 ms went to the fast replica
			want = 70 * time.Millisecond
		}
		if d != want {
			t.Errorf("with hedging, read %d took %v, want exactly %v", i, d, want)
		}
	}
	// Every read reached the slow replica, as its first attempt or as its
	// hedge after 20 ms, and every one it started lost the race.
	started := hedged.slow.Journal().Count("started")
	if started != 40 {
		t.Errorf("%d reads reached the slow replica, want all 40", started)
	}
	stopped := waitEvents(t, hedged.slow.Journal(), started, 5*time.Second, "stopped")
	if n := hedged.slow.Journal().Count("stock-read"); n != 0 {
		t.Errorf("the slow replica answered %d reads, want 0 (every one lost the race)", n)
	}
	if n := hedged.fast.Journal().Count("stock-read"); n != 40 {
		t.Errorf("the fast replica answered %d reads, want all 40", n)
	}
	t.Logf("with hedging after 20 ms: p50 %v, p99 %v; the slow replica stopped %d reads of %d",
		hedged.p50(), hedged.p99(), len(stopped), started)
}

// BenchmarkExperiment10Hedging measures Experiment 10's latencies, each
// round 40 reads with a hedge after 20 ms and 10 without: p50 and p99 in
// ms, and p99 over p50 (within 2 with the hedge, on a quiet machine).
func BenchmarkExperiment10Hedging(b *testing.B) {
	for _, bc := range []struct {
		name  string
		hedge time.Duration
		calls int
	}{{"hedge=20ms", 20 * time.Millisecond, 40}, {"no-hedge", 0, 10}} {
		b.Run(bc.name, func(b *testing.B) {
			var p50, p99 float64
			for b.Loop() {
				r := runHedging(b, nil, bc.hedge, bc.calls)
				p50 += float64(r.p50()) / 1e6
				p99 += float64(r.p99()) / 1e6
			}
			b.ReportMetric(p50/float64(b.N), "p50-ms")
			b.ReportMetric(p99/float64(b.N), "p99-ms")
			b.ReportMetric(p99/p50, "p99/p50")
		})
	}
}

// hedgingRun is what one run of Experiment 10 saw.
type hedgingRun struct {
	lat        []time.Duration // each read's latency, in the order sent
	slow, fast *Inventory
}

// p50 is the lower median: with half the reads on each replica, the fast
// replica's latency.
func (r hedgingRun) p50() time.Duration { return r.sorted()[(len(r.lat)-1)/2] }

func (r hedgingRun) p99() time.Duration { return r.sorted()[(len(r.lat)*99+99)/100-1] }

func (r hedgingRun) sorted() []time.Duration {
	s := slices.Clone(r.lat)
	slices.Sort(s)
	return s
}

// runHedging starts the two replicas and sends calls reads through the
// balancer, each with a 3 s deadline, hedged after hedge (0: never). The
// replicas listen on pn when it is not nil, else on 127.0.0.1.
func runHedging(tb testing.TB, pn *pipenet.Network, hedge time.Duration, calls int) hedgingRun {
	tb.Helper()
	var addrs []string
	var svcs []*Inventory
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	if pn != nil {
		base.DialContext = pn.DialContext
	}
	for i, delay := range []time.Duration{1000 * time.Millisecond, 50 * time.Millisecond} {
		var ln net.Listener
		var err error
		if pn != nil {
			ln, err = pn.Listen("inventory" + strconv.Itoa(i) + ":80")
		} else {
			ln, err = net.Listen("tcp", "127.0.0.1:0")
		}
		if err != nil {
			tb.Fatal(err)
		}
		svc, srv, err := startInventory(ln, InventoryConfig{StockDelay: delay}, "", nil)
		if err != nil {
			tb.Fatal(err)
		}
		stopOnCleanup(tb, srv)
		addrs, svcs = append(addrs, srv.addr), append(svcs, svc)
	}
	p := outbound.DefaultPolicy()
	p.Attempts, p.HedgeDelay, p.SafeToHedge = 2, hedge, true
	p.BudgetRatio, p.FailureThreshold = 1, 0
	dep, err := outbound.New("inventory", p)
	if err != nil {
		tb.Fatal(err)
	}
	lb := &replicas{addrs: addrs, base: base, tried: map[string]int{}}
	hc := &http.Client{Transport: httpadapter.NewTransport(lb, httpadapter.WithDependency(dep))}
	r := hedgingRun{lat: make([]time.Duration, 0, calls), slow: svcs[0], fast: svcs[1]}
	for i := range calls {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://inventory/stock?item=book", nil)
		req.Header.Set("X-Call", strconv.Itoa(i))
		start := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			cancel()
			tb.Fatalf("GET /stock: %v", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		r.lat = append(r.lat, time.Since(start))
		cancel()
		if resp.StatusCode != http.StatusOK {
			tb.Fatalf("GET /stock = %d, want 200", resp.StatusCode)
		}
	}
	return r
}
