package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/sundial-go/sundial/adapters/grpcadapter"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience/outbound"
)

// Experiment 9 (retry storm): Billing fails every charge with UNAVAILABLE
// while a client sends a steady stream of charges. Naive retries (three
// attempts per call, as a hand-written loop does) triple Billing's load;
// with the dependency's retry budget (20 % of calls plus a reserve of 10)
// Billing receives at most 1.25× the client's calls. The figures are
// counted from Billing's own journal ("outage" events), not from time.
func TestExperiment9RetryStormStaysWithinBudget(t *testing.T) {
	t.Parallel()
	const calls = 400
	charge := func(t *testing.T, dep *outbound.Dependency) (received int) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		billing, srv, err := startBilling(ln, BillingConfig{Outage: true}, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		stopOnCleanup(t, srv)
		client, err := dialBilling(ln.Addr().String(), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		for i := range calls {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			in := Charge{OrderID: fmt.Sprintf("o-%d", i), Amount: 10}
			var err error
			if dep == nil { // the hand-written loop: three attempts, no budget
				for range 3 {
					if _, err = client.Charge(ctx, in); err == nil {
						break
					}
				}
			} else { // the dependency, through the gRPC client interceptor
				err = client.a.Call(ctx, client.cc, "billing.charge", in, new(Receipt), grpcadapter.WithCallDependency(dep))
			}
			cancel()
			var pe *pipeline.Error
			if !errors.As(err, &pe) || pe.Kind() != pipeline.KindUnavailable {
				t.Fatalf("call %d: %v, want Billing's UNAVAILABLE", i, err)
			}
		}
		return billing.Journal().Count("outage")
	}

	naive := charge(t, nil)
	p := outbound.DefaultPolicy()
	p.BackoffBase, p.BackoffMax = time.Millisecond, 2*time.Millisecond
	p.FailureThreshold = 0 // the budget alone, no breaker
	dep, err := outbound.New("billing", p)
	if err != nil {
		t.Fatal(err)
	}
	budgeted := charge(t, dep)

	if naive != 3*calls {
		t.Errorf("naive retries: Billing received %d, want %d (3 per call)", naive, 3*calls)
	}
	if ratio := float64(budgeted) / calls; ratio > 1.25 || budgeted < calls {
		t.Errorf("with the budget Billing received %d for %d calls (%.2f×), want ≤ 1.25×", budgeted, calls, ratio)
	}
	t.Logf("Billing received %d attempts for %d calls with the budget (%.2f×); naive retries: %d (%.2f×)",
		budgeted, calls, float64(budgeted)/calls, naive, float64(naive)/calls)
}
