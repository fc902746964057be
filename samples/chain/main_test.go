package main

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// startRun runs the command line in the background until ctx ends and
// returns the listen addresses it printed (want of them), and a channel
// that yields its exit code.
func startRun(t *testing.T, ctx context.Context, want int, args ...string) (map[string]string, <-chan int) {
	t.Helper()
	out, errOut := &outputBuffer{}, &outputBuffer{}
	done := make(chan int, 1)
	go func() { done <- run(ctx, args, out, errOut) }()
	addrs := map[string]string{}
	re := regexp.MustCompile(`(?m)^(\w+)\s+listening on (\S+)$`)
	deadline := time.Now().Add(5 * time.Second)
	for len(addrs) < want {
		if time.Now().After(deadline) {
			t.Fatalf("chain %q printed %q (stderr %q), want %d listening lines", args, out.String(), errOut.String(), want)
		}
		out.waitWrite(100 * time.Millisecond)
		for _, m := range re.FindAllStringSubmatch(out.String(), -1) {
			addrs[m[1]] = m[2]
		}
	}
	return addrs, done
}

// waitExit waits for a run started by startRun to return 0 after its
// context was cancelled.
func waitExit(t *testing.T, name string, done <-chan int) {
	t.Helper()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("run(%s) = %d after cancel, want 0", name, code)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("run(%s) did not stop within 10 s of cancel", name)
	}
}

// TestRunAll starts `chain all` on free ports, checks that the four roles
// answer, and that cancelling the context (SIGINT) stops them.
func TestRunAll(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrs, done := startRun(t, ctx, 4, "all", "--base-port", "0", "--log-format", "json")
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
	waitExit(t, "all", done)
}

// TestRunSeparateRoles starts each role with its own command line, as
// separate processes would, wires them with the peer flags, and runs a
// checkout through all four.
func TestRunSeparateRoles(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inv, invDone := startRun(t, ctx, 1, "inventory", "--listen", "127.0.0.1:0", "--reserve-work", "100ms")
	bil, bilDone := startRun(t, ctx, 1, "billing", "--listen", "127.0.0.1:0", "--charge-work", "100ms")
	ord, ordDone := startRun(t, ctx, 1, "orders", "--listen", "127.0.0.1:0",
		"--inventory", "http://"+inv["inventory"], "--billing", bil["billing"])
	gw, gwDone := startRun(t, ctx, 1, "gateway", "--listen", "127.0.0.1:0",
		"--orders", "http://"+ord["orders"], "--inventory", "http://"+inv["inventory"], "--billing", bil["billing"])

	r := call(ctx, http.MethodPost, "http://"+gw["gateway"]+"/checkout", `{"item":"book","qty":1,"amount":30}`, nil)
	if r.Err != nil || r.Status != http.StatusCreated || !strings.Contains(string(r.Body), `"chargeId":"chg-1"`) {
		t.Errorf("POST /checkout = %d %s (err %v), want 201 with charge chg-1", r.Status, r.Body, r.Err)
	}
	cancel()
	for name, done := range map[string]<-chan int{"gateway": gwDone, "orders": ordDone, "inventory": invDone, "billing": bilDone} {
		waitExit(t, name, done)
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
