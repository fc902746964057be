package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// Experiment 8: the retry after a 504. Billing's charges are committed (a
// payment processor that cannot be recalled: 1.5 s, completing even after
// the deadline), the gateway gives each checkout attempt 1 s out of its
// 5 s and retries up to 3 times. The first attempt's deadline fires while
// the card is being charged, so the gateway gets a 504 for a charge that
// is going to happen.
func TestExperiment8RetryAfterTimeoutChargesOnce(t *testing.T) {
	t.Parallel()
	cfgFile := filepath.Join(t.TempDir(), "exp8.json")
	if err := os.WriteFile(cfgFile, []byte(`{"Sundial":{"Kernel":{"Resilience":{"Operations":{
		"gateway.checkout":{"TimeoutSeconds":5}}}}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := func(withoutKey bool) ClusterConfig {
		return ClusterConfig{
			Inventory:  InventoryConfig{ReserveWork: 100 * time.Millisecond},
			Billing:    BillingConfig{ChargeWork: 1500 * time.Millisecond, Committed: true},
			Gateway:    GatewayConfig{CheckoutAttempts: 3, CheckoutAttemptTimeout: time.Second, RetryWithoutKey: withoutKey},
			ConfigFile: cfgFile,
		}
	}
	const checkout = `{"item":"book","qty":1,"amount":30}`

	// The anti-pattern first, as a test of what goes wrong: the gateway
	// retries without a key, every attempt times out while its charge
	// runs, and each one charges the card.
	t.Run("retries without a key charge on every attempt", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			c := startBubbleCluster(t, cfg(true), nil)
			r := c.call(context.Background(), http.MethodPost, c.URL("gateway")+"/checkout", checkout, nil)
			if r.Err != nil || r.Status != http.StatusGatewayTimeout {
				t.Fatalf("POST /checkout = %d %s (err %v), want 504", r.Status, r.Body, r.Err)
			}
			// Three attempts of 1 s and two back-offs of 50 ms.
			exactly(t, "three 1 s attempts took", r.Elapsed, 3100*time.Millisecond)
			waitEvents(t, c.Billing.Journal(), 3, 5*time.Second, "charged")
			if n := len(c.Billing.Charges()); n != 3 {
				t.Errorf("charges = %d, want 3 (one per attempt)", n)
			}
			t.Logf("WHAT GOES WRONG: the client got 504 at %s, and the card was charged %d times", secs(r.Elapsed), len(c.Billing.Charges()))
		})
	})

	t.Run("retries with one key: 504, then 409 while the charge runs, then its receipt", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			c := startBubbleCluster(t, cfg(false), nil)
			r := c.call(context.Background(), http.MethodPost, c.URL("gateway")+"/checkout", checkout, nil)
			if r.Err != nil || r.Status != http.StatusCreated {
				t.Fatalf("POST /checkout = %d %s (err %v), want 201", r.Status, r.Body, r.Err)
			}
			var res OrderResult
			if err := json.Unmarshal(r.Body, &res); err != nil {
				t.Fatalf("body %s: %v", r.Body, err)
			}
			charges := c.Billing.Charges()
			if len(charges) != 1 {
				t.Fatalf("charges = %v, want exactly 1", charges)
			}
			if res.ChargeID != charges[0].ID || res.ID != charges[0].OrderID {
				t.Errorf("checkout answered order %s charge %s, want the one charge made: %+v", res.ID, res.ChargeID, charges[0])
			}
			// 1 s to the first deadline, 50 ms of back-off, the second attempt's
			// 100 ms reservation and 409, its 1 s Retry-After, the third
			// attempt's 100 ms reservation and the stored receipt.
			exactly(t, "the checkout succeeded after", r.Elapsed, 2250*time.Millisecond)

			// What the gateway saw: a 504 (the first attempt's deadline fired
			// while the card was charged), a 409 (its record still running),
			// then the receipt, every attempt with the same key.
			attempts := c.Gateway.Journal().Events("checkout-attempt")
			retries := c.Gateway.Journal().Events("checkout-retry")
			if len(attempts) != 3 || len(retries) != 2 {
				t.Fatalf("gateway attempts = %d, retries = %v, want 3 attempts and 2 retries", len(attempts), retries)
			}
			key := attempts[0].Attrs["key"]
			for _, a := range attempts {
				if a.Attrs["key"] != key || key == "" {
					t.Errorf("attempt %s carried key %q, want the same key %q on every attempt", a.Attrs["attempt"], a.Attrs["key"], key)
				}
			}
			if o := retries[0].Attrs["outcome"]; !strings.HasPrefix(o, "TIMEOUT ") {
				t.Errorf("attempt 1 outcome = %s, want a TIMEOUT", o)
			}
			if o := retries[1].Attrs["outcome"]; o != "CONFLICT ORDERS_CONFLICT_001" {
				t.Errorf("attempt 2 outcome = %s, want CONFLICT ORDERS_CONFLICT_001 (Billing's record still running)", o)
			}
			if w := retries[1].Attrs["waitMs"]; w != "1000" {
				t.Errorf("the gateway waited %s ms after the 409, want the 1000 of its Retry-After", w)
			}
			t.Logf("the gateway's attempts: %s, then %s (waited %s ms), then 201 with charge %s", retries[0].Attrs["outcome"],
				retries[1].Attrs["outcome"], retries[1].Attrs["waitMs"], res.ChargeID)

			// What Billing did: one charge, which completed after the first
			// attempt's deadline had fired.
			if n := c.Billing.Journal().Count("started"); n != 1 {
				t.Errorf("Billing started %d charges, want 1", n)
			}
			fin := c.Billing.Journal().Events("finished")
			if len(fin) != 1 || fin[0].Attrs["ctxErr"] == "" || fin[0].Remaining >= 0 {
				t.Errorf("Billing's charge finished %v, want once, after its call had ended at its deadline", fin)
			} else {
				t.Logf("Billing's charge completed %s after the first attempt's deadline", secs(-fin[0].Remaining))
			}

			// Each attempt reserved under the same order; the two that failed
			// released theirs, the one that succeeded holds it.
			if n := c.Inventory.Journal().Count("reserved"); n != 3 {
				t.Errorf("reservations made = %d, want 3", n)
			}
			if active := c.Inventory.Active(); len(active) != 1 || active[0].ID != res.ReservationID {
				t.Errorf("reservations held = %v, want only %s", active, res.ReservationID)
			}
		})
	})
}
