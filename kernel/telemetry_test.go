package kernel_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/kernel/internal/observe"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience"
)

// observedKernel serves test.echo (whose handler reports the span context
// it sees) and test.fail (always UNAVAILABLE) under config, with an SDK
// tracer and meter.
func observedKernel(t *testing.T, config string, opts ...kernel.Option) (*kernel.Kernel, *tracetest.SpanRecorder, *sdkmetric.ManualReader) {
	t.Helper()
	reg := operations.NewRegistry()
	if err := operations.Register(reg, operations.Descriptor{ID: "test.echo"}, func(ctx context.Context, _ echoIn) (string, error) {
		return trace.SpanContextFromContext(ctx).SpanID().String(), nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := operations.Register(reg, operations.Descriptor{ID: "test.fail"}, func(context.Context, echoIn) (string, error) {
		return "", pipeline.NewError(pipeline.KindUnavailable, "TEST_UNAVAILABLE_001", "down")
	}); err != nil {
		t.Fatal(err)
	}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) })
	k, err := kernel.New(append([]kernel.Option{kernel.WithRegistry(reg), kernel.WithConfigJSON([]byte(config)),
		kernel.WithTracerProvider(tp), kernel.WithMeterProvider(mp)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return k, rec, reader
}

// TestHandlerSeesItsSpan: the handler's context carries the invocation's
// span, started at the kernel's edge, and the outcome's trace ID is its.
func TestHandlerSeesItsSpan(t *testing.T) {
	k, rec, _ := observedKernel(t, `{}`)
	o := k.Op("test.echo").Invoke(context.Background(), kernel.Unary{Input: &echoIn{}})
	spans := rec.Ended()
	if o.Err != nil || len(spans) != 1 {
		t.Fatalf("Invoke = %v with %d spans, want success and one span", o.Err, len(spans))
	}
	if o.Output != spans[0].SpanContext().SpanID().String() || o.TraceID != spans[0].SpanContext().TraceID().String() {
		t.Errorf("handler saw span %v, outcome trace %q; want the invocation's span %v", o.Output, o.TraceID, spans[0].SpanContext())
	}
}

// TestTelemetryOff: WithTelemetry(false) records no span and no metric.
func TestTelemetryOff(t *testing.T) {
	k, rec, reader := observedKernel(t, `{}`, kernel.WithTelemetry(false))
	if o := k.Op("test.echo").Invoke(context.Background(), kernel.Unary{Input: &echoIn{}}); o.Err != nil || o.TraceID != "" {
		t.Fatalf("Invoke = %v, trace ID %q; want success without a trace", o.Err, o.TraceID)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.Ended()); n != 0 || len(rm.ScopeMetrics) != 0 {
		t.Errorf("%d spans and %d metric scopes with telemetry off, want none", n, len(rm.ScopeMetrics))
	}
}

// TestRealRejectionsObserved: a call a real limiter turns away (here the
// breaker, opened by one failure) is observed with its rejection event,
// its retry hint and the rejection metric.
func TestRealRejectionsObserved(t *testing.T) {
	k, rec, reader := observedKernel(t, `{"Sundial":{"Kernel":{"Resilience":{"Operations":{"test.fail":{"FailureThreshold":1,"BreakSeconds":30}}}}}}`)
	_ = k.Op("test.fail").Invoke(context.Background(), kernel.Unary{Input: &echoIn{}})
	o := k.Op("test.fail").Invoke(context.Background(), kernel.Unary{Input: &echoIn{}})
	if pipelinetest.CodeOf(o.Err) != resilience.CodeCircuitOpen {
		t.Fatalf("second call = %v, want %s", o.Err, resilience.CodeCircuitOpen)
	}
	spans := rec.Ended()
	last := spans[len(spans)-1]
	var found bool
	for _, ev := range last.Events() {
		if ev.Name != observe.EventRejection {
			continue
		}
		attrs := attribute.NewSet(ev.Attributes...)
		limit, _ := attrs.Value(observe.AttrRejectionLimit)
		retry, _ := attrs.Value(observe.AttrRetryAfter)
		found = limit.AsString() == "breaker" && retry.AsInt64() == 30
	}
	if !found {
		t.Errorf("rejected span's events %v, want %s with limit breaker and retry 30", last.Events(), observe.EventRejection)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	if got := sumOf(rm, observe.MetricRejectionCount); got != 1 {
		t.Errorf("%s = %d, want 1", observe.MetricRejectionCount, got)
	}
}

// sumOf returns the total of the int64 sum metric name.
func sumOf(rm metricdata.ResourceMetrics, name string) int64 {
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if s, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == name {
				for _, p := range s.DataPoints {
					n += p.Value
				}
			}
		}
	}
	return n
}

// TestStragglersMetric: the count of stragglers is the sundial.stragglers
// instrument, and a call shed at MaxStragglers is a rejection with reason
// "overloaded".
func TestStragglersMetric(t *testing.T) {
	release, started := make(chan struct{}), make(chan struct{}, 8)
	reg := operations.NewRegistry()
	if err := operations.Register(reg, operations.Descriptor{ID: "test.stall"}, func(context.Context, echoIn) (string, error) {
		started <- struct{}{}
		<-release
		return "late", nil
	}); err != nil {
		t.Fatal(err)
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	k, err := kernel.New(kernel.WithRegistry(reg), kernel.WithMeterProvider(mp),
		kernel.WithConfigJSON([]byte(`{"Sundial":{"Kernel":{"MaxStragglers":1,"Resilience":{"TimeoutSeconds":0.05}}}}`)))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		close(release)
		_ = k.Wait(context.Background())
	}()
	// The straggler: a call whose handler started and stalls past the
	// deadline. On a loaded machine the 50 ms can pass before the kernel
	// starts the handler, and it then does not run it: such a call leaves
	// no straggler, and the call is made again.
	for try := 1; ; try++ {
		if o := k.Op("test.stall").Handle(context.Background(), kernel.Unary{Input: &echoIn{}}); pipelinetest.CodeOf(o.Err) != pipeline.CodeTimeout {
			t.Fatalf("stalled call = %v, want TIMEOUT", o.Err)
		}
		if _, ok := pipelinetest.HandlerStarted(t, started, k.Running); ok {
			break
		}
		if try == 5 {
			t.Fatal("the handler did not start before its 50 ms deadline in 5 tries")
		}
	}
	if o := k.Op("test.stall").Handle(context.Background(), kernel.Unary{Input: &echoIn{}}); pipelinetest.CodeOf(o.Err) != kernel.CodeOverloaded {
		t.Fatalf("call at the bound = %v, want %s", o.Err, kernel.CodeOverloaded)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	if got := sumOf(rm, observe.MetricStragglers); got != 1 {
		t.Errorf("%s = %d, want 1", observe.MetricStragglers, got)
	}
	if got := sumOf(rm, observe.MetricRejectionCount); got != 1 {
		t.Errorf("%s = %d, want 1 (the shed call)", observe.MetricRejectionCount, got)
	}
}
