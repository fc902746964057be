package resilience

import (
	"testing"

	"github.com/sundial-go/sundial/resilience/idempotency"
)

// TestIdempotencyStoreCode: the breaker's copy of the idempotency store's
// code is that code.
func TestIdempotencyStoreCode(t *testing.T) {
	if codeIdempotencyStore != idempotency.CodeStore {
		t.Errorf("codeIdempotencyStore = %q, want %q", codeIdempotencyStore, idempotency.CodeStore)
	}
}
