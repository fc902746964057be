package pipeline

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

// codeIdempotencyKeyMalformed: the key is not a bounded sf-string.
const codeIdempotencyKeyMalformed = "KERNEL_VALIDATION_005"

// ErrIdempotencyKeyMalformed is the 400 of a malformed idempotency key
// (code KERNEL_VALIDATION_005).
func ErrIdempotencyKeyMalformed() *Error {
	return NewError(KindValidation, codeIdempotencyKeyMalformed,
		"The idempotency key must be 1 to 255 printable ASCII characters (over HTTP: a structured-field string, e.g. Idempotency-Key: \"8e03978e-40d5\").")
}
