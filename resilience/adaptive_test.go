package resilience_test

import (
	"context"
	"testing"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
)

// countedSlots is a SharedSlots that admits every call and counts those
// holding a slot.
type countedSlots struct{ held int }

func (s *countedSlots) Acquire(context.Context, *pipeline.Invocation) (func(), error) {
	s.held++
	return func() { s.held-- }, nil
}

// TestAdaptiveModes: which limit each policy enforces in this process and
// which controller runs, across updates: a static number drops the
// controller; a shadow beside slots counted elsewhere enforces nothing
// here; Shadow is ignored with AdaptiveLimit.
func TestAdaptiveModes(t *testing.T) {
	shared := &countedSlots{}
	l := resilience.NewLimits(opID, resilience.Policy{ConcurrencyLimit: resilience.AdaptiveLimit, Adaptive: resilience.Adaptive{InitialLimit: 30}})
	for _, step := range []struct {
		name               string
		p                  resilience.Policy
		opts               []resilience.Option
		enforced, adaptive int
	}{
		{"adaptive", resilience.Policy{ConcurrencyLimit: resilience.AdaptiveLimit, Adaptive: resilience.Adaptive{InitialLimit: 30}}, nil, 30, 30},
		{"static drops the controller", resilience.Policy{ConcurrencyLimit: 8}, nil, 8, 0},
		{"shadow without a limit", resilience.Policy{Adaptive: resilience.Adaptive{Shadow: true}}, nil, 0, 20},
		{"shadow of shared slots", resilience.Policy{ConcurrencyLimit: 8, Scope: resilience.ScopeCluster, Adaptive: resilience.Adaptive{Shadow: true}},
			[]resilience.Option{resilience.WithSharedSlots(shared)}, 0, 20},
		{"shadow ignored with adaptive", resilience.Policy{ConcurrencyLimit: -5, Adaptive: resilience.Adaptive{Shadow: true, MaxLimit: 10}}, nil, 10, 10},
	} {
		if step.name != "adaptive" {
			l.Update(step.p, step.opts...)
		}
		st := l.State()
		if st.ConcurrencyLimit != step.enforced || st.AdaptiveLimit != step.adaptive {
			t.Errorf("%s: State() limits = %d, %d; want %d, %d", step.name, st.ConcurrencyLimit, st.AdaptiveLimit, step.enforced, step.adaptive)
		}
		if _, err := l.Invoke(context.Background(), newInv(nil), func(context.Context, *pipeline.Invocation) (any, error) {
			if step.opts != nil && shared.held != 1 {
				t.Errorf("%s: the shared slots hold %d calls; want 1", step.name, shared.held)
			}
			return nil, nil
		}); err != nil {
			t.Errorf("%s: call = %v", step.name, err)
		}
	}
}
