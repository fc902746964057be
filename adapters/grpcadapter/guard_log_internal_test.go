package grpcadapter

import (
	"net"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/metric/noop"

	"github.com/sundial-go/sundial/kernel/logs/logstest"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

// portConn is a pipeConn with a remote port of its own.
type portConn struct {
	*pipeConn
	port int
}

func (p portConn) RemoteAddr() net.Addr { return &net.TCPAddr{Port: p.port} }

// TestGuardClosedConnectionsAreSampled: of 30 connections the guard closes
// at once, SampleBurst get a warning each; one summary counts the others.
func TestGuardClosedConnectionsAreSampled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		logs := new(pipelinetest.LogSink)
		g := newGuard(Bounds{Logger: logs.Logger(), MeterProvider: noop.NewMeterProvider()}, nil)
		const n = 30
		for i := range n {
			c, _, err := g.ServerHandshake(portConn{&pipeConn{}, 1000 + i})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { guarded.Delete(c.(*guardedConn).key) })
			c.(*guardedConn).trip(reasonStalls)
		}
		if recs := logs.Find(pipelinetest.Message(msgGuardClosed)); len(recs) != logstest.SampleBurst {
			t.Fatalf("%d of %d closed connections logged one by one, want %d", len(recs), n, logstest.SampleBurst)
		}
		time.Sleep(logstest.SampleSummaryAfter)
		synctest.Wait()
		recs := logs.Find(pipelinetest.Message(msgGuardClosed))
		if last := recs[len(recs)-1]; len(recs) != logstest.SampleBurst+1 || last.Attrs["suppressed"] != int64(n-logstest.SampleBurst) {
			t.Fatalf("%d records, the last %+v; want a summary of %d", len(recs), last, n-logstest.SampleBurst)
		}
	})
}
