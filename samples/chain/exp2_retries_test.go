package main

import (
	"context"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/pipeline"
)

// Experiment 2: Inventory accepts the request and never answers. Orders
// reads the stock with up to three attempts, each capped at 1 s.
func TestExperiment2SilentServerRetries(t *testing.T) {
	t.Parallel()
	cfg := ClusterConfig{Orders: OrdersConfig{StockPath: "/silent", Attempts: 3, AttemptTimeout: time.Second, Backoff: 10 * time.Millisecond}}

	t.Run("each attempt with its own 1 s timeout takes 3 s", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			c := startBubbleCluster(t, cfg, nil)
			r := c.call(context.Background(), http.MethodGet, c.URL("orders")+"/stock?item=book", "", nil)
			if r.Err != nil || r.Status != http.StatusGatewayTimeout || r.Problem.Code != "ORDERS_TIMEOUT_002" {
				t.Fatalf("GET /stock = %d %s (err %v), want 504 ORDERS_TIMEOUT_002", r.Status, r.Body, r.Err)
			}
			// Three attempts of 1 s and two back-offs of 10 ms.
			exactly(t, "three 1 s attempts took", r.Elapsed, 3020*time.Millisecond)
			if n := c.Inventory.Journal().Count("silent-accepted"); n != 3 {
				t.Errorf("Inventory saw %d attempts, want 3", n)
			}
		})
	})

	t.Run("under one 1 s budget all attempts together end at 1 s", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			c := startBubbleCluster(t, cfg, nil)
			r := c.call(context.Background(), http.MethodGet, c.URL("orders")+"/stock?item=book", "", deadlineIn(time.Second))
			if r.Err != nil || r.Status != http.StatusGatewayTimeout || r.Problem.Code != pipeline.CodeTimeout {
				t.Fatalf("GET /stock with a 1 s deadline = %d %s (err %v), want 504 %s", r.Status, r.Body, r.Err, pipeline.CodeTimeout)
			}
			exactly(t, "all attempts under a 1 s budget took", r.Elapsed, time.Second)
			// The first attempt used the whole budget; no attempt started after it.
			attempts := c.Orders.Journal().Events("stock-attempt")
			if len(attempts) != 1 {
				t.Errorf("Orders started %d attempts, want 1 (the first takes the whole budget)", len(attempts))
			}
			t.Logf("Orders started %d attempt(s); Inventory saw %d", len(attempts), c.Inventory.Journal().Count("silent-accepted"))
		})
	})
}
