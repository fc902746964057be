package resilience_test

import (
	"testing"

	"github.com/sundial-go/sundial/resilience"
)

// TestCodeWireValues pins the wire value of every code the built-in limits
// produce: callers match on these strings, so they never change.
func TestCodeWireValues(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{resilience.CodeRateLimited, "KERNEL_UNAVAILABLE_002"},
		{resilience.CodeConcurrencyLimited, "KERNEL_UNAVAILABLE_003"},
		{resilience.CodeCircuitOpen, "KERNEL_UNAVAILABLE_004"},
		{resilience.CodeShed, "KERNEL_UNAVAILABLE_008"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
