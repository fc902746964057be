package rpccall

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	klogs "github.com/sundial-go/sundial/kernel/logs"
)

// This file counts the calls that ended before their answer: canceled by
// their client, or ended with their connection. A
// client can cancel calls as fast as it opens them (HTTP/2 rapid reset),
// and one log record per call would cost more than the call: such calls
// are counted in sundial.grpc.calls.canceled, and only a few get a call
// log record of their own.

// Canceled counts the calls canceled by their clients and samples their
// records.
type Canceled struct {
	logger  *slog.Logger
	counter metric.Int64Counter
	logs    *klogs.Sampler
}

// NewCanceled returns the counter of mp's meter MeterName, whose records
// go to logger.
func NewCanceled(logger *slog.Logger, mp metric.MeterProvider) *Canceled {
	c := &Canceled{logger: logger}
	c.logs = klogs.NewSampler(c.summarize)
	c.counter, _ = mp.Meter(MeterName).Int64Counter("sundial.grpc.calls.canceled",
		metric.WithDescription("gRPC calls that ended before their answer, canceled by their client "+
			"or with their connection; early: before the request message arrived (no invocation ran)."),
		metric.WithUnit("{call}"))
	return c
}

// Add counts one call canceled by its client (early: before its request
// message) and reports whether it gets a call log record of its own.
// Early calls never do. The others that do not are summed up in one
// record, within the klogs.Sampler's window after the first of them.
func (c *Canceled) Add(ctx context.Context, early bool) bool {
	if c.counter != nil {
		c.counter.Add(ctx, 1, metric.WithAttributes(attribute.Bool("early", early)))
	}
	if early {
		c.logs.Suppress()
		return false
	}
	return c.logs.Allow()
}

// summarize writes the record of the n calls not logged one by one.
func (c *Canceled) summarize(n int64, within time.Duration) {
	c.logger.LogAttrs(context.Background(), slog.LevelInfo, "grpc calls canceled by their clients",
		slog.Int64("calls", n), slog.Float64("withinS", within.Seconds()))
}

// MeterName is the instrumentation scope of the gRPC adapter's
// instruments, the counter of canceled calls among them.
const MeterName = "github.com/sundial-go/sundial/adapters/grpcadapter"
