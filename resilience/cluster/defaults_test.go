package cluster

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// statedDefault returns the default docs/policy-keys.md states for key.
func statedDefault(t *testing.T, key string) string {
	t.Helper()
	b, err := os.ReadFile("../../docs/policy-keys.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if cells := strings.Split(line, "|"); len(cells) > 4 && strings.TrimSpace(cells[1]) == "`"+key+"`" {
			return strings.TrimSpace(cells[3])
		}
	}
	t.Fatalf("docs/policy-keys.md has no row for %s", key)
	return ""
}

// TestStatedDefaults: the store timeout and the failures in a row the
// key table states as the defaults of StoreTimeoutMs and DegradeAfter are
// the ones the store applies.
func TestStatedDefaults(t *testing.T) {
	if got, want := statedDefault(t, "StoreTimeoutMs"), defaultStoreTimeout; got != strconvMs(want) {
		t.Errorf("docs state StoreTimeoutMs default %s; the store applies %v", got, want)
	}
	if got, want := statedDefault(t, "DegradeAfter"), strconv.Itoa(defaultDegradeAfter); got != want {
		t.Errorf("docs state DegradeAfter default %s; the store applies %s", got, want)
	}
}

func strconvMs(d time.Duration) string { return strings.TrimSuffix(d.String(), "ms") }
