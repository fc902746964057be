package kernel_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/kernel/internal/observe"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

func dependencyDoc(attempts int) string {
	return fmt.Sprintf(`{"Sundial":{"Kernel":{"Dependencies":{"billing":{"Attempts":%d,"Backoff":{"BaseMs":0.01,"MaxMs":0.02},"Breaker":{"FailureThreshold":0}}}}}}`, attempts)
}

// attemptsOf counts the attempts one failing call through the kernel's
// billing dependency makes.
func attemptsOf(t *testing.T, k *kernel.Kernel) int {
	t.Helper()
	d := k.Dependency("billing")
	if d == nil {
		t.Fatal("no billing dependency")
	}
	n := 0
	_ = d.Do(t.Context(), func(context.Context) error {
		n++
		return pipeline.NewError(pipeline.KindUnavailable, "X_UNAVAILABLE_001", "down")
	})
	return n
}

// TestDependenciesFromConfigAndReload: Sundial.Kernel.Dependencies.billing
// configures the dependency; a reload changes it in place (the same
// *outbound.Dependency); an invalid reload names the key path and keeps
// the policy in force.
func TestDependenciesFromConfigAndReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.json")
	writeAtomically(t, path, dependencyDoc(4))
	k, err := kernel.New(kernel.WithRegistry(operations.NewRegistry()), kernel.WithConfigFile(path))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	if k.Dependency("nobody") != nil {
		t.Fatal("an unconfigured dependency exists")
	}
	before := k.Dependency("billing")
	if n := attemptsOf(t, k); n != 4 {
		t.Fatalf("%d attempts, want 4", n)
	}
	writeAtomically(t, path, dependencyDoc(2))
	if res, err := kernel.ReloadResult(k.Reload()); err != nil || res != kernel.ReloadOK {
		t.Fatalf("Reload = %s, %v", res, err)
	}
	if n := attemptsOf(t, k); n != 2 || k.Dependency("billing") != before {
		t.Fatalf("%d attempts (same dependency: %v), want 2 on the same one", n, k.Dependency("billing") == before)
	}
	writeAtomically(t, path, dependencyDoc(0))
	_, err = k.Reload()
	if err == nil || !strings.Contains(err.Error(), "Sundial.Kernel.Dependencies.billing.Attempts") {
		t.Fatalf("Reload = %v, want an error naming the key path", err)
	}
	if n := attemptsOf(t, k); n != 2 {
		t.Fatalf("%d attempts after an invalid reload, want 2", n)
	}
}

func TestDependenciesInvalidAtNew(t *testing.T) {
	_, err := kernel.New(kernel.WithRegistry(operations.NewRegistry()),
		kernel.WithConfigJSON([]byte(`{"Sundial":{"Kernel":{"Dependencies":{"billing":{"Budget":{"Ratio":2}}}}}}`)))
	if err == nil || !strings.Contains(err.Error(), "Sundial.Kernel.Dependencies.billing.Budget.Ratio") {
		t.Fatalf("New = %v, want an error naming the key path", err)
	}
}

// TestDependencyMetrics: the kernel's meter reports a dependency's
// attempts by kind, its budget refusals and its breaker's state.
func TestDependencyMetrics(t *testing.T) {
	k, _, reader := observedKernel(t, `{"Sundial":{"Kernel":{"Dependencies":{"billing":{"Attempts":3,
		"Backoff":{"BaseMs":0.01,"MaxMs":0.02},"Budget":{"Ratio":0,"Min":3},"Breaker":{"FailureThreshold":100}}}}}}`)
	defer k.Close()
	// call 1 retries twice; call 2 once, on the last token, then the budget
	// refuses; call 3 is refused its retry
	for range 3 {
		_ = k.Dependency("billing").Do(t.Context(), func(context.Context) error {
			return pipeline.NewError(pipeline.KindUnavailable, "X_UNAVAILABLE_001", "down")
		})
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			points := func(name string, ps []metricdata.DataPoint[int64]) {
				for _, p := range ps {
					dep, _ := p.Attributes.Value(observe.MetricAttrDependency)
					a, _ := p.Attributes.Value(observe.MetricAttrAttempt)
					s, _ := p.Attributes.Value(observe.MetricAttrState)
					got[strings.Trim(name+" "+dep.AsString()+" "+a.AsString()+" "+s.AsString(), " ")] = p.Value
				}
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				points(m.Name, d.DataPoints)
			case metricdata.Gauge[int64]:
				points(m.Name, d.DataPoints)
			}
		}
	}
	for key, want := range map[string]int64{
		observe.MetricOutboundAttempts + " billing first":       3,
		observe.MetricOutboundAttempts + " billing retry":       3,
		observe.MetricOutboundAttempts + " billing hedge":       0,
		observe.MetricOutboundBudgetRefusals + " billing":       2,
		observe.MetricOutboundBreakerState + " billing  closed": 1,
		observe.MetricOutboundBreakerState + " billing  open":   0,
	} {
		if got[key] != want {
			t.Errorf("%s = %d, want %d (all: %v)", key, got[key], want, got)
		}
	}
}
