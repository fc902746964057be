package observe_test

import (
	"context"
	"testing"
	"time"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/sundial-go/sundial/kernel/internal/observe"
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
//   - sdk-metrics-only: the SDK meter provider, no tracer;
//   - sdk-http-semconv, sdk-metrics-only-http-semconv: the same, for an
//     HTTP request described by an observe.Transport, as the HTTP adapter
//     does: the span and http.server.request.duration also get the
//     OpenTelemetry conventions' attributes.
func BenchmarkDiagnostics(b *testing.B) {
	d := op("bench.op")
	tp, mp := sdkProviders(b)
	status := func(error) int { return 201 }
	httpReq := &observe.Transport{Method: "POST", Route: "/orders", Scheme: "http", Path: "/orders",
		Host: "127.0.0.1:5000", ProtocolVersion: "1.1", Status: status}
	cases := []struct {
		name string
		o    *observe.Op
		tr   *observe.Transport
	}{
		{"global-default", observe.New().Operation(d), nil},
		{"noop", observe.New(
			observe.WithTracerProvider(tracenoop.NewTracerProvider()),
			observe.WithMeterProvider(metricnoop.NewMeterProvider())).Operation(d), nil},
		{"sdk", observe.New(observe.WithTracerProvider(tp), observe.WithMeterProvider(mp)).Operation(d), nil},
		{"sdk-metrics-only", observe.New(
			observe.WithTracerProvider(tracenoop.NewTracerProvider()), observe.WithMeterProvider(mp)).Operation(d), nil},
		{"sdk-http-semconv", observe.New(observe.WithTracerProvider(tp), observe.WithMeterProvider(mp)).Operation(d), httpReq},
		{"sdk-metrics-only-http-semconv", observe.New(
			observe.WithTracerProvider(tracenoop.NewTracerProvider()), observe.WithMeterProvider(mp)).Operation(d), httpReq},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			inv := pipeline.NewInvocation(pipeline.Spec{Operation: d, Protocol: pipeline.ProtocolHTTP})
			ctx := context.Background()
			for b.Loop() {
				now := time.Now()
				_, call := c.o.StartTransport(ctx, inv, now, c.tr)
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
