package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// exp11Rate and exp11Outage are experiment 11's steady load: a checkout
// every 50 ms for the 10 s that Billing fails every charge.
const (
	exp11Every  = 50 * time.Millisecond
	exp11Outage = 10 * time.Second
)

// exp11Config is the config file of one run of experiment 11: the
// gateway's dependency "orders" and Orders' dependency "billing", three
// attempts each, without a breaker (the retries alone are measured), with
// the budget given.
func exp11Config(t *testing.T, ratio float64, reserve int) string {
	t.Helper()
	dep := fmt.Sprintf(`{"Attempts": 3, "Backoff": {"BaseMs": 10, "MaxMs": 20},
		"Budget": {"Ratio": %g, "Min": %d}, "Breaker": {"FailureThreshold": 0}}`, ratio, reserve)
	path := filepath.Join(t.TempDir(), "exp11.json")
	cfg := fmt.Sprintf(`{"Sundial": {"Kernel": {"Dependencies": {"orders": %s, "billing": %s}}}}`, dep, dep)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestExperiment11OneTierRetries: three tiers, gateway → orders →
// billing, each call through a typed client under its dependency. Billing
// fails every charge with UNAVAILABLE for 10 s under a steady load. The
// gateway retries its calls to Orders and marks them; so Orders makes one
// attempt at Billing per call, and Billing gets at most 1.2× the offered
// calls (plus the budget's reserve). When Orders drops the mark, both
// tiers retry within their budgets (1.2 × 1.2); with naive retries
// (unbounded budgets, no mark) Billing gets 3 × 3 = 9×. The figures are
// Billing's own count of the charges it failed.
func TestExperiment11OneTierRetries(t *testing.T) {
	t.Parallel()
	const reserve = 1
	offered := int(exp11Outage / exp11Every)
	runs := []struct {
		name    string
		ratio   float64
		reserve int
		noMark  bool
	}{
		{"typed clients: budgets and the retry mark", 0.2, reserve, false},
		{"budgets, the mark dropped", 0.2, reserve, true},
		{"naive retries at every tier", 1, 1_000_000, true},
	}
	got := make([]int, len(runs))
	for i, run := range runs {
		t.Run(run.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := ClusterConfig{
					ConfigFile: exp11Config(t, run.ratio, run.reserve),
					Billing:    BillingConfig{Outage: true},
					Inventory:  InventoryConfig{ReserveWork: 10 * time.Millisecond},
					Orders:     OrdersConfig{IgnoreRetryMark: run.noMark},
				}
				c := startBubbleCluster(t, cfg, nil)
				var wg sync.WaitGroup
				for range offered {
					wg.Go(func() {
						r := c.call(context.Background(), http.MethodPost, c.URL("gateway")+"/checkout",
							`{"item":"book","qty":1,"amount":30}`, nil)
						if r.Status != http.StatusServiceUnavailable {
							t.Errorf("POST /checkout = %d %s (err %v), want 503", r.Status, r.Body, r.Err)
						}
					})
					time.Sleep(exp11Every)
				}
				wg.Wait()
				got[i] = c.Billing.Journal().Count("outage")
			})
		})
	}
	ratio := func(n int) float64 { return float64(n) / float64(offered) }
	if bound := int(1.2*float64(offered)) + reserve; got[0] > bound || got[0] < offered {
		t.Errorf("with the typed clients Billing got %d charges for %d checkouts (%.2f×), want %d to %d (1.2× plus the reserve)",
			got[0], offered, ratio(got[0]), offered, bound)
	}
	if got[1] <= got[0] {
		t.Errorf("without the mark Billing got %d charges, want more than the %d with it", got[1], got[0])
	}
	if got[2] != 9*offered {
		t.Errorf("naive retries: Billing got %d charges, want %d (3 attempts at each of 2 tiers)", got[2], 9*offered)
	}
	t.Logf("Billing's load for %d checkouts in %v: typed clients %d (%.2f×); budgets without the mark %d (%.2f×); naive retries %d (%.2f×)",
		offered, exp11Outage, got[0], ratio(got[0]), got[1], ratio(got[1]), got[2], ratio(got[2]))
}
