package kernel_test

import (
	"testing"

	"github.com/sundial-go/sundial/kernel"
)

// TestCodeWireValues pins the wire value of every code the kernel
// produces: callers match on these strings, so they never change.
func TestCodeWireValues(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{kernel.CodeOverloaded, "KERNEL_UNAVAILABLE_005"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
