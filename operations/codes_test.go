package operations

import (
	"testing"

	"github.com/sundial-go/sundial/pipeline"
)

// TestCodeWireValues pins the wire value of every code operations
// produces: callers match on these strings, so they never change.
func TestCodeWireValues(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{pipeline.CodeUnknownField, "KERNEL_VALIDATION_003"},
		{pipeline.CodeConstraint, "KERNEL_VALIDATION_007"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
