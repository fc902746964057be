package resilience_test

import (
	"testing"

	"github.com/sundial-go/sundial/pipeline"
)

// TestCodeWireValues pins the wire value of every code the built-in limits
// produce: callers match on these strings, so they never change.
func TestCodeWireValues(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{pipeline.CodeRateLimited, "KERNEL_UNAVAILABLE_002"},
		{pipeline.CodeConcurrencyLimited, "KERNEL_UNAVAILABLE_003"},
		{pipeline.CodeCircuitOpen, "KERNEL_UNAVAILABLE_004"},
		{pipeline.CodeShed, "KERNEL_UNAVAILABLE_008"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
