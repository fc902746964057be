package idempotency

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestStatedDefaults: the defaults the key table states for
// Idempotency.RetentionSeconds and Idempotency.MaxOutcomeBytes are the
// ones the middleware applies.
func TestStatedDefaults(t *testing.T) {
	b, err := os.ReadFile("../../docs/policy-keys.md")
	if err != nil {
		t.Fatal(err)
	}
	stated := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if cells := strings.Split(line, "|"); len(cells) > 4 {
			stated[strings.Trim(strings.TrimSpace(cells[1]), "`")] = strings.TrimSpace(cells[3])
		}
	}
	for key, want := range map[string]string{
		"Idempotency.RetentionSeconds": fmt.Sprint(defaultRetention.Seconds()),
		"Idempotency.MaxOutcomeBytes":  fmt.Sprint(defaultMaxOutcomeBytes),
	} {
		if stated[key] != want {
			t.Errorf("docs state %s default %q; the middleware applies %s", key, stated[key], want)
		}
	}
}
