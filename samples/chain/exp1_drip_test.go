package main

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/pipeline"
)

// Experiment 1: Inventory's /report sends its headers at once and then one
// body byte every 500 ms, 8 bytes in all. Orders fetches it with a plain
// client whose only timeout is 1 s per read.
func TestExperiment1DripBody(t *testing.T) {
	t.Parallel()
	cfg := ClusterConfig{Orders: OrdersConfig{ReadTimeout: time.Second}}

	t.Run("per-read timeout alone lets the call run 4 s", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			c := startBubbleCluster(t, cfg, nil)
			r := c.call(context.Background(), http.MethodGet, c.URL("orders")+"/report", "", nil)
			if r.Err != nil || r.Status != http.StatusOK || string(r.Body) != `{"bytes":8}` {
				t.Fatalf("GET /report = %d %s (err %v), want 200 {\"bytes\":8}", r.Status, r.Body, r.Err)
			}
			// Eight bytes, one every 500 ms: the last arrives at 4 s.
			exactly(t, "call with a 1 s per-read timeout took", r.Elapsed, 4*time.Second)
		})
	})

	for _, stream := range []bool{false, true} {
		name := "Sundial deadline of 1 s ends the call at 1 s"
		if stream {
			name += ", body streamed"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) { drip(t, cfg, stream) })
		})
	}
}

// drip is experiment 1 under a 1 s Sundial deadline, the body streamed or
// not, in a synctest bubble.
func drip(t *testing.T, cfg ClusterConfig, stream bool) {
	c := startBubbleCluster(t, cfg, nil)
	start := time.Now()
	r := c.call(context.Background(), http.MethodGet, c.URL("orders")+"/report?stream="+strconv.FormatBool(stream), "", deadlineIn(time.Second))
	if r.Err != nil || r.Status != http.StatusGatewayTimeout || r.Problem.Code != pipeline.CodeTimeout {
		t.Fatalf("GET /report with a 1 s deadline = %d %s (err %v), want 504 %s", r.Status, r.Body, r.Err, pipeline.CodeTimeout)
	}
	exactly(t, "call with a 1 s Sundial deadline took", r.Elapsed, time.Second)

	// Orders' handler was cut while reading the body, not after it.
	cut := waitEvents(t, c.Orders.Journal(), 1, 2*time.Second, "report-cut")[0]
	exactly(t, "Orders stopped reading the body after", cut.At.Sub(start), time.Second)
	if stream {
		chunks := c.Orders.Journal().Events("report-chunk")
		if len(chunks) == 0 || len(chunks) > 2 {
			t.Errorf("streamed body: %d chunks read before the cut, want 1 or 2 (a byte every 500 ms for 1 s)", len(chunks))
		}
		t.Logf("streamed body: %d byte(s) arrived before the deadline cut the read loop", len(chunks))
	}
	// The connection was closed, so Inventory stopped dripping too.
	gone := waitEvents(t, c.Inventory.Journal(), 1, 2*time.Second, "drip-abandoned")[0]
	// The closed connection ends the handler's context at once: no time
	// passes while a goroutine can run.
	exactly(t, "Inventory saw the caller leave after", gone.At.Sub(start), time.Second)
	t.Logf("Inventory had sent %s of 8 bytes", gone.Attrs["sent"])
}
