package telemetry_test

import (
	"context"
	"testing"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/sundial-go/sundial/kernel/telemetry"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// BenchmarkDiagnostics measures the Diagnostics middleware alone around a
// handler that does nothing:
//
//   - bare: the handler without the middleware (the floor);
//   - global-default: otel's global providers with no SDK installed (what
//     an application that never set up OpenTelemetry pays);
//   - noop: explicit no-op providers;
//   - sdk: the SDK tracer provider (always sampling, no exporter) and the
//     SDK meter provider with a manual reader — what tracing and metrics
//     cost when they are on.
func BenchmarkDiagnostics(b *testing.B) {
	d := &operations.Descriptor{ID: "bench.op"}
	terminal := func(*pipeline.Invocation) error { return nil }
	tp := sdktrace.NewTracerProvider()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer tp.Shutdown(context.Background())
	defer mp.Shutdown(context.Background())
	cases := []struct {
		name string
		h    pipeline.Handler
	}{
		{"bare", terminal},
		{"global-default", pipeline.Chain(terminal, telemetry.New().Middleware(d))},
		{"noop", pipeline.Chain(terminal, telemetry.New(
			telemetry.WithTracerProvider(tracenoop.NewTracerProvider()),
			telemetry.WithMeterProvider(metricnoop.NewMeterProvider())).Middleware(d))},
		{"sdk", pipeline.Chain(terminal, telemetry.New(telemetry.WithTracerProvider(tp), telemetry.WithMeterProvider(mp)).Middleware(d))},
		{"sdk-metrics-only", pipeline.Chain(terminal, telemetry.New(
			telemetry.WithTracerProvider(tracenoop.NewTracerProvider()), telemetry.WithMeterProvider(mp)).Middleware(d))},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			inv := pipeline.NewInvocation(context.Background(), d, nil)
			inv.SetProtocol(pipeline.ProtocolHTTP)
			for b.Loop() {
				_ = c.h(inv)
			}
		})
	}
}
