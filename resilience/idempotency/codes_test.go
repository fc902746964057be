package idempotency_test

import (
	"strings"
	"testing"

	"github.com/sundial-go/sundial/resilience/idempotency"
)

// TestCodeWireValues pins the wire value of every code and field the
// idempotency middleware produces: callers match on these strings.
func TestCodeWireValues(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{idempotency.CodeInProgress, "KERNEL_CONFLICT_001"},
		{idempotency.CodeMismatch, "KERNEL_UNPROCESSABLE_001"},
		{idempotency.CodeStore, "KERNEL_UNAVAILABLE_006"},
		{idempotency.ErrKeyMalformed().Code(), "KERNEL_VALIDATION_005"},
		{idempotency.ErrKeyMalformed().Kind().String(), "VALIDATION"},
		{idempotency.FieldReplayed, "Idempotent-Replayed"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	// The key grammar: 1 to 255 bytes of printable ASCII.
	for key, want := range map[string]bool{
		"": false, "a": true, strings.Repeat("k", 255): true, strings.Repeat("k", 256): false,
		" ~": true, "a\x1f": false, "a\x7f": false, "é": false,
	} {
		if got := idempotency.ValidKey(key); got != want {
			t.Errorf("ValidKey(%q) = %v, want %v", key, got, want)
		}
	}
}
