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
	return statedCell(t, key, 3)
}

// statedCell returns cell i of the row of key in docs/policy-keys.md
// (3: the default, 4: the bounds).
func statedCell(t *testing.T, key string, i int) string {
	t.Helper()
	b, err := os.ReadFile("../../docs/policy-keys.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if cells := strings.Split(line, "|"); len(cells) > 4 && strings.TrimSpace(cells[1]) == "`"+key+"`" {
			return strings.TrimSpace(cells[i])
		}
	}
	t.Fatalf("docs/policy-keys.md has no row for %s", key)
	return ""
}

// TestStatedDefaults: the store timeout and the failures in a row the
// key table states as the defaults of StoreTimeoutMs and DegradeAfter are
// the ones the store applies, and the store takes DegradeAfter up to the
// table's bound.
func TestStatedDefaults(t *testing.T) {
	if got, want := statedDefault(t, "StoreTimeoutMs"), defaultStoreTimeout; got != strconvMs(want) {
		t.Errorf("docs state StoreTimeoutMs default %s; the store applies %v", got, want)
	}
	if got, want := statedDefault(t, "DegradeAfter"), strconv.Itoa(defaultDegradeAfter); got != want {
		t.Errorf("docs state DegradeAfter default %s; the store applies %s", got, want)
	}
	if got, want := statedCell(t, "DegradeAfter", 4), "1 to "+strconv.Itoa(maxDegradeAfter); got != want {
		t.Errorf("docs bound DegradeAfter to %s; the store to %s", got, want)
	}
}

func strconvMs(d time.Duration) string { return strings.TrimSuffix(d.String(), "ms") }
