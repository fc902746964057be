package operations

import (
	"testing"
)

// TestCodeWireValues pins the wire value of every code operations
// produces: callers match on these strings, so they never change.
func TestCodeWireValues(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{CodeUnknownField, "KERNEL_VALIDATION_003"},
		{CodeConstraint, "KERNEL_VALIDATION_007"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
