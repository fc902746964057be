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
	"time"

	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/resilience/outbound"
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
// Without hedging, every other read waits for the slow replica: p99 is
// its 1 s. With a hedge after 20 ms (the budget holds one hedge per
// call), a read stuck on the slow replica is answered by the other: p99
// stays within 2× p50. The slow replica's own journal shows that it
// answered nothing and that every attempt it got was cancelled.
func TestExperiment10HedgingHidesASlowReplica(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, hedge time.Duration, calls int) (p50, p99 time.Duration, slow *Inventory) {
		var addrs []string
		var svcs []*Inventory
		for _, delay := range []time.Duration{1000 * time.Millisecond, 50 * time.Millisecond} {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			svc, srv, err := startInventory(ln, InventoryConfig{StockDelay: delay}, "", nil)
			if err != nil {
				t.Fatal(err)
			}
			stopOnCleanup(t, srv)
			addrs, svcs = append(addrs, srv.addr), append(svcs, svc)
		}
		p := outbound.DefaultPolicy()
		p.Attempts, p.HedgeDelay, p.SafeToHedge = 2, hedge, true
		p.BudgetRatio, p.FailureThreshold = 1, 0
		dep, err := outbound.New("inventory", p)
		if err != nil {
			t.Fatal(err)
		}
		base := &http.Transport{}
		defer base.CloseIdleConnections()
		lb := &replicas{addrs: addrs, base: base, tried: map[string]int{}}
		hc := &http.Client{Transport: httpadapter.NewTransport(lb, httpadapter.WithDependency(dep))}
		lat := make([]time.Duration, 0, calls)
		for i := range calls {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://inventory/stock?item=book", nil)
			req.Header.Set("X-Call", strconv.Itoa(i))
			start := time.Now()
			resp, err := hc.Do(req)
			if err != nil {
				cancel()
				t.Fatalf("GET /stock: %v", err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			lat = append(lat, time.Since(start))
			cancel()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET /stock = %d, want 200", resp.StatusCode)
			}
		}
		slices.Sort(lat)
		// the lower median: with half the reads on each replica, p50 is
		// the fast replica's latency
		return lat[(len(lat)-1)/2], lat[(len(lat)*99+99)/100-1], svcs[0]
	}

	p50, p99, _ := run(t, 0, 10)
	if p99 < time.Second || p99 < 2*p50 {
		t.Errorf("without hedging p50 %v p99 %v, want the slow replica's 1 s in p99", p50, p99)
	}
	t.Logf("without hedging: p50 %v, p99 %v (%.1f× p50)", p50, p99, float64(p99)/float64(p50))

	hp50, hp99, slow := run(t, 20*time.Millisecond, 40)
	if hp99 > 2*hp50 {
		t.Errorf("with hedging p50 %v p99 %v (%.1f×), want p99 ≤ 2× p50", hp50, hp99, float64(hp99)/float64(hp50))
	}
	// every read reached the slow replica: 20 as first attempts, 20 as
	// hedges of a read the fast replica answered first
	stopped := waitEvents(t, slow.Journal(), 40, 5*time.Second, "stopped")
	if n := slow.Journal().Count("stock-read"); n != 0 {
		t.Errorf("the slow replica answered %d reads, want 0 (every one lost the race)", n)
	}
	t.Logf("with hedging after 20 ms: p50 %v, p99 %v (%.1f× p50); the slow replica stopped %d reads", hp50, hp99,
		float64(hp99)/float64(hp50), len(stopped))
}
