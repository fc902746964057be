package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience/outbound"
	"github.com/sundial-go/sundial/samples/internal/pipenet"
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
		// On a loaded machine a dependency may take longer than its share
		// (the primary's is 594 ms): the gateway then cuts it no sooner
		// than the share ends. Or so little is left that a share is
		// refused, and that dependency not called; or the whole second
		// passes first. The bubble's subtest below asserts that both fit.
		if r.Err == nil && r.Status == http.StatusGatewayTimeout && r.Problem.Code == pipeline.CodeTimeout {
			if r.Elapsed < 999*time.Millisecond {
				t.Errorf("answered %s after %v, before the 1000 ms deadline", r.Problem.Code, r.Elapsed)
			}
			t.Logf("1000 ms: the deadline passed first: %s", r.Body)
			return
		}
		if d := r.Problem.Details; r.Err == nil && r.Status == http.StatusGatewayTimeout && r.Problem.Code == outbound.CodeBudgetExhausted {
			budget, _ := d["budgetMs"].(float64)
			elapsed, _ := d["elapsedMs"].(float64)
			switch {
			case d["reason"] == ReasonDownstreamTimeout && (elapsed < budget-1 || budget < 20):
				t.Errorf("details = %v, want a call cut no sooner than its budget of at least 20 ms", d)
			case d["reason"] != ReasonDownstreamTimeout && slowCalls()-before > 1:
				t.Errorf("details = %v after %d dependency calls, want the refused one not called", d, slowCalls()-before)
			}
			t.Logf("1000 ms: a dependency's share ran out: %s", r.Body)
			return
		}
		if r.Err != nil || r.Status != http.StatusOK {
			t.Fatalf("GET /order with 1000 ms = %d %s (err %v), want 200", r.Status, r.Body, r.Err)
		}
		if n := slowCalls() - before; n != 2 {
			t.Errorf("dependency calls = %d, want 2", n)
		}
		t.Logf("1000 ms: 200 %s in %v", r.Body, r.Elapsed.Round(time.Millisecond))
	})

	t.Run("1000 ms: both dependencies fit, in a bubble", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := startBubbleCluster(t, ClusterConfig{}, nil)
			r := c.call(context.Background(), http.MethodGet, c.URL("gateway")+"/order", "", deadlineIn(time.Second))
			if r.Err != nil || r.Status != http.StatusOK {
				t.Fatalf("GET /order with 1000 ms = %d %s (err %v), want 200", r.Status, r.Body, r.Err)
			}
			if n := c.Inventory.Journal().Count("started"); n != 2 {
				t.Errorf("dependency calls = %d, want 2", n)
			}
			// One after the other: 120 ms, then 30 ms.
			exactly(t, "GET /order with 1000 ms took", r.Elapsed, 150*time.Millisecond)
		})
	})

	t.Run("20 ms: 504 at once, remaining below gateway minimum", func(t *testing.T) {
		before := slowCalls()
		r := call(context.Background(), http.MethodGet, c.URL("gateway")+"/order", "", deadlineIn(20*time.Millisecond))
		// On a loaded machine the 20 ms may be spent before the gateway's
		// handler starts: the deadline then answers (TIMEOUT_001) and the
		// handler never runs. The gateway's own refusal is asserted exactly
		// in the bubble's subtest below.
		if r.Err == nil && r.Status == http.StatusGatewayTimeout && r.Problem.Code == pipeline.CodeTimeout {
			if n := slowCalls() - before; n != 0 {
				t.Errorf("dependency calls = %d, want 0", n)
			}
			t.Logf("20 ms: the deadline passed before the gateway's handler started: %s", r.Body)
			return
		}
		if r.Err != nil || r.Status != http.StatusGatewayTimeout || r.Problem.Code != outbound.CodeBudgetExhausted {
			t.Fatalf("GET /order with 20 ms = %d %s (err %v), want 504 %s", r.Status, r.Body, r.Err, outbound.CodeBudgetExhausted)
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
		// How long the gateway took is the bubble's subtest's, below: on a
		// loaded machine the request may even arrive after its deadline.
		rec := waitLog(t, logs, "http request", map[string]any{"role": "gateway", "operation": "gateway.order", "status": int64(http.StatusGatewayTimeout)}, 2*time.Second)
		t.Logf("20 ms: 504 %s, reason %q, remainingMs %v; the gateway answered in %v ms (the client saw %v)",
			r.Problem.Code, d["reason"], d["remainingMs"], rec.Attrs["durationMs"], r.Elapsed.Round(100*time.Microsecond))
	})

	// The gateway alone, in a synctest bubble over an in-memory network:
	// the request arrives with its 20 ms exactly, and the answer leaves at
	// once, at the very instant, without waiting for anything.
	t.Run("20 ms: 504 at once, in a bubble", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ln := pipenet.Listen()
			// Nothing is called downstream: the addresses are never dialed.
			cfg := GatewayConfig{Orders: "http://orders.invalid", Inventory: "http://inventory.invalid", Billing: "billing.invalid:1"}
			_, srv, err := startGateway(ln, cfg, "", nil)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := srv.stop(context.Background()); err != nil {
					t.Errorf("stop: %v", err)
				}
			}()
			tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return ln.DialContext(ctx) }}
			defer tr.CloseIdleConnections()
			req, _ := http.NewRequest(http.MethodGet, "http://gateway/order", nil)
			req.Header.Set(httpadapter.HeaderDeadline, deadlineIn(20 * time.Millisecond)[httpadapter.HeaderDeadline])
			start := time.Now()
			resp, err := (&http.Client{Transport: tr}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var p httpadapter.Problem
			err = json.NewDecoder(resp.Body).Decode(&p)
			resp.Body.Close()
			took := time.Since(start)
			if err != nil || resp.StatusCode != http.StatusGatewayTimeout || p.Code != outbound.CodeBudgetExhausted {
				t.Fatalf("GET /order with 20 ms = %d %+v (err %v), want 504 %s", resp.StatusCode, p, err, outbound.CodeBudgetExhausted)
			}
			if p.Details["reason"] != ReasonGatewayMinimum || p.Details["remainingMs"] != float64(20) {
				t.Errorf("details = %v, want reason %q with remainingMs 20", p.Details, ReasonGatewayMinimum)
			}
			if took != 0 {
				t.Errorf("the answer took %v, want none: the gateway must not wait for anything", took)
			}
		})
	})

	t.Run("150 ms: the primary's share is below its 120 ms latency", func(t *testing.T) {
		before := slowCalls()
		r := call(context.Background(), http.MethodGet, c.URL("gateway")+"/order", "", deadlineIn(150*time.Millisecond))
		// On a loaded machine the gateway may be so slow that the 150 ms
		// pass before it answers: the deadline's own TIMEOUT, never sooner
		// (the header has ms precision). Or the transit leaves too little
		// for the gateway or for the primary's share: it is refused, not
		// called. The bubble's subtest below asserts the figures exactly.
		if r.Err == nil && r.Status == http.StatusGatewayTimeout && r.Problem.Code == pipeline.CodeTimeout {
			if r.Elapsed < 149*time.Millisecond {
				t.Errorf("answered %s after %v, before the 150 ms deadline", r.Problem.Code, r.Elapsed)
			}
			t.Logf("150 ms: the deadline passed first: %s", r.Body)
			return
		}
		if r.Err == nil && r.Status == http.StatusGatewayTimeout && refused150(r.Problem) {
			if n := slowCalls() - before; n != 0 {
				t.Errorf("dependency calls = %d, want 0", n)
			}
			t.Logf("150 ms: the transit left too little: %s", r.Body)
			return
		}
		primaryCut(t, r)
	})

	// The whole chain in a synctest bubble over an in-memory network: the
	// request arrives with its 150 ms exactly, the primary gets 60 % of
	// 140 ms and is cut at 84 ms.
	t.Run("150 ms: the primary's share is below its 120 ms latency, in a bubble", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := startBubbleCluster(t, ClusterConfig{}, nil)
			r := c.call(context.Background(), http.MethodGet, c.URL("gateway")+"/order", "", deadlineIn(150*time.Millisecond))
			d := primaryCut(t, r)
			if d["budgetMs"] != float64(84) || d["elapsedMs"] != float64(84) || d["remainingMs"] != float64(150) {
				t.Errorf("details = %v, want budgetMs 84, elapsedMs 84, remainingMs 150", d)
			}
			exactly(t, "GET /order with 150 ms took", r.Elapsed, 84*time.Millisecond)
			if n := c.Inventory.Journal().Count("started"); n != 1 {
				t.Errorf("dependency calls = %d, want 1 (the primary's)", n)
			}
		})
	})
}

// refused150 reports whether p is the gateway's refusal of a request whose
// 150 ms the transit took: a budget too small for the gateway or for the
// primary's share.
func refused150(p httpadapter.Problem) bool {
	if p.Code != outbound.CodeBudgetExhausted {
		return false
	}
	return p.Details["reason"] == ReasonGatewayMinimum ||
		p.Details["reason"] == ReasonDownstreamMinimum && p.Details["dependency"] == "primary"
}

// primaryCut fails unless r is experiment 6's answer to a 150 ms request:
// a 504 naming the primary, cut no sooner than its share of the budget, a
// share under the 120 ms it needs. It returns the answer's details.
func primaryCut(t *testing.T, r reply) map[string]any {
	t.Helper()
	if r.Err != nil || r.Status != http.StatusGatewayTimeout || r.Problem.Code != outbound.CodeBudgetExhausted {
		t.Fatalf("GET /order with 150 ms = %d %s (err %v), want 504 %s", r.Status, r.Body, r.Err, outbound.CodeBudgetExhausted)
	}
	d := r.Problem.Details
	if d["reason"] != ReasonDownstreamTimeout || d["dependency"] != "primary" {
		t.Errorf("details = %v, want reason %q naming dependency primary", d, ReasonDownstreamTimeout)
	}
	budget, _ := d["budgetMs"].(float64)
	elapsed, _ := d["elapsedMs"].(float64)
	rem, _ := d["remainingMs"].(float64)
	// (150 - transit - 10) × 0.6 is at most 84 ms: under the 120 ms the
	// primary needs. It is 60 % of what remained less the reserve (the
	// share is taken a moment before remainingMs is read; 1 ms for the
	// rounding to ms), and the call was cut no sooner than its budget:
	// had the primary answered (120 ms), the call would have succeeded.
	if budget <= 0 || budget > 84 || budget > (rem-10)*0.6+1 {
		t.Errorf("primary's budget %v ms, want at most 84 ms and 60 %% of the %v ms remaining less 10", budget, rem)
	}
	if elapsed < budget-1 {
		t.Errorf("primary's call cut after %v ms, before its %v ms budget", elapsed, budget)
	}
	t.Logf("150 ms: 504 %s, reason %q, dependency %v, budgetMs %v, elapsedMs %v", r.Problem.Code, d["reason"], d["dependency"], budget, elapsed)
	return d
}
