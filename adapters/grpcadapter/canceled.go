package grpcadapter

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// This file counts the calls that ended before their answer: canceled by
// their client, or ended with their connection. A
// client can cancel calls as fast as it opens them (HTTP/2 rapid reset),
// and one log record per call would cost more than the call: such calls
// are counted in sundial.grpc.calls.canceled, and only a few get a call
// log record of their own.

// At most canceledLogBurst calls canceled by their clients get a call log
// record at once, and canceledLogRate a second on average. The others are
// summed up in one record canceledSummaryAfter after the first of them.
const (
	canceledLogBurst     = 10
	canceledLogRate      = 1.0
	canceledSummaryAfter = 10 * time.Second
)

// canceledCalls counts the calls canceled by their clients and samples
// their records.
type canceledCalls struct {
	logger  *slog.Logger
	counter metric.Int64Counter

	mu      sync.Mutex // guards logs, pending and summary
	logs    bucket
	pending int64       // calls not logged since the last summary
	summary *time.Timer // pending the summary; nil: none
}

func newCanceledCalls(logger *slog.Logger, mp metric.MeterProvider) *canceledCalls {
	c := &canceledCalls{logger: logger,
		logs: bucket{tokens: canceledLogBurst, burst: canceledLogBurst, rate: canceledLogRate}}
	c.counter, _ = mp.Meter(meterName).Int64Counter("sundial.grpc.calls.canceled",
		metric.WithDescription("gRPC calls that ended before their answer, canceled by their client "+
			"or with their connection; early: before the request message arrived (no invocation ran)."),
		metric.WithUnit("{call}"))
	return c
}

// add counts one call canceled by its client (early: before its request
// message) and reports whether it gets a call log record of its own.
// Early calls never do. The others that do not are summed up in a record
// written canceledSummaryAfter after the first of them.
func (c *canceledCalls) add(ctx context.Context, early bool) bool {
	if c.counter != nil {
		c.counter.Add(ctx, 1, metric.WithAttributes(attribute.Bool("early", early)))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !early && c.logs.take(time.Now()) {
		return true
	}
	c.pending++
	if c.summary == nil {
		c.summary = time.AfterFunc(canceledSummaryAfter, c.summarize)
	}
	return false
}

// summarize writes the record of the calls not logged one by one.
func (c *canceledCalls) summarize() {
	c.mu.Lock()
	n := c.pending
	c.pending, c.summary = 0, nil
	c.mu.Unlock()
	c.logger.LogAttrs(context.Background(), slog.LevelInfo, "grpc calls canceled by their clients",
		slog.Int64("calls", n), slog.Float64("withinS", canceledSummaryAfter.Seconds()))
}
