package telemetry_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/sundial-go/sundial/kernel/telemetry"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// kindIn selects the outcome test.kinds returns.
type kindIn struct {
	Kind pipeline.Kind
	Code string
}

// TestOutcomeKindNotCachedByCodeAlone: the span reports each outcome's own
// kind, also for a code already seen with another kind and for codes past
// the per-operation bound (which share the "OTHER" code, not its kind).
func TestOutcomeKindNotCachedByCodeAlone(t *testing.T) {
	reg := operations.NewRegistry()
	if err := operations.Register(reg, operations.Descriptor{ID: "test.kinds"}, func(_ context.Context, in kindIn) (out, error) {
		return out{}, pipeline.NewError(in.Kind, in.Code, "failed")
	}); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t)
	k := h.kernel(t, reg, "")
	d, _ := k.Lookup("test.kinds")
	call := func(kind pipeline.Kind, code string) string {
		t.Helper()
		h.spans.Reset()
		inv := pipeline.NewInvocation(context.Background(), d, &kindIn{kind, code})
		inv.SetProtocol(pipeline.ProtocolHTTP)
		_ = k.Invoke(inv)
		for _, a := range h.onlySpan(t).Attributes() {
			if string(a.Key) == telemetry.AttrOutcomeKind {
				return a.Value.AsString()
			}
		}
		return ""
	}
	if got := call(pipeline.KindConflict, "APP_SAME_001"); got != "CONFLICT" {
		t.Fatalf("kind of APP_SAME_001 as CONFLICT = %q, want CONFLICT", got)
	}
	if got := call(pipeline.KindUnexpected, "APP_SAME_001"); got != "UNEXPECTED" {
		t.Errorf("kind of APP_SAME_001 as UNEXPECTED = %q, want UNEXPECTED", got)
	}
	for i := range 70 {
		call(pipeline.KindValidation, fmt.Sprintf("APP_VALIDATION_%03d", i))
	}
	if got := call(pipeline.KindUnexpected, "APP_FRESH_001"); got != "UNEXPECTED" {
		t.Errorf("kind of a code past the bound as UNEXPECTED = %q, want UNEXPECTED", got)
	}
}
