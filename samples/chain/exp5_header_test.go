package main

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"testing/synctest"
	"time"
)

// Experiment 5: Orders reads Inventory's stock twice under one 2 s budget,
// with 0.5 s of local work between the reads. Inventory answers the first
// attempt 503, so the first read retries after a 300 ms back-off. Each
// attempt is capped at a configured 10 s. The deadline header Inventory
// receives on each attempt says what is really left.
func TestExperiment5RetriesCarryTheRemainingDeadline(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := startBubbleCluster(t, ClusterConfig{
			Inventory: InventoryConfig{StockFailures: 1},
			Orders:    OrdersConfig{AttemptTimeout: 10 * time.Second, Backoff: 300 * time.Millisecond, LocalWork: 500 * time.Millisecond},
		}, nil)
		r := c.call(context.Background(), http.MethodGet, c.URL("orders")+"/stock?item=book&reads=2", "", deadlineIn(2*time.Second))
		if r.Err != nil || r.Status != http.StatusOK {
			t.Fatalf("GET /stock?reads=2 = %d %s (err %v), want 200", r.Status, r.Body, r.Err)
		}
		arrivals := c.Inventory.Journal().Events("arrival")
		if len(arrivals) != 3 {
			t.Fatalf("Inventory saw %d requests with a deadline header, want 3 (503, retry, second read)", len(arrivals))
		}
		ms := make([]int, len(arrivals))
		for i, a := range arrivals {
			v, err := strconv.Atoi(a.Attrs["timeoutMs"])
			if err != nil {
				t.Fatalf("attempt %d: Sundial-Timeout-Ms = %q: %v", i+1, a.Attrs["timeoutMs"], err)
			}
			ms[i] = v
		}
		t.Logf("Sundial-Timeout-Ms received on successive attempts: %v (the reference run saw 1992, 1366, 832)", ms)
		t.Logf("Sundial-Deadline received: %s, %s, %s", arrivals[0].Attrs["deadline"], arrivals[1].Attrs["deadline"], arrivals[2].Attrs["deadline"])
		for i, v := range ms {
			if v > 2000 {
				t.Errorf("attempt %d carried %d ms: more than the 2 s budget; the 10 s per-attempt cap must never stretch it", i+1, v)
			}
		}
		exactly(t, "first attempt's header", time.Duration(ms[0])*time.Millisecond, 2000*time.Millisecond)
		// The back-off and the local work are spent from the same budget.
		exactly(t, "drop across the 300 ms back-off", time.Duration(ms[0]-ms[1])*time.Millisecond, 300*time.Millisecond)
		exactly(t, "drop across the 500 ms of local work", time.Duration(ms[1]-ms[2])*time.Millisecond, 500*time.Millisecond)
	})
}
