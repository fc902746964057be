package cliadapter

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/baggage"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// TestBaggageFlag: --baggage reaches the call as a header's baggage does
// (the handler's context has it, a per-key limit takes its key from it);
// a malformed value, or a limit key that is not valid, is a VALIDATION
// failure, exit 2, and the handler does not run.
func TestBaggageFlag(t *testing.T) {
	t.Parallel()
	reg := operations.NewRegistry()
	var ran int
	if err := operations.Register(reg, operations.Descriptor{ID: "test.tenant"}, func(ctx context.Context, _ struct{}) (string, error) {
		ran++
		return baggage.FromContext(ctx).Member("tenant").Value(), nil
	}); err != nil {
		t.Fatal(err)
	}
	kf := kernelOn(reg, kernel.WithConfigJSON([]byte(`{"Sundial":{"Kernel":{"Resilience":{"Operations":{
		"test.tenant":{"PerKey":{"PermitLimit":5}}}}}}}`)))
	if r := executeOn(t, reg, kf, nil, nil, "test", "tenant", "--baggage", "tenant=acme,region=eu"); r.code != 0 || r.stdout != "\"acme\"\n" {
		t.Fatalf("--baggage tenant=acme: exit %d, stdout %q, stderr %q; want the handler to see acme", r.code, r.stdout, r.stderr)
	}
	for _, tc := range []struct{ name, value, code string }{
		{"malformed", "tenant", pipeline.CodeValidation},
		{"a limit key with a brace", "tenant=a%7Bb", "KERNEL_VALIDATION_008"},
	} {
		before := ran
		r := executeOn(t, reg, kf, nil, nil, "test", "tenant", "--baggage", tc.value)
		if p := problemOf(t, r.stderr); r.code != 2 || p.Code != tc.code || ran != before {
			t.Errorf("%s: exit %d, code %s, handler ran %d times; want exit 2, %s, no run", tc.name, r.code, p.Code, ran-before, tc.code)
		}
	}
}
