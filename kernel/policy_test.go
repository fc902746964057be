package kernel

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sundial-go/sundial/resilience"
)

const section = "Sundial.Kernel.Resilience"

func parseJSON(t *testing.T, doc string) (policies, error) {
	t.Helper()
	var raw any
	if err := json.Unmarshal([]byte(doc), &raw); err != nil {
		t.Fatalf("bad test JSON %s: %v", doc, err)
	}
	return parsePolicies(raw, section)
}

func TestParsePoliciesErrorsNameTheKeyPath(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, doc string
		want      []string // substrings of the error
	}{
		{"zero limit", `{"PermitLimit": 0}`, []string{section + ".PermitLimit", "greater than 0"}},
		{"negative limit", `{"ConcurrencyLimit": -3}`, []string{section + ".ConcurrencyLimit", "greater than 0"}},
		{"zero threshold", `{"FailureThreshold": 0}`, []string{section + ".FailureThreshold", "greater than 0"}},
		{"zero window", `{"WindowSeconds": 0}`, []string{section + ".WindowSeconds", "greater than 0"}},
		{"negative break", `{"BreakSeconds": -1}`, []string{section + ".BreakSeconds", "greater than 0"}},
		{"zero timeout", `{"TimeoutSeconds": 0}`, []string{section + ".TimeoutSeconds", "greater than 0"}},
		{"negative queue", `{"QueueLimit": -1}`, []string{section + ".QueueLimit", "must not be negative"}},
		{"negative concurrency queue", `{"ConcurrencyQueueLimit": -1}`, []string{section + ".ConcurrencyQueueLimit", "must not be negative"}},
		{"fractional limit", `{"PermitLimit": 1.5}`, []string{section + ".PermitLimit", "want an integer"}},
		{"string limit", `{"PermitLimit": "10"}`, []string{section + ".PermitLimit", "want an integer, got a string"}},
		{"boolean window", `{"WindowSeconds": true}`, []string{section + ".WindowSeconds", "want a number of seconds, got a boolean"}},
		{"null limit", `{"ConcurrencyLimit": null}`, []string{section + ".ConcurrencyLimit", "got null"}},
		{"huge limit", `{"PermitLimit": 1e12}`, []string{section + ".PermitLimit", "too large"}},
		{"huge window", `{"WindowSeconds": 1e12}`, []string{section + ".WindowSeconds", "too large"}},
		{"unknown key", `{"PermitLimt": 5}`, []string{section + ".PermitLimt", "unknown key", "PermitLimit"}},
		{"wrong case", `{"permitLimit": 5}`, []string{section + ".permitLimit", `did you mean "PermitLimit"`}},
		{"section not an object", `[1]`, []string{section, "want an object, got an array"}},
		{"Operations not an object", `{"Operations": 5}`, []string{section + ".Operations", "want an object"}},
		{"malformed operation ID", `{"Operations": {"Orders.Create": {"PermitLimit": 1}}}`, []string{section + ".Operations.Orders.Create", "malformed operation ID"}},
		{"one-segment operation ID", `{"Operations": {"orders": {"PermitLimit": 1}}}`, []string{section + ".Operations.orders", "at least two"}},
		{"operation not an object", `{"Operations": {"orders.create": 5}}`, []string{section + ".Operations.orders.create", "want an object, got a number"}},
		{"bad value under an operation", `{"Operations": {"orders.create": {"WindowSeconds": 0}}}`, []string{section + ".Operations.orders.create.WindowSeconds", "greater than 0"}},
		{"negative queue under an operation", `{"Operations": {"orders.create": {"QueueLimit": -2}}}`, []string{section + ".Operations.orders.create.QueueLimit", "must not be negative"}},
		{"typo under an operation", `{"Operations": {"orders.create": {"ConcurencyLimit": 1}}}`, []string{section + ".Operations.orders.create.ConcurencyLimit", "unknown key"}},
		{"wrong type under an operation", `{"Operations": {"orders.create": {"FailureThreshold": "5"}}}`, []string{section + ".Operations.orders.create.FailureThreshold", "want an integer"}},
		{"nested Operations", `{"Operations": {"orders.create": {"Operations": {}}}}`, []string{section + ".Operations.orders.create.Operations", "only valid at the section's root"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := parseJSON(t, tt.doc)
			if err == nil {
				t.Fatalf("parsePolicies(%s) = nil error, want one naming %q", tt.doc, tt.want[0])
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "kernel: ") {
				t.Errorf("parsePolicies(%s) error %q lacks the package prefix", tt.doc, msg)
			}
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("parsePolicies(%s) = %q, want it to contain %q", tt.doc, msg, w)
				}
			}
		})
	}
}

func TestPolicyForInheritsKeyByKey(t *testing.T) {
	t.Parallel()
	o, err := parseJSON(t, `{
		"PermitLimit": 1000, "WindowSeconds": 1, "ConcurrencyLimit": 64, "FailureThreshold": 5,
		"Operations": {
			"orders.create":  {"PermitLimit": 2, "WindowSeconds": 60, "ConcurrencyLimit": 1},
			"reports.export": {"BreakSeconds": 0.5, "QueueLimit": 3, "TimeoutSeconds": 2.5}
		}
	}`)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		id   string
		want resilience.Policy
	}{
		{"orders.create", resilience.Policy{PermitLimit: 2, Window: time.Minute, ConcurrencyLimit: 1, FailureThreshold: 5, BreakDuration: 30 * time.Second, PriorityReserve: resilience.DefaultPriorityReserve}},
		{"reports.export", resilience.Policy{PermitLimit: 1000, Window: time.Second, QueueLimit: 3, ConcurrencyLimit: 64, FailureThreshold: 5, BreakDuration: 500 * time.Millisecond, Timeout: 2500 * time.Millisecond, PriorityReserve: resilience.DefaultPriorityReserve}},
		{"orders.list", resilience.Policy{PermitLimit: 1000, Window: time.Second, ConcurrencyLimit: 64, FailureThreshold: 5, BreakDuration: 30 * time.Second, PriorityReserve: resilience.DefaultPriorityReserve}},
	}
	for _, tt := range tests {
		if got := o.policyFor(tt.id); got != tt.want {
			t.Errorf("PolicyFor(%q) = %+v, want %+v", tt.id, got, tt.want)
		}
	}
	if got := o.operationIDs(); !slices.Equal(got, []string{"orders.create", "reports.export"}) {
		t.Errorf("OperationIDs() = %v, want [orders.create reports.export]", got)
	}
}

func TestPolicyDefaults(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{`null`, `{}`, `{"Operations": {}}`, `{"Operations": null}`} {
		o, err := parseJSON(t, doc)
		if err != nil {
			t.Fatalf("parsePolicies(%s) = %v", doc, err)
		}
		want := resilience.Policy{Window: resilience.DefaultWindow, BreakDuration: resilience.DefaultBreakDuration, PriorityReserve: resilience.DefaultPriorityReserve}
		if got := o.policyFor("orders.create"); got != want || got.Limited() {
			t.Errorf("parsePolicies(%s).PolicyFor = %+v (limited %v), want %+v, unlimited", doc, got, got.Limited(), want)
		}
	}
	var zero policies
	if zero.policyFor("orders.create").Limited() {
		t.Error("zero Options limits an operation")
	}
}
