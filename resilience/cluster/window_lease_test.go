package cluster_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/resilience/cluster"
	"github.com/sundial-go/sundial/resilience/cluster/redistest"
	"github.com/sundial-go/sundial/resilience/internal/limited"
)

// leasePolicy is a cluster window of limit permits per length, leasing
// share permits per round trip.
func leasePolicy(limit, share int, length time.Duration) resilience.Policy {
	return resilience.Policy{PermitLimit: limit, Window: length, LeasePermits: share,
		Scope: resilience.ScopeCluster, StoreTimeout: 2 * time.Second}
}

// admissions counts admitted calls per window index (the server's).
type admissions struct {
	mu  sync.Mutex
	per map[int64]int
}

func (a *admissions) add(idx int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.per == nil {
		a.per = make(map[int64]int)
	}
	a.per[idx]++
}

// inOneWindow runs f until it counts its admissions in a single window
// (a run that crossed a window boundary is run again, at most 3 times),
// and returns that window's count.
func inOneWindow(t *testing.T, limit int, f func(a *admissions)) int {
	t.Helper()
	for range 3 {
		var a admissions
		f(&a)
		for idx, n := range a.per {
			if n > limit || idx < 0 {
				t.Fatalf("window %d admitted %d, limit %d", idx, n, limit)
			}
		}
		if len(a.per) == 1 {
			for _, n := range a.per {
				return n
			}
		}
		t.Logf("the run crossed a window boundary (%v); again", a.per)
	}
	t.Fatal("three runs crossed a window boundary")
	return 0
}

// TestLeaseNeverExceedsLimitAcrossReplicas: three replicas lease shares of
// 30 from PermitLimit 100, and twelve callers ask until they are turned
// away; the window admits exactly 100 (no share is left unused), counted
// by the server's window index.
func TestLeaseNeverExceedsLimitAcrossReplicas(t *testing.T) {
	srv := redistest.Start(t)
	p := leasePolicy(100, 30, time.Hour)
	run := 0
	got := inOneWindow(t, p.PermitLimit, func(a *admissions) {
		run++
		var ws []resilience.SharedWindow
		for range 3 {
			r := newReplica(t, srv, cluster.Config{KeyPrefix: "lease1-" + string(rune('a'+run))})
			w, err := r.store.Window("orders.create", p)
			if err != nil {
				t.Fatal(err)
			}
			ws = append(ws, w)
		}
		var wg sync.WaitGroup
		for i := range 12 {
			wg.Go(func() {
				for { // until the window turns it away: demand exceeds the limit
					_, idx, err := cluster.TakeIndexed(ws[i%3], t.Context())
					if err != nil {
						if !errors.Is(err, resilience.ErrLimited) {
							t.Errorf("Take: %v", err)
						}
						return
					}
					a.add(idx)
				}
			})
		}
		wg.Wait()
	})
	if got != p.PermitLimit {
		t.Fatalf("admitted %d in the window, want exactly %d", got, p.PermitLimit)
	}
}

// TestLeaseRoundTrips: with shares of 10, a replica admits 100 calls in 10
// round trips (and one prefetch finds the window used up); the 101st is
// rejected in one more, and the ones after it cost none. The RateLimit
// count stays exact: the permits nobody took plus this replica's share.
func TestLeaseRoundTrips(t *testing.T) {
	srv := redistest.Start(t)
	p := leasePolicy(100, 10, time.Hour)
	r := newReplica(t, srv, cluster.Config{KeyPrefix: "lease2"})
	w, err := r.store.Window("orders.create", p)
	if err != nil {
		t.Fatal(err)
	}
	inOneWindow(t, p.PermitLimit, func(a *admissions) {
		_, _ = r.store.Window("orders.create", p) // a fresh config: the last run's share is unused
		r.rdb.Del(t.Context(), "{lease2:orders.create}:w:3600000000")
		before := r.calls.Load()
		for i := range 100 {
			q, idx, err := cluster.TakeIndexed(w, t.Context())
			if err != nil {
				t.Fatalf("call %d: %v", i+1, err)
			}
			if want := 100 - (i + 1); q.Remaining != want || q.Reset <= 0 {
				t.Fatalf("call %d: quota %+v, want Remaining %d", i+1, q, want)
			}
			a.add(idx)
		}
		for i := range 3 {
			if _, _, err := cluster.TakeIndexed(w, t.Context()); !errors.Is(err, resilience.ErrLimited) {
				t.Fatalf("call %d past the limit: %v, want ErrLimited", 101+i, err)
			}
		}
		// 10 shares of 10, one prefetch that found the window used up, and
		// the 101st call's own round trip; the last two cost none.
		if got := r.calls.Load() - before; got != 12 {
			t.Fatalf("103 calls took %d round trips, want 12", got)
		}
	})
}

// TestLeaseOfDeadReplicaLapsesWithWindow: a replica that took a share of
// 60 and died (its connection gone, nothing given back) leaves 40 to the
// others in that window, and nothing of it in the next.
func TestLeaseOfDeadReplicaLapsesWithWindow(t *testing.T) {
	srv := redistest.Start(t)
	p := leasePolicy(100, 60, 2*time.Second)
	perCall := p
	perCall.LeasePermits = 0
	for attempt := 1; ; attempt++ {
		prefix := "lease3-" + string(rune('a'+attempt))
		dead := newReplica(t, srv, cluster.Config{KeyPrefix: prefix})
		live := newReplica(t, srv, cluster.Config{KeyPrefix: prefix})
		dw, _ := dead.store.Window("orders.create", p)
		lw, _ := live.store.Window("orders.create", perCall)
		_, first, err := cluster.TakeIndexed(dw, t.Context())
		if err != nil {
			t.Fatal(err)
		}
		dead.rdb.Close() // killed: the share of 59 unused is never given back
		dead.store.Close()
		var a admissions
		var retry time.Duration
		for {
			_, idx, err := cluster.TakeIndexed(lw, t.Context())
			var le *limited.Error
			if errors.As(err, &le) {
				retry = le.RetryAfter
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			a.add(idx)
		}
		if len(a.per) != 1 || a.per[first] == 0 {
			if attempt < 3 {
				t.Logf("crossed a window boundary (%v); again", a.per)
				continue
			}
			t.Fatalf("three runs crossed a window boundary")
		}
		if got := a.per[first]; got != 40 {
			t.Fatalf("the live replica got %d in the dead one's window, want 40", got)
		}
		time.Sleep(retry) // the store's retry-after: the next window
		var next admissions
		for {
			_, idx, err := cluster.TakeIndexed(lw, t.Context())
			if err != nil {
				break
			}
			next.add(idx)
		}
		if len(next.per) != 1 && attempt < 3 {
			t.Logf("crossed a window boundary (%v); again", next.per)
			continue
		}
		// A later window (the next, or one after if the sleep overran)
		// admits the whole limit: none of the dead replica's share is left.
		if len(next.per) != 1 {
			t.Fatalf("after the dead replica's window %d, admitted %v; want 100 in one later window", first, next.per)
		}
		for idx, got := range next.per {
			if idx <= first || got != 100 {
				t.Fatalf("after the dead replica's window %d, admitted %v; want 100 in one later window", first, next.per)
			}
		}
		return
	}
}

// TestLeaseGivenBackOnClose: a replica closed with 59 permits of its share
// unused gives them back: the other replica gets 99 in that window.
func TestLeaseGivenBackOnClose(t *testing.T) {
	srv := redistest.Start(t)
	p := leasePolicy(100, 60, time.Hour)
	got := inOneWindow(t, p.PermitLimit, func(a *admissions) {
		prefix := "lease4-" + time.Now().Format("150405.000000")
		closing := newReplica(t, srv, cluster.Config{KeyPrefix: prefix})
		other := newReplica(t, srv, cluster.Config{KeyPrefix: prefix})
		cw, _ := closing.store.Window("orders.create", p)
		ow, _ := other.store.Window("orders.create", p)
		_, idx, err := cluster.TakeIndexed(cw, t.Context())
		if err != nil {
			t.Fatal(err)
		}
		a.add(idx)
		closing.store.Close()
		for {
			_, idx, err := cluster.TakeIndexed(ow, t.Context())
			if err != nil {
				break
			}
			a.add(idx)
		}
	})
	if got != 100 {
		t.Fatalf("the window admitted %d across both, want 100 (1 + 99 given back)", got)
	}
}

// TestLeaseQueuesForNextWindow: when the window has no permit left, a
// leasing window queues as without a lease: the call reserves a permit of
// the next window within QueueLimit and runs in it; past the queue it is
// rejected.
func TestLeaseQueuesForNextWindow(t *testing.T) {
	srv := redistest.Start(t)
	p := leasePolicy(5, 5, time.Second)
	p.QueueLimit = 1
	r := newReplica(t, srv, cluster.Config{KeyPrefix: "lease5"})
	w, _ := r.store.Window("orders.create", p)
	for attempt := 1; ; attempt++ {
		_, _ = r.store.Window("orders.create", p)
		r.rdb.Del(t.Context(), "{lease5:orders.create}:w:1000000")
		var a admissions
		for range 5 {
			_, idx, err := cluster.TakeIndexed(w, t.Context())
			if err != nil {
				t.Fatal(err)
			}
			a.add(idx)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		_, reserved, err := cluster.TakeIndexed(w, ctx)
		cancel()
		if err != nil {
			t.Fatalf("the 6th call: %v, want a reservation in the next window", err)
		}
		if len(a.per) != 1 {
			if attempt < 3 {
				t.Logf("crossed a window boundary (%v); again", a.per)
				continue
			}
			t.Fatal("three runs crossed a window boundary")
		}
		for idx := range a.per {
			if reserved != idx+1 {
				t.Fatalf("the 6th call ran in window %d, want %d", reserved, idx+1)
			}
		}
		return
	}
}

// TestLeaseDegradesAsConfigured: a share taken before the store went away
// is still used (its permits are counted in the store); then the window
// degrades as OnStoreError says ("closed": rejected).
func TestLeaseDegradesAsConfigured(t *testing.T) {
	srv := redistest.Start(t)
	p := leasePolicy(100, 3, time.Hour)
	p.OnStoreError = "closed"
	p.StoreTimeout = 200 * time.Millisecond
	r := newReplica(t, srv, cluster.Config{KeyPrefix: "lease6", DegradeAfter: 1})
	w, _ := r.store.Window("orders.create", p)
	if _, _, err := cluster.TakeIndexed(w, t.Context()); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	for i := range 2 {
		if _, _, err := cluster.TakeIndexed(w, t.Context()); err != nil {
			t.Fatalf("call %d from the share: %v", i+2, err)
		}
	}
	_, idx, err := cluster.TakeIndexed(w, t.Context())
	if !errors.Is(err, resilience.ErrLimited) || idx != -1 || !r.store.Degraded("orders.create") {
		t.Fatalf("past the share with the store down: idx %d, %v, degraded %v; want the closed fallback's rejection",
			idx, err, r.store.Degraded("orders.create"))
	}
}

// TestLeaseGivenBackOnReload: a share of 60 taken under one policy is
// given back by the first round trip under the reloaded one (shares of
// 10), and Close gives back what is left of that: the store's record
// counts the 2 calls that ran.
func TestLeaseGivenBackOnReload(t *testing.T) {
	srv := redistest.Start(t)
	p := leasePolicy(100, 60, time.Hour)
	for attempt := 1; ; attempt++ {
		prefix := "lease7-" + strconv.Itoa(attempt)
		r := newReplica(t, srv, cluster.Config{KeyPrefix: prefix})
		w, _ := r.store.Window("orders.create", p)
		_, first, err := cluster.TakeIndexed(w, t.Context())
		if err != nil {
			t.Fatal(err)
		}
		p2 := p
		p2.LeasePermits = 10
		if _, err := r.store.Window("orders.create", p2); err != nil {
			t.Fatal(err)
		}
		_, second, err := cluster.TakeIndexed(w, t.Context())
		if err != nil {
			t.Fatal(err)
		}
		r.store.Close() // waits for the background give-back, then gives back the share of 10
		u, err := r.rdb.HGet(t.Context(), "{"+prefix+":orders.create}:w:3600000000", "u").Result()
		if err != nil {
			t.Fatal(err)
		}
		if first != second && attempt < 3 {
			continue // a window boundary between the two calls
		}
		if u != "2" {
			t.Fatalf("the store counts %s permits taken after a reload and Close, want 2 (the calls that ran)", u)
		}
		return
	}
}
