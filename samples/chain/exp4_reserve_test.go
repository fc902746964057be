package main

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"testing/synctest"
	"time"
)

// Experiment 4: Orders keeps 0.2 s for itself (the margin) and, while
// Inventory works, holds 0.5 s back for Billing (the reserve). Out of the
// gateway's 2 s, Inventory may use at most 2.0 - 0.2 - 0.5 = 1.3 s; when
// it takes 1 s, Billing gets what is left after the margin, about 0.8 s.
func TestExperiment4ReserveForTheNextStep(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := startBubbleCluster(t, ClusterConfig{
			Inventory: InventoryConfig{ReserveWork: time.Second},
			Billing:   BillingConfig{ChargeWork: 300 * time.Millisecond},
			Orders:    OrdersConfig{Margin: 200 * time.Millisecond, ReserveForBilling: 500 * time.Millisecond},
		}, nil)
		r := c.call(context.Background(), http.MethodPost, c.URL("gateway")+"/checkout", `{"item":"book","qty":1,"amount":30,"strategy":"reserve"}`, nil)
		if r.Err != nil || r.Status != http.StatusCreated {
			t.Fatalf("POST /checkout (reserve) = %d %s (err %v), want 201", r.Status, r.Body, r.Err)
		}
		var res OrderResult
		if err := json.Unmarshal(r.Body, &res); err != nil || res.ReservationID == "" || res.ChargeID == "" {
			t.Fatalf("POST /checkout (reserve) body = %s (%v), want a reservation and a charge", r.Body, err)
		}

		submit := c.Orders.Journal().Events("submit")[0]
		t.Logf("Orders received the request with %s remaining of the gateway's 2 s", secs(submit.Remaining))
		inv := c.Inventory.Journal().Events("started")[0]
		// 2.0 - 0.2 - 0.5 s: no time passes on the way.
		exactly(t, "Inventory was given", inv.Remaining, 1300*time.Millisecond)
		bill := c.Billing.Journal().Events("started")[0]
		// 2.0 - 1.0 - 0.2 s.
		exactly(t, "after Inventory's 1 s of work, Billing was given", bill.Remaining, 800*time.Millisecond)
		t.Logf("the request succeeded in %s; %s was kept for Orders' own reply", secs(r.Elapsed), secs(200*time.Millisecond))
	})
}
