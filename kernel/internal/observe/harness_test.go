package observe_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sundial-go/sundial/kernel/internal/observe"
	"github.com/sundial-go/sundial/pipeline"
)

// harness is a Telemetry observed by the otel SDK: an in-memory span
// recorder, a manual metric reader and a JSON access log.
type harness struct {
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	tp     *sdktrace.TracerProvider
	mp     *sdkmetric.MeterProvider
	log    *bytes.Buffer
	tel    *observe.Telemetry
}

func newHarness(t *testing.T, opts ...observe.Option) *harness {
	t.Helper()
	h := &harness{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader(), log: &bytes.Buffer{}}
	h.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(h.spans))
	h.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(h.reader))
	t.Cleanup(func() {
		_ = h.tp.Shutdown(context.Background())
		_ = h.mp.Shutdown(context.Background())
	})
	h.tel = observe.New(append([]observe.Option{
		observe.WithTracerProvider(h.tp),
		observe.WithMeterProvider(h.mp),
		observe.WithAccessLog(slog.New(slog.NewJSONHandler(h.log, nil))),
	}, opts...)...)
	return h
}

// op is a pipeline.Operation named by its ID.
type op string

func (o op) OperationID() string { return string(o) }

// t0 is the instant the test invocations arrive at.
var t0 = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// httpInv returns an HTTP invocation of id (a host endpoint when id is
// "") with the caller's deadline callerDeadline after t0 (0: none), which
// is also the effective deadline.
func httpInv(id string, callerDeadline time.Duration) *pipeline.Invocation {
	s := pipeline.Spec{Protocol: pipeline.ProtocolHTTP}
	if id != "" {
		s.Operation = op(id)
	}
	if callerDeadline != 0 {
		s.CallerDeadline = t0.Add(callerDeadline)
		s.Deadline = s.CallerDeadline
		s.DeadlineSource = pipeline.DeadlineCaller
	}
	return pipeline.NewInvocation(s)
}

// runCall runs one invocation the way the kernel does: Start at start,
// End with err at end. It returns the Call.
func runCall(o *observe.Op, ctx context.Context, inv *pipeline.Invocation, start, end time.Time, err error) *observe.Call {
	_, c := o.Start(ctx, inv, start)
	c.End(err, end)
	return c
}

// onlySpan returns the one span ended so far.
func (h *harness) onlySpan(t *testing.T) sdktrace.ReadOnlySpan {
	t.Helper()
	ended := h.spans.Ended()
	if len(ended) != 1 {
		t.Fatalf("ended spans = %d, want 1", len(ended))
	}
	return ended[0]
}

// logLines returns the access-log lines written so far, decoded.
func (h *harness) logLines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(h.log.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("access log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

func (h *harness) collect(t *testing.T) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := h.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect: %v", err)
	}
	return rm
}

// spanAttrs flattens a span's attributes to strings.
func spanAttrs(s sdktrace.ReadOnlySpan) map[string]string {
	return kvs(s.Attributes())
}

func kvs(attrs []attribute.KeyValue) map[string]string {
	m := make(map[string]string, len(attrs))
	for _, a := range attrs {
		m[string(a.Key)] = a.Value.Emit()
	}
	return m
}

func eventNames(s sdktrace.ReadOnlySpan) []string {
	var names []string
	for _, e := range s.Events() {
		names = append(names, e.Name)
	}
	return names
}

func findEvent(s sdktrace.ReadOnlySpan, name string) (sdktrace.Event, bool) {
	i := slices.IndexFunc(s.Events(), func(e sdktrace.Event) bool { return e.Name == name })
	if i < 0 {
		return sdktrace.Event{}, false
	}
	return s.Events()[i], true
}

// point is one data point of a metric: its attributes and value (sum,
// gauge value, or histogram count).
type point struct {
	attrs map[string]string
	value float64
}

// points returns the data points of the named metric.
func points(rm metricdata.ResourceMetrics, name string) []point {
	var out []point
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out = append(out, point{kvs(p.Attributes.ToSlice()), float64(p.Value)})
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out = append(out, point{kvs(p.Attributes.ToSlice()), float64(p.Value)})
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out = append(out, point{kvs(p.Attributes.ToSlice()), float64(p.Count)})
				}
			}
		}
	}
	return out
}

// valueOf returns the value of the point of name whose attributes include
// want, and whether there is one.
func valueOf(rm metricdata.ResourceMetrics, name string, want map[string]string) (float64, bool) {
	for _, p := range points(rm, name) {
		match := true
		for k, v := range want {
			if p.attrs[k] != v {
				match = false
				break
			}
		}
		if match {
			return p.value, true
		}
	}
	return 0, false
}

// histogramSum returns the sum of the histogram name's points for
// operation op.
func histogramSum(rm metricdata.ResourceMetrics, name, op string) float64 {
	var sum float64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			d, ok := m.Data.(metricdata.Histogram[float64])
			if m.Name != name || !ok {
				continue
			}
			for _, p := range d.DataPoints {
				if v, _ := p.Attributes.Value("operation"); v.AsString() == op {
					sum += p.Sum
				}
			}
		}
	}
	return sum
}
