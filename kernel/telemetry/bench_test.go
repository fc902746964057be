package telemetry_test

import (
	"context"
	"testing"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/sundial-go/sundial/kernel"
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
	tp, mp := sdkProviders(b)
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

// BenchmarkKernelInvoke measures a whole kernel invocation of an operation
// with nothing configured, with the Diagnostics middleware off, on with
// otel's global no-op default (the kernel's default), and on with the SDK.
func BenchmarkKernelInvoke(b *testing.B) {
	reg := operations.NewRegistry()
	if err := operations.Register(reg, operations.Descriptor{ID: "bench.op"}, func(context.Context, struct{}) (struct{}, error) {
		return struct{}{}, nil
	}); err != nil {
		b.Fatal(err)
	}
	tp, mp := sdkProviders(b)
	cases := []struct {
		name string
		opts []kernel.Option
	}{
		{"telemetry-off", []kernel.Option{kernel.WithTelemetry(false)}},
		{"global-default", nil},
		{"sdk", []kernel.Option{kernel.WithTracerProvider(tp), kernel.WithMeterProvider(mp)}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			k, err := kernel.New(append(c.opts, kernel.WithRegistry(reg))...)
			if err != nil {
				b.Fatal(err)
			}
			d, _ := k.Lookup("bench.op")
			in := &struct{}{}
			b.ReportAllocs()
			for b.Loop() {
				inv := pipeline.NewInvocation(context.Background(), d, in)
				_ = k.Invoke(inv)
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
