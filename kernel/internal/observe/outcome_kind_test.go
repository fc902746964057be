package observe_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/sundial-go/sundial/kernel/internal/observe"
	"github.com/sundial-go/sundial/pipeline"
)

// TestOutcomeKindNotCachedByCodeAlone: the span reports each outcome's own
// kind, also for a code already seen with another kind and for codes past
// the per-operation bound (which share the "OTHER" code, not its kind).
func TestOutcomeKindNotCachedByCodeAlone(t *testing.T) {
	h := newHarness(t)
	o := h.tel.Operation(op("test.kinds"))
	call := func(kind pipeline.Kind, code string) map[string]string {
		t.Helper()
		h.spans.Reset()
		runCall(o, context.Background(), httpInv("test.kinds", 0), t0, t0, pipeline.NewError(kind, code, "failed"))
		return spanAttrs(h.onlySpan(t))
	}
	if got := call(pipeline.KindConflict, "APP_SAME_001")[observe.AttrOutcomeKind]; got != "CONFLICT" {
		t.Fatalf("kind of APP_SAME_001 as CONFLICT = %q, want CONFLICT", got)
	}
	if got := call(pipeline.KindUnexpected, "APP_SAME_001")[observe.AttrOutcomeKind]; got != "UNEXPECTED" {
		t.Errorf("kind of APP_SAME_001 as UNEXPECTED = %q, want UNEXPECTED", got)
	}
	for i := range 70 {
		call(pipeline.KindValidation, fmt.Sprintf("APP_VALIDATION_%03d", i))
	}
	a := call(pipeline.KindUnexpected, "APP_FRESH_001")
	if got := a[observe.AttrOutcomeKind]; got != "UNEXPECTED" {
		t.Errorf("kind of a code past the bound as UNEXPECTED = %q, want UNEXPECTED", got)
	}
	if got := a[observe.AttrOutcomeCode]; got != "OTHER" {
		t.Errorf("code past the bound = %q, want OTHER", got)
	}
	rm := h.collect(t)
	if v, _ := valueOf(rm, observe.MetricInvocationDuration, map[string]string{"operation": "test.kinds", "kind": "UNEXPECTED", "code": "OTHER"}); v != 1 {
		t.Errorf("%s{UNEXPECTED, OTHER} = %v, want 1", observe.MetricInvocationDuration, v)
	}
	if v, _ := valueOf(rm, observe.MetricInvocationDuration, map[string]string{"operation": "test.kinds", "kind": "CONFLICT", "code": "APP_SAME_001"}); v != 1 {
		t.Errorf("%s{CONFLICT, APP_SAME_001} = %v, want 1", observe.MetricInvocationDuration, v)
	}
}
