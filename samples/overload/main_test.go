package main

import (
	"strings"
	"testing"
)

// TestTableRuns runs every scenario against every limiter at a tenth of
// its length (about 20 s) and checks that each produced its row.
func TestTableRuns(t *testing.T) {
	var b strings.Builder
	table(&b, 0.1)
	t.Log("\n" + b.String())
	rows := 0
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(line, "| ") && !strings.HasPrefix(line, "| scenario") {
			rows++
		}
	}
	if rows != 4*5 {
		t.Errorf("%d result rows; want 20 (4 scenarios × 5 limiters)", rows)
	}
}
