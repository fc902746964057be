package telemetry_test

import (
	"testing"

	"github.com/sundial-go/sundial/pipeline"
)

// TestBaggageWireValues pins the baggage keys other services read: they
// never change.
func TestBaggageWireValues(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{pipeline.BaggageIdempotencyKey, "sundial.idempotency-key"},
		{pipeline.BaggagePriority, "sundial.priority"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
