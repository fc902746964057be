package asynclog_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sundial-go/sundial/samples/shop/internal/asynclog"
)

// droppedMetric collects r and returns the value of MetricDropped, or -1
// when it is not reported.
func droppedMetric(t *testing.T, r *sdkmetric.ManualReader) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != asynclog.MetricDropped {
				continue
			}
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok || !sum.IsMonotonic || len(sum.DataPoints) != 1 {
				t.Fatalf("%s = %#v, want one monotonic int64 sum", m.Name, m.Data)
			}
			return sum.DataPoints[0].Value
		}
	}
	return -1
}

// TestObserveDropped: the counter reports Dropped() at each collection —
// 0 before any drop, the count while the writer is blocked — and nothing
// once unregistered.
func TestObserveDropped(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())

	w := newBlockingWriter()
	released := false
	defer func() {
		if !released {
			close(w.release)
		}
	}()
	h := asynclog.New(slog.NewJSONHandler(w, nil), asynclog.WithQueue(4), asynclog.WithReportInterval(time.Hour))
	reg, err := h.ObserveDropped(mp.Meter("test"))
	if err != nil {
		t.Fatal(err)
	}
	if got := droppedMetric(t, reader); got != 0 {
		t.Fatalf("%s before any record = %d, want 0", asynclog.MetricDropped, got)
	}
	l := slog.New(h)
	blockWriter(t, l, w)
	for i := range 10 {
		l.Info("n", "i", i)
	}
	if got := droppedMetric(t, reader); got != 6 || h.Dropped() != 6 {
		t.Fatalf("%s with the writer blocked, 10 records for a queue of 4 = %d (Dropped() %d), want 6", asynclog.MetricDropped, got, h.Dropped())
	}
	close(w.release)
	released = true
	closeNow(t, h)
	if err := reg.Unregister(); err != nil {
		t.Fatal(err)
	}
	if got := droppedMetric(t, reader); got != -1 {
		t.Errorf("%s after Unregister = %d, want not reported", asynclog.MetricDropped, got)
	}
}
