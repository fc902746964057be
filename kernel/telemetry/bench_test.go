package telemetry_test

import (
	"context"
	"testing"
	"time"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/sundial-go/sundial/kernel/telemetry"
	"github.com/sundial-go/sundial/pipeline"
)

// BenchmarkDiagnostics measures observing one invocation (Start, then End
// with success) alone:
//
//   - global-default: otel's global providers with no SDK installed (what
//     an application that never set up OpenTelemetry pays);
//   - noop: explicit no-op providers;
//   - sdk: the SDK tracer provider (always sampling, no exporter) and the
//     SDK meter provider with a manual reader — what tracing and metrics
//     cost when they are on;
//   - sdk-metrics-only: the SDK meter provider, no tracer.
func BenchmarkDiagnostics(b *testing.B) {
	d := op("bench.op")
	tp, mp := sdkProviders(b)
	cases := []struct {
		name string
		o    *telemetry.Op
	}{
		{"global-default", telemetry.New().Operation(d)},
		{"noop", telemetry.New(
			telemetry.WithTracerProvider(tracenoop.NewTracerProvider()),
			telemetry.WithMeterProvider(metricnoop.NewMeterProvider())).Operation(d)},
		{"sdk", telemetry.New(telemetry.WithTracerProvider(tp), telemetry.WithMeterProvider(mp)).Operation(d)},
		{"sdk-metrics-only", telemetry.New(
			telemetry.WithTracerProvider(tracenoop.NewTracerProvider()), telemetry.WithMeterProvider(mp)).Operation(d)},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			inv := pipeline.NewInvocation(pipeline.Spec{Operation: d, Protocol: pipeline.ProtocolHTTP})
			ctx := context.Background()
			for b.Loop() {
				now := time.Now()
				_, call := c.o.Start(ctx, inv, now)
				call.End(nil, now)
			}
		})
	}
}

// sdkProviders returns SDK providers that record and export nothing:
// always sampling, no span processor; a manual reader never collected.
func sdkProviders(b *testing.B) (*sdktrace.TracerProvider, *sdkmetric.MeterProvider) {
	tp := sdktrace.NewTracerProvider()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	b.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	return tp, mp
}
