package shopcmd

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/kernel/logs"
)

// meterName is the instrumentation scope of the shop's own instruments
// (the count of dropped log records).
const meterName = "github.com/sundial-go/sundial/samples/shop"

// shopTelemetry is the OpenTelemetry SDK of one `shop serve` run:
//
//   - a tracer provider. Every call gets a real W3C trace ID, the one its
//     Problem Details traceId and access-log line carry, and an incoming
//     traceparent is continued. Spans are exported with OTLP over HTTP only
//     when OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
//     is set (the exporter reads the other standard OTEL_EXPORTER_OTLP_*
//     variables itself). Then every trace is sampled (a caller's sampling
//     decision in traceparent is kept). Otherwise nothing leaves the
//     process, so a trace is recorded only when its caller sampled it (to
//     keep the decision for the calls downstream): a span that no one
//     exports costs each call its attributes and events in memory, and
//     under a flood of calls the collector's work to free them;
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
	res, err := newResource(ctx)
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	// Go runtime and process metrics (go_goroutines, go_memstats_*,
	// process_resident_memory_bytes, process_open_fds) beside Sundial's:
	// an operator sees stragglers pile up as goroutines and memory too.
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// WithoutScopeInfo: no otel_scope_* labels on every series (the
	// scope is Sundial's own, and a label an operator never filters on
	// only multiplies what Prometheus stores).
	pexp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	texp, err := otlpExporter(ctx, getenv)
	if err != nil {
		return nil, err
	}
	// Unsampled, a call still gets a new trace ID, or its caller's.
	root := sdktrace.NeverSample()
	topts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if texp != nil {
		root = sdktrace.AlwaysSample()
		topts = append(topts, sdktrace.WithBatcher(texp))
	}
	topts = append(topts, sdktrace.WithSampler(sdktrace.ParentBased(root)))
	return &shopTelemetry{
		tp:      sdktrace.NewTracerProvider(topts...),
		mp:      sdkmetric.NewMeterProvider(sdkmetric.WithResource(res), sdkmetric.WithReader(pexp)),
		metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
	}, nil
}

// otlpExporter returns the OTLP/HTTP span exporter when
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set
// (the exporter reads the other standard OTEL_EXPORTER_OTLP_* variables
// itself), else nil.
func otlpExporter(ctx context.Context, getenv func(string) string) (sdktrace.SpanExporter, error) {
	if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return nil, nil
	}
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
	return texp, nil
}

// newResource describes this process to the backends: service.name
// (shop), service.version (the module version the binary was built from,
// "devel" for a source build) and service.instance.id (a random UUID per
// process, so that two replicas' series and spans stay apart), overridden
// by OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
func newResource(ctx context.Context) (*resource.Resource, error) {
	res, err := resource.New(ctx,
		resource.WithAttributes(
			semconv.ServiceName("shop"),
			semconv.ServiceVersion(serviceVersion()),
			semconv.ServiceInstanceID(instanceID),
		),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
	)
	if err != nil {
		return nil, fmt.Errorf("resource: %w", err)
	}
	return res, nil
}

// instanceID is this process's service.instance.id: a random (version 4)
// UUID.
var instanceID = func() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}()

// serviceVersion returns the main module's version from the build
// information, or "devel".
func serviceVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

// cliTracing is the tracer provider of one operation command (`shop
// orders create ...`) when OTLP is configured: the command's invocation
// span is exported like serve's, and flushed before the process exits.
type cliTracing struct {
	tp *sdktrace.TracerProvider
	// restore gives OpenTelemetry's errors back to the logger before.
	restore func()
}

// startCLITracing returns the command's tracer provider, or nil when no
// OTLP endpoint is configured (the command then records no span). Until
// its shutdown, OpenTelemetry's errors (a failed export) go to logger.
func startCLITracing(ctx context.Context, getenv func(string) string, logger *slog.Logger) (*cliTracing, error) {
	texp, err := otlpExporter(ctx, getenv)
	if err != nil || texp == nil {
		return nil, err
	}
	res, err := newResource(ctx)
	if err != nil {
		return nil, err
	}
	return &cliTracing{
		tp: sdktrace.NewTracerProvider(
			sdktrace.WithResource(res),
			sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())),
			sdktrace.WithBatcher(texp),
		),
		restore: logs.OTelErrors(logger),
	}, nil
}

// shutdown flushes the command's spans (bounded by shutdownTimeout),
// logging what failed.
func (c *cliTracing) shutdown(logger *slog.Logger) {
	if c == nil {
		return
	}
	defer c.restore()
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := c.tp.Shutdown(ctx); err != nil {
		logger.Warn("shop: telemetry shutdown", "error", strings.TrimSpace(err.Error()))
	}
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
