package pipeline_test

import (
	"testing"

	"github.com/sundial-go/sundial/pipeline"
)

// TestPriorityOrder: the classes are ordered, and an invocation without
// one (a zero Spec, a nil Invocation) is of the default class. The names
// are parsed by the kernel (TestParsePriority in kernel/internal/priority).
func TestPriorityOrder(t *testing.T) {
	t.Parallel()
	if min(pipeline.PriorityCritical, pipeline.PrioritySheddable) != pipeline.PrioritySheddable ||
		min(pipeline.PriorityCritical, pipeline.PriorityDefault) != pipeline.PriorityDefault {
		t.Error("classes are not ordered sheddable < default < critical")
	}
	var zero pipeline.Spec
	if p := pipeline.NewInvocation(zero).Priority(); p != pipeline.PriorityDefault {
		t.Errorf("zero Spec's Priority() = %v, want default", p)
	}
	var nilInv *pipeline.Invocation
	if p := nilInv.Priority(); p != pipeline.PriorityDefault {
		t.Errorf("nil Invocation's Priority() = %v, want default", p)
	}
}
