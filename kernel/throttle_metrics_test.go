package kernel_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sundial-go/sundial/kernel/internal/observe"
	"github.com/sundial-go/sundial/pipeline"
)

// TestDependencyThrottleMetrics: a throttled dependency reports the calls
// its throttle refused and its rejection probability. Every call of five
// fails or is refused. So the attempts and refusals add up to five, and the
// probability is attempts / (attempts + 1).
func TestDependencyThrottleMetrics(t *testing.T) {
	k, _, reader := observedKernel(t, `{"Sundial":{"Kernel":{"Dependencies":{"billing":{"Attempts":1,
		"Breaker":{"FailureThreshold":0},"Throttle":{"Enabled":true,"K":2,"WindowSeconds":60}}}}}}`)
	defer k.Close()
	for range 5 {
		_ = k.Dependency("billing").Do(t.Context(), func(context.Context) error {
			return pipeline.NewError(pipeline.KindUnavailable, "X_UNAVAILABLE_001", "down")
		})
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var attempts, refused int64
	prob := -1.0
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					switch m.Name {
					case observe.MetricOutboundAttempts:
						attempts += p.Value
					case observe.MetricOutboundThrottled:
						refused += p.Value
					}
				}
			case metricdata.Gauge[float64]:
				if m.Name == observe.MetricOutboundThrottleProbability {
					if v, _ := d.DataPoints[0].Attributes.Value(observe.MetricAttrDependency); v.AsString() != "billing" {
						t.Errorf("probability of %q", v.AsString())
					}
					prob = d.DataPoints[0].Value
				}
			}
		}
	}
	if attempts < 1 || attempts+refused != 5 || prob != float64(attempts)/float64(attempts+1) {
		t.Fatalf("attempts %d, refused %d, probability %v: want 5 in all and attempts/(attempts+1)", attempts, refused, prob)
	}
	st := k.Status().Dependencies["billing"]
	if !st.HasThrottle || st.Throttled != refused || st.WindowRequests != attempts || st.WindowAccepts != 0 {
		t.Fatalf("Status: %+v", st)
	}
}
