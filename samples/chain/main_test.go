package main

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestRunAll starts `chain all` on free ports, checks that the four roles
// answer, and that cancelling the context (SIGINT) stops them.
func TestRunAll(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, errOut := &logBuffer{}, &logBuffer{}
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"all", "--base-port", "0", "--log-format", "json"}, out, errOut) }()

	addrs := map[string]string{}
	re := regexp.MustCompile(`(?m)^(\w+)\s+listening on (\S+)$`)
	deadline := time.Now().Add(5 * time.Second)
	for len(addrs) < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("chain all printed %q, want four listening lines", out.String())
		}
		out.waitWrite(100 * time.Millisecond)
		for _, m := range re.FindAllStringSubmatch(out.String(), -1) {
			addrs[m[1]] = m[2]
		}
	}
	for _, role := range []string{"gateway", "orders", "inventory"} {
		r := call(ctx, http.MethodGet, "http://"+addrs[role]+"/no-such-route", "", nil)
		if r.Err != nil || r.Status != http.StatusNotFound {
			t.Errorf("%s: GET /no-such-route = %d (err %v), want 404 Problem Details", role, r.Status, r.Err)
		}
	}
	r := call(ctx, http.MethodGet, "http://"+addrs["gateway"]+"/fanout?delayMs=10", "", nil)
	if r.Err != nil || r.Status != http.StatusOK {
		t.Errorf("GET /fanout = %d %s (err %v), want 200 through Inventory (HTTP) and Billing (gRPC)", r.Status, r.Body, r.Err)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("run(all) = %d after cancel, want 0; stderr: %s", code, errOut.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run(all) did not stop within 10 s of cancel")
	}
}

func TestRunUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown role", []string{"warehouse"}, "unknown command"},
		{"bad log format", []string{"inventory", "--listen", "127.0.0.1:0", "--log-format", "xml"}, "--log-format"},
		{"bad duration", []string{"billing", "--charge-work", "soon"}, "charge-work"},
		{"bad base port", []string{"all", "--base-port", "70000"}, "--base-port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out, errOut strings.Builder
			if code := run(context.Background(), tc.args, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), tc.want) {
				t.Errorf("run(%q) = %d, stderr %q; want 1 and a message naming %q", tc.args, code, errOut.String(), tc.want)
			}
		})
	}
}
