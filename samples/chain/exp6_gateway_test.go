package main

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience"
)

// Experiment 6 (gateway-deadline-budget): the client sends an absolute
// deadline; the gateway refuses at once when less than 30 ms remain, keeps
// 10 ms for itself, and gives its primary dependency (120 ms of latency)
// 60 % of the rest and its secondary one (30 ms) 30 % of what is left
// then. A share under 20 ms is not worth a call.
func TestExperiment6GatewayBudget(t *testing.T) {
	t.Parallel()
	logs := new(pipelinetest.LogSink)
	c := startCluster(t, ClusterConfig{}, logs)
	slowCalls := func() int { return c.Inventory.Journal().Count("started") }

	t.Run("1000 ms: both dependencies fit", func(t *testing.T) {
		before := slowCalls()
		r := call(context.Background(), http.MethodGet, c.URL("gateway")+"/order", "", deadlineIn(time.Second))
		if r.Err != nil || r.Status != http.StatusOK {
			t.Fatalf("GET /order with 1000 ms = %d %s (err %v), want 200", r.Status, r.Body, r.Err)
		}
		if n := slowCalls() - before; n != 2 {
			t.Errorf("dependency calls = %d, want 2", n)
		}
		t.Logf("1000 ms: 200 %s in %v", r.Body, r.Elapsed.Round(time.Millisecond))
	})

	t.Run("20 ms: 504 at once, remaining below gateway minimum", func(t *testing.T) {
		before := slowCalls()
		r := call(context.Background(), http.MethodGet, c.URL("gateway")+"/order", "", deadlineIn(20*time.Millisecond))
		if r.Err != nil || r.Status != http.StatusGatewayTimeout || r.Problem.Code != resilience.CodeBudgetExhausted {
			t.Fatalf("GET /order with 20 ms = %d %s (err %v), want 504 %s", r.Status, r.Body, r.Err, resilience.CodeBudgetExhausted)
		}
		d := r.Problem.Details
		if d["reason"] != ReasonGatewayMinimum || d["stage"] != "gateway" {
			t.Errorf("details = %v, want reason %q at stage gateway", d, ReasonGatewayMinimum)
		}
		rem, _ := d["remainingMs"].(float64)
		if minimum, _ := d["minimumMs"].(float64); rem > 20 || minimum != 30 {
			t.Errorf("details.remainingMs = %v, minimumMs = %v; want at most 20 and 30", d["remainingMs"], d["minimumMs"])
		}
		// At once: no dependency was called, and the answer did not wait
		// for the deadline.
		if n := slowCalls() - before; n != 0 {
			t.Errorf("dependency calls = %d, want 0", n)
		}
		rec := waitLog(t, logs, "http request", map[string]any{"role": "gateway", "operation": "gateway.order", "status": int64(http.StatusGatewayTimeout)}, 2*time.Second)
		if ms, _ := rec.Attrs["durationMs"].(float64); ms >= rem {
			t.Errorf("the gateway took %v ms to answer, want less than the %v ms it had: it must not wait for anything", ms, rem)
		}
		t.Logf("20 ms: 504 %s, reason %q, remainingMs %v; the gateway answered in %v ms (the client saw %v)",
			r.Problem.Code, d["reason"], d["remainingMs"], rec.Attrs["durationMs"], r.Elapsed.Round(100*time.Microsecond))
	})

	t.Run("150 ms: the primary's share is below its 120 ms latency", func(t *testing.T) {
		r := call(context.Background(), http.MethodGet, c.URL("gateway")+"/order", "", deadlineIn(150*time.Millisecond))
		if r.Err != nil || r.Status != http.StatusGatewayTimeout || r.Problem.Code != resilience.CodeBudgetExhausted {
			t.Fatalf("GET /order with 150 ms = %d %s (err %v), want 504 %s", r.Status, r.Body, r.Err, resilience.CodeBudgetExhausted)
		}
		d := r.Problem.Details
		if d["reason"] != ReasonDownstreamTimeout || d["dependency"] != "primary" {
			t.Errorf("details = %v, want reason %q naming dependency primary", d, ReasonDownstreamTimeout)
		}
		budget, _ := d["budgetMs"].(float64)
		elapsed, _ := d["elapsedMs"].(float64)
		// (150 - transit - 10) × 0.6 is at most 84 ms: under the 120 ms the
		// primary needs.
		within(t, "primary's budget", time.Duration(budget)*time.Millisecond, 60*time.Millisecond, 84*time.Millisecond)
		within(t, "primary's elapsed", time.Duration(elapsed)*time.Millisecond, time.Duration(budget-1)*time.Millisecond, 119*time.Millisecond)
		t.Logf("150 ms: 504 %s, reason %q, dependency %v, budgetMs %v, elapsedMs %v", r.Problem.Code, d["reason"], d["dependency"], budget, elapsed)
	})
}
