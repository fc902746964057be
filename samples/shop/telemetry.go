package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sundial-go/sundial/kernel"
)

// meterName is the instrumentation scope of the shop's own instruments
// (the count of dropped log records).
const meterName = "github.com/sundial-go/sundial/samples/shop"

// shopTelemetry is the OpenTelemetry SDK of one `shop serve` run:
//
//   - a tracer provider that samples every trace (a caller's sampling
//     decision in traceparent is kept), so every Problem Details traceId
//     and access-log line carries a real W3C trace ID, and an incoming
//     traceparent is continued. Spans are exported with OTLP over HTTP only
//     when OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
//     is set (the exporter reads the other standard OTEL_EXPORTER_OTLP_*
//     variables itself); otherwise nothing leaves the process;
//   - a meter provider read by otel's Prometheus exporter, served on
//     /metrics of the HTTP port.
//
// The providers are passed to the kernel, not installed as otel's globals,
// so several runs in one process (tests) do not share them.
type shopTelemetry struct {
	tp      *sdktrace.TracerProvider
	mp      *sdkmetric.MeterProvider
	metrics http.Handler
}

// startTelemetry creates the shop's providers. getenv reads the OTEL_*
// variables (os.Getenv in the binary).
func startTelemetry(ctx context.Context, getenv func(string) string) (*shopTelemetry, error) {
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "shop")),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
	)
	if err != nil {
		return nil, fmt.Errorf("resource: %w", err)
	}
	reg := prometheus.NewRegistry()
	// Go runtime and process metrics (go_goroutines, go_memstats_*,
	// process_resident_memory_bytes, process_open_fds) beside Sundial's:
	// an operator sees stragglers pile up as goroutines and memory too.
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	pexp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	topts := []sdktrace.TracerProviderOption{
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())),
	}
	if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" {
		proto := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
		if proto == "" {
			proto = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
		}
		if proto != "" && proto != "http/protobuf" {
			return nil, fmt.Errorf("OTLP protocol %q is not supported: use http/protobuf (the default)", proto)
		}
		texp, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("OTLP trace exporter: %w", err)
		}
		topts = append(topts, sdktrace.WithBatcher(texp))
	}
	return &shopTelemetry{
		tp:      sdktrace.NewTracerProvider(topts...),
		mp:      sdkmetric.NewMeterProvider(sdkmetric.WithResource(res), sdkmetric.WithReader(pexp)),
		metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
	}, nil
}

// kernelOptions hands the providers to the kernel, which observes every
// invocation with them.
func (t *shopTelemetry) kernelOptions() []kernel.Option {
	return []kernel.Option{kernel.WithTracerProvider(t.tp), kernel.WithMeterProvider(t.mp)}
}

// shutdownTimeout bounds the final flush of spans to an OTLP endpoint.
const shutdownTimeout = 5 * time.Second

// shutdown flushes pending spans and stops the providers, logging what
// failed.
func (t *shopTelemetry) shutdown(logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := errors.Join(t.tp.Shutdown(ctx), t.mp.Shutdown(ctx)); err != nil {
		logger.Warn("shop: telemetry shutdown", "error", strings.TrimSpace(err.Error()))
	}
}
