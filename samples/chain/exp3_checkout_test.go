package main

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

// Experiment 3: the gateway gives Orders 2 s (TimeoutSeconds of
// gateway.checkout in chain.json); Orders reserves in Inventory, then
// charges in Billing, and each takes 1.5 s. Two steps of 1.5 s do not fit
// in 2 s: the question is what happens to the second one.
func TestExperiment3FreshTimeoutsVersusPropagation(t *testing.T) {
	t.Parallel()
	cfg := ClusterConfig{
		Inventory: InventoryConfig{ReserveWork: 1500 * time.Millisecond},
		Billing:   BillingConfig{ChargeWork: 1500 * time.Millisecond},
	}
	const checkout = `{"item":"book","qty":1,"amount":30,"strategy":%q}`

	// The anti-pattern, as a test of what goes wrong: every call gets a
	// fresh 5 s, so the charge runs to completion after the gateway has
	// already answered 504. A retry by the client would charge twice.
	t.Run("fresh per-call timeouts charge after the gateway gave up", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			c := startBubbleCluster(t, cfg, nil)
			start := time.Now()
			r := c.call(context.Background(), http.MethodPost, c.URL("gateway")+"/checkout", fmt.Sprintf(checkout, StrategyFresh), nil)
			gaveUp := time.Now()
			if r.Err != nil || r.Status != http.StatusGatewayTimeout || r.Problem.Code != pipeline.CodeTimeout {
				t.Fatalf("POST /checkout (fresh) = %d %s (err %v), want 504 %s", r.Status, r.Body, r.Err, pipeline.CodeTimeout)
			}
			exactly(t, "the gateway gave up after", r.Elapsed, 2*time.Second)

			charged := waitEvents(t, c.Billing.Journal(), 1, 5*time.Second, "charged")[0]
			late := charged.At.Sub(gaveUp)
			if late <= 0 {
				t.Fatalf("the charge completed %v before the gateway gave up; the anti-pattern should charge after it", -late)
			}
			exactly(t, "the charge completed after the gateway gave up, by", late, time.Second)
			// The reservation's 1.5 s, then the charge's 1.5 s.
			exactly(t, "the charge completed at", charged.At.Sub(start), 3*time.Second)
			started := c.Billing.Journal().Events("started")
			if len(started) != 1 || started[0].Remaining < 4*time.Second {
				t.Errorf("Billing's charge started with %v remaining, want the fresh ~5 s", started)
			} else {
				t.Logf("Billing started the charge with %s remaining: the gateway's deadline never reached it", secs(started[0].Remaining))
			}
			if n := len(c.Billing.Charges()); n != 1 {
				t.Errorf("charges = %d, want 1 (made for a client that had already been told 504)", n)
			}
			t.Logf("WHAT GOES WRONG: the client got 504 at %s, and the card was charged at %s", secs(r.Elapsed), secs(charged.At.Sub(start)))
		})
	})

	t.Run("propagated deadline: Billing refuses, nothing is charged, the reservation is released", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			logs := new(pipelinetest.LogSink)
			c := startBubbleCluster(t, cfg, logs)
			r := c.call(context.Background(), http.MethodPost, c.URL("gateway")+"/checkout", fmt.Sprintf(checkout, StrategyPropagate), nil)
			if r.Err != nil || r.Status != http.StatusGatewayTimeout || r.Problem.Code != "ORDERS_TIMEOUT_001" {
				t.Fatalf("POST /checkout (propagate) = %d %s (err %v), want 504 ORDERS_TIMEOUT_001", r.Status, r.Body, r.Err)
			}
			// The reservation's 1.5 s; Billing refuses at once.
			exactly(t, "the request ended after", r.Elapsed, 1500*time.Millisecond)
			if dep := r.Problem.Details["dependency"]; dep != "billing" {
				t.Errorf("details.dependency = %v, want billing", dep)
			}
			// The typed client gives back Billing's own outcome, not the
			// gRPC code it travelled as (DeadlineExceeded).
			if code := r.Problem.Details["dependencyCode"]; code != "BILLING_TIMEOUT_001" {
				t.Errorf("details.dependencyCode = %v, want BILLING_TIMEOUT_001 (Billing refused with its TIMEOUT)", code)
			}

			refused := c.Billing.Journal().Events("refused")
			if len(refused) != 1 {
				t.Fatalf("Billing refusals = %d, want 1", len(refused))
			}
			if rem := refused[0].Remaining; rem <= 0 || rem >= 1500*time.Millisecond {
				t.Errorf("Billing saw %v remaining, want less than the 1.5 s its charge takes", rem)
			} else {
				t.Logf("Billing saw %s remaining, less than the 1.50 s a charge takes, and refused before starting", secs(rem))
			}
			if n := c.Billing.Journal().Count("started"); n != 0 {
				t.Errorf("Billing started %d charges, want 0", n)
			}
			if n := len(c.Billing.Charges()); n != 0 {
				t.Errorf("charges = %d, want 0", n)
			}

			// The compensating step released what the first step reserved.
			if n := c.Inventory.Journal().Count("reserved"); n != 1 {
				t.Errorf("reservations made = %d, want 1", n)
			}
			released := c.Inventory.Journal().Events("released")
			if len(released) != 1 || released[0].Attrs["id"] != r.Problem.Details["released"] {
				t.Errorf("released = %v, want the reservation %v", released, r.Problem.Details["released"])
			}
			if active := c.Inventory.Active(); len(active) != 0 {
				t.Errorf("reservations still held = %v, want none", active)
			}
			t.Logf("Inventory reservation %v made and released by the compensating step; 0 charges", r.Problem.Details["released"])

			// The trace context travels with the deadline: every hop's access
			// record carries the trace ID the client got in the Problem.
			trace := r.Problem.TraceID
			if len(trace) != 32 {
				t.Fatalf("Problem traceId = %q, want a W3C trace ID", trace)
			}
			for _, op := range []string{"gateway.checkout", "orders.submit", "inventory.reserve", "billing.charge", "inventory.release"} {
				msg := "http request"
				if op == "billing.charge" {
					msg = "grpc call"
				}
				rec := waitLog(t, logs, msg, map[string]any{"operation": op}, 2*time.Second)
				if rec.Attrs["traceId"] != trace {
					t.Errorf("%s logged trace %v, want %s", op, rec.Attrs["traceId"], trace)
				}
			}
			t.Logf("one trace, %s, crosses gateway, orders, inventory (reserve and release) and billing", trace)
		})
	})
}
