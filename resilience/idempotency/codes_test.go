package idempotency_test

import (
	"strings"
	"testing"

	"github.com/sundial-go/sundial/pipeline"
)

// TestCodeWireValues pins the wire value of every code and field the
// idempotency middleware produces: callers match on these strings.
func TestCodeWireValues(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{pipeline.CodeIdempotencyInProgress, "KERNEL_CONFLICT_001"},
		{pipeline.CodeIdempotencyMismatch, "KERNEL_UNPROCESSABLE_001"},
		{pipeline.CodeIdempotencyStore, "KERNEL_UNAVAILABLE_006"},
		{pipeline.ErrIdempotencyKeyMalformed().Code(), "KERNEL_VALIDATION_005"},
		{pipeline.ErrIdempotencyKeyMalformed().Kind().String(), "VALIDATION"},
		{pipeline.FieldReplayed, "Idempotent-Replayed"},
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
		if got := pipeline.ValidIdempotencyKey(key); got != want {
			t.Errorf("ValidKey(%q) = %v, want %v", key, got, want)
		}
	}
}
