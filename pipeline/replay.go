package pipeline

import "sync/atomic"

// replaySlot records that an invocation's outcome is a stored one replayed
// for a repeated idempotency key (docs/idempotency.md). It is written by
// the idempotency middleware and read by the adapters, possibly on another
// goroutine, so it is atomic.
type replaySlot struct{ b atomic.Bool }

// MarkReplayed records that the invocation's outcome is the stored outcome
// of an earlier call with the same idempotency key, not a new execution.
// The kernel's idempotency middleware calls it; adapters then mark the
// answer (HTTP Idempotent-Replayed: true, gRPC header metadata
// idempotent-replayed, a CLI note on standard error).
func (inv *Invocation) MarkReplayed() {
	if inv != nil {
		inv.replay.b.Store(true)
	}
}

// Replayed reports whether the outcome was replayed (see MarkReplayed).
func (inv *Invocation) Replayed() bool {
	return inv != nil && inv.replay.b.Load()
}

// MaxIdempotencyKey bounds an idempotency key, in bytes, on every protocol.
const MaxIdempotencyKey = 255

// ValidIdempotencyKey reports whether key can be an idempotency key: 1 to
// MaxIdempotencyKey bytes of printable ASCII (what an HTTP structured-field
// string can carry, draft-ietf-httpapi-idempotency-key-header).
func ValidIdempotencyKey(key string) bool {
	if key == "" || len(key) > MaxIdempotencyKey {
		return false
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return false
		}
	}
	return true
}

// ErrIdempotencyKeyMalformed is the 400 of a malformed idempotency key.
func ErrIdempotencyKeyMalformed() *Error {
	return Validation(CodeIdempotencyKeyMalformed,
		"The idempotency key must be 1 to 255 printable ASCII characters (over HTTP: a structured-field string, e.g. Idempotency-Key: \"8e03978e-40d5\").")
}
