package propagation_test

import (
	"testing"

	"github.com/sundial-go/sundial/kernel/propagation"
)

// TestBaggageWireValues pins the baggage keys other services read: they
// never change.
func TestBaggageWireValues(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{propagation.BaggageIdempotencyKey, "sundial.idempotency-key"},
		{propagation.BaggagePriority, "sundial.priority"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
