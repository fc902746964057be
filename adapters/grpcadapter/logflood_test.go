package grpcadapter_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/sundial-go/sundial/adapters/grpcadapter"
	"github.com/sundial-go/sundial/kernel/logs/logstest"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

// TestBaggageFloodIsSampled: a flood of calls whose baggage the adapter
// drops (over its limit) or the kernel cuts (over 32 members), on a real
// loopback listener, writes a handful of records on the default logger;
// summaries count the others.
func TestBaggageFloodIsSampled(t *testing.T) {
	var logs pipelinetest.LogSink
	logs.CaptureDefault(t) // no t.Parallel: the default logger is global
	h := newHarness(t, harnessOpt{tcp: true, defaultLogger: true, logs: &logs,
		adapter: []grpcadapter.Option{grpcadapter.WithBaggageLimit(1024)}})
	members := make([]string, 40)
	for i := range members {
		members[i] = fmt.Sprintf("m%02d=v", i)
	}
	bags := []string{"tenant=" + strings.Repeat("x", 2000), strings.Join(members, ",")}
	const n = 200
	start := time.Now()
	for i := range n {
		ctx := metadata.AppendToOutgoingContext(t.Context(), "baggage", bags[i%2])
		if _, st := h.call(ctx, t, "/test.v1.Work/Baggage", `{}`); st != nil {
			t.Fatalf("call %d = %v, want OK", i, st)
		}
	}
	elapsed := time.Since(start)
	logstest.CheckSampled(t, &logs, "grpcadapter: baggage metadata dropped", n/2, elapsed)
	logstest.CheckSampled(t, &logs, "sundial: baggage over the limit; members dropped", n/2, elapsed)
}
