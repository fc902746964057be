package asynclog

import (
	"context"
	"fmt"
	"math"

	"go.opentelemetry.io/otel/metric"
)

// MetricDropped is the name of the counter [Handler.ObserveDropped]
// registers: the records the handler tree dropped so far. A Prometheus
// exporter renders it as sundial_log_dropped_total.
const MetricDropped = "sundial.log.dropped"

// ObserveDropped registers on m an Int64ObservableCounter named
// [MetricDropped] that reports [Handler.Dropped] at every collection, so
// that lost log records show on the metrics even while the log itself
// cannot be written. Unregister it with the returned Registration (the
// meter provider's shutdown does too).
func (h *Handler) ObserveDropped(m metric.Meter) (metric.Registration, error) {
	c, err := m.Int64ObservableCounter(MetricDropped,
		metric.WithDescription("Log records dropped because the log's writer did not keep up (asynclog)."),
		metric.WithUnit("{record}"))
	if err != nil {
		return nil, fmt.Errorf("asynclog: %w", err)
	}
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(c, int64(min(h.Dropped(), math.MaxInt64)))
		return nil
	}, c)
	if err != nil {
		return nil, fmt.Errorf("asynclog: %w", err)
	}
	return reg, nil
}
