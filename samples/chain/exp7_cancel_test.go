package main

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

// Experiment 7 (cancellation-propagation): the gateway fans out to two
// slow dependencies at once — Inventory over HTTP, Billing over gRPC — and
// the client disconnects at 1.5 s. The cancellation must travel down both
// hops: each dependency's handler stops within 100 ms, and the gateway
// logs CANCELLED.
func TestExperiment7CancellationPropagation(t *testing.T) {
	t.Parallel()
	const (
		disconnectAt = 1500 * time.Millisecond
		// grace is how soon after its context ends a dependency must stop.
		grace = 100 * time.Millisecond
	)

	// run starts a cluster, fans out with each dependency working
	// delayMs, disconnects the client at 1.5 s and returns what each
	// dependency did, with the instant of the disconnect.
	run := func(t *testing.T, cfg ClusterConfig, delayMs string) (map[string]observation, time.Time, *pipelinetest.LogSink) {
		logs := new(pipelinetest.LogSink)
		c := startBubbleCluster(t, cfg, logs)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		left := make(chan time.Time, 1)
		stop := time.AfterFunc(disconnectAt, func() { left <- time.Now(); cancel() })
		defer stop.Stop()
		r := c.call(ctx, http.MethodGet, c.URL("gateway")+"/fanout?delayMs="+delayMs, "", nil)
		if !errors.Is(r.Err, context.Canceled) {
			t.Fatalf("GET /fanout = %d %s (err %v), want the client to give up at %v", r.Status, r.Body, r.Err, disconnectAt)
		}
		disconnected := <-left
		obs := map[string]observation{
			"inventory": observe(t, c.Inventory.Journal(), 5*time.Second),
			"billing":   observe(t, c.Billing.Journal(), 5*time.Second),
		}
		// The gateway's access log attributes the outcome to the caller.
		rec := waitLog(t, logs, "http request", map[string]any{"role": "gateway", "operation": "gateway.fanout"}, 2*time.Second)
		if rec.Attrs["code"] != pipeline.CodeCanceled || rec.Attrs["status"] != int64(http.StatusRequestTimeout) {
			t.Errorf("gateway access log: code %v, status %v; want %s, 408", rec.Attrs["code"], rec.Attrs["status"], pipeline.CodeCanceled)
		} else {
			t.Logf("gateway log: %q operation=%v status=%v code=%v", rec.Message, rec.Attrs["operation"], rec.Attrs["status"], rec.Attrs["code"])
		}
		return obs, disconnected, logs
	}

	t.Run("both dependencies stop within 100 ms of the disconnect", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			obs, disconnected, _ := run(t, ClusterConfig{}, "5000")
			for _, dep := range []string{"inventory", "billing"} {
				o := obs[dep]
				if o.ctxDone.IsZero() {
					t.Errorf("%s: its context never ended", dep)
					continue
				}
				// At the very instant: no time passes on the way down.
				exactly(t, dep+" saw its context end after the disconnect", o.ctxDone.Sub(disconnected), 0)
				exactly(t, dep+" stopped working after the disconnect", o.ended.Sub(disconnected), 0)
				if o.swallowed(grace) {
					t.Errorf("%s swallowed the cancellation: %s", dep, o)
				}
			}
		})
	})

	// The failure mode: Billing's slow operation catches the cancellation
	// and carries on. The test detects it and reports it as the bug it is;
	// it asserts that the detector sees it, not that the bug is absent.
	t.Run("a dependency that swallows the cancellation is flagged", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			obs, disconnected, _ := run(t, ClusterConfig{Billing: BillingConfig{SwallowCancel: true}}, "3000")
			inv, bill := obs["inventory"], obs["billing"]
			exactly(t, "inventory stopped working after the disconnect", inv.ended.Sub(disconnected), 0)
			if inv.swallowed(grace) {
				t.Errorf("inventory flagged as swallowing the cancellation: %s", inv)
			}
			if !bill.swallowed(grace) {
				t.Fatalf("billing built with SwallowCancel was not flagged: %s", bill)
			}
			exactly(t, "billing's context ended after the disconnect (the cancellation did arrive)", bill.ctxDone.Sub(disconnected), 0)
			t.Logf("FAILURE MODE DETECTED: billing.slow swallowed the cancellation: %s — it kept running %s after the client left, for nobody",
				bill, secs(bill.ended.Sub(disconnected)))
		})
	})
}

// observation is what one dependency's journal says about its slow call.
type observation struct {
	ctxDone time.Time // when its context ended (zero: never)
	ended   time.Time // when its handler stopped or finished
	kind    string    // "stopped" (it saw the cancellation) or "finished"
}

// observe waits up to limit for the dependency's slow call to end and
// returns what it did.
func observe(t *testing.T, j *Journal, limit time.Duration) observation {
	t.Helper()
	end := waitEvents(t, j, 1, limit, "stopped", "finished")[0]
	o := observation{ended: end.At, kind: end.Kind}
	if end.Kind == "stopped" {
		// It stopped because its context ended; the watcher that records
		// that runs in its own goroutine and may record it a moment later.
		o.ctxDone = waitEvents(t, j, 1, limit, "ctx-done")[0].At
	} else if done := j.Events("ctx-done"); len(done) > 0 {
		o.ctxDone = done[0].At
	}
	return o
}

// swallowed reports whether the call went on working more than grace
// after its context ended: the cancellation reached it and was ignored.
func (o observation) swallowed(grace time.Duration) bool {
	return !o.ctxDone.IsZero() && o.ended.Sub(o.ctxDone) > grace
}

func (o observation) String() string {
	if o.ctxDone.IsZero() {
		return o.kind + ", context never ended"
	}
	return o.kind + " " + secs(o.ended.Sub(o.ctxDone)) + " after its context ended"
}
