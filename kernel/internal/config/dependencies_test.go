package config

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sundial-go/sundial/resilience/outbound"
)

func parseDeps(t *testing.T, doc string) (map[string]outbound.Policy, error) {
	t.Helper()
	var raw any
	if err := json.Unmarshal([]byte(doc), &raw); err != nil {
		t.Fatal(err)
	}
	return ParseDependencies(raw, "Sundial.Kernel.Dependencies")
}

// TestDependencyKeysTable: every row of the table is parsed into its
// field, and an unset key keeps DefaultPolicy's value.
func TestDependencyKeysTable(t *testing.T) {
	deps, err := parseDeps(t, `{"billing": {"Attempts": 4, "MinAttemptTimeoutMs": 5, "AttemptTimeoutMs": 200,
		"Backoff": {"BaseMs": 20, "MaxMs": 400}, "Budget": {"Ratio": 0.1, "Min": 3},
		"Hedge": {"DelayMs": 30, "SafeToHedge": true, "Quantile": 0.9}, "Breaker": {"FailureThreshold": 7, "BreakSeconds": 2},
		"CreateIdempotencyKey": true, "Throttle": {"Enabled": true, "K": 1.5, "WindowSeconds": 3}}, "inventory": {}}`)
	if err != nil {
		t.Fatal(err)
	}
	want := outbound.Policy{Attempts: 4, MinAttemptTimeout: 5 * time.Millisecond, AttemptTimeout: 200 * time.Millisecond,
		BackoffBase: 20 * time.Millisecond, BackoffMax: 400 * time.Millisecond, BudgetRatio: 0.1, BudgetMin: 3,
		HedgeDelay: 30 * time.Millisecond, SafeToHedge: true, HedgeQuantile: 0.9, CreateKey: true, FailureThreshold: 7, BreakDuration: 2 * time.Second,
		Throttle: true, ThrottleK: 1.5, ThrottleWindow: 3 * time.Second}
	if deps["billing"] != want {
		t.Fatalf("billing = %+v\nwant      %+v", deps["billing"], want)
	}
	if deps["inventory"] != outbound.DefaultPolicy() {
		t.Fatalf("inventory = %+v, want the defaults", deps["inventory"])
	}
	if got := len(DependencyKeys); got != 16 {
		t.Fatalf("%d rows; this test sets 16", got)
	}
}

func TestDependencyErrorsNameTheKeyPath(t *testing.T) {
	for doc, want := range map[string]string{
		`{"billing": {"Attempts": 0}}`:                                        "Sundial.Kernel.Dependencies.billing.Attempts: must be greater than 0",
		`{"billing": {"Attempts": 11}}`:                                       "Sundial.Kernel.Dependencies.billing.Attempts: 11 is too large",
		`{"billing": {"Budget": {"Ratio": 1.5}}}`:                             "Sundial.Kernel.Dependencies.billing.Budget.Ratio: want a number from 0 to 1",
		`{"billing": {"Backoff": {"BaseMs": 500, "MaxMs": 100}}}`:             "Sundial.Kernel.Dependencies.billing.Backoff.MaxMs: 100ms is below BackoffBase",
		`{"billing": {"Hedge": {"Delay": 5}}}`:                                "Sundial.Kernel.Dependencies.billing.Hedge.Delay: unknown key (known keys: DelayMs, SafeToHedge, Quantile)",
		`{"billing": {"Hedge": {"Quantile": 1}}}`:                             "Sundial.Kernel.Dependencies.billing.Hedge.Quantile: 1 is out of range (0 to below 1)",
		`{"billing": {"Retries": 5}}`:                                         "Sundial.Kernel.Dependencies.billing.Retries: unknown key (known keys: Attempts,",
		`{"billing": {"Breaker": 5}}`:                                         "Sundial.Kernel.Dependencies.billing.Breaker: want an object",
		`{"bill ing": {}}`:                                                    "Sundial.Kernel.Dependencies.bill ing: a dependency name",
		`{"billing": []}`:                                                     "Sundial.Kernel.Dependencies.billing: want an object",
		`{"billing": {"Breaker": {"BreakSeconds": -1}}}`:                      "Sundial.Kernel.Dependencies.billing.Breaker.BreakSeconds: must be greater than 0",
		`{"billing": {"MinAttemptTimeoutMs": 50, "AttemptTimeoutMs": 10}}`:    "Sundial.Kernel.Dependencies.billing.AttemptTimeoutMs: 10ms is below MinAttemptTimeout",
		`{"billing": {"Throttle": {"K": 0.5}}}`:                               "Sundial.Kernel.Dependencies.billing.Throttle.K: want a number from 1 to 100, got 0.5",
		`{"billing": {"Throttle": {"Enabled": "yes"}}}`:                       "Sundial.Kernel.Dependencies.billing.Throttle.Enabled: want a boolean",
		`{"billing": {"Throttle": {"Enabled": true, "WindowSeconds": 0.01}}}`: "Sundial.Kernel.Dependencies.billing.Throttle.WindowSeconds: 10ms is below 20ms",
		`{"billing": {"Throttle": {"Window": 10}}}`:                           "Sundial.Kernel.Dependencies.billing.Throttle.Window: unknown key (known keys: Enabled, K, WindowSeconds)",
	} {
		_, err := parseDeps(t, doc)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want %q", doc, err, want)
		}
	}
}
