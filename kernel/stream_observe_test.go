package kernel_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/kernel/internal/observe"
)

// TestStreamObserved: a stream has one span and one access-log line,
// which carry its end reason and its message counts. The metrics count
// the open streams of the operation and the ends by reason.
func TestStreamObserved(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) })
	var log bytes.Buffer
	opened := make(chan struct{})
	release := make(chan struct{})
	reg := streamRegistry(t, 3, func(ctx context.Context) error {
		close(opened)
		<-release
		return nil
	})
	k, err := kernel.New(kernel.WithRegistry(reg), kernel.WithTracerProvider(tp), kernel.WithMeterProvider(mp),
		kernel.WithAccessLog(slog.New(slog.NewJSONHandler(&log, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	raw := newChanRaw(t.Context())
	got := raw.collect()
	done := make(chan kernel.Outcome)
	go func() { done <- k.Op("orders.watch").Stream(t.Context(), kernel.StreamCall{Input: &Watch{}, Raw: raw}) }()
	<-opened
	if n := collectSum(t, reader, observe.MetricStreamsOpen); n != 1 {
		t.Errorf("%s = %d while one stream is open, want 1", observe.MetricStreamsOpen, n)
	}
	close(release)
	if out := <-done; out.Err != nil {
		t.Fatal(out.Err)
	}
	got()
	if n := collectSum(t, reader, observe.MetricStreamsOpen); n != 0 {
		t.Errorf("%s = %d once the stream ended, want 0", observe.MetricStreamsOpen, n)
	}
	if n := collectSum(t, reader, observe.MetricStreamEnds); n != 1 {
		t.Errorf("%s = %d, want 1", observe.MetricStreamEnds, n)
	}
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	attrs := map[string]string{}
	for _, a := range spans[0].Attributes() {
		attrs[string(a.Key)] = a.Value.Emit()
	}
	if attrs[observe.AttrStreamEndReason] != "completed" || attrs[observe.AttrStreamSent] != "3" || attrs[observe.AttrStreamReceived] != "0" {
		t.Errorf("span attributes %v", attrs)
	}
	line := log.String()
	for _, want := range []string{`"stream_end":"completed"`, `"messages_sent":3`, `"messages_received":0`} {
		if !strings.Contains(line, want) {
			t.Errorf("access log %s lacks %s", line, want)
		}
	}
}

func collectSum(t *testing.T, reader *sdkmetric.ManualReader, name string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	return sumOf(rm, name)
}
