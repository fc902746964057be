package idempotency

import "github.com/sundial-go/sundial/pipeline"

// The codes of the middleware's rejections a caller may act on.
const (
	CodeInProgress = "KERNEL_CONFLICT_001"      // 409: a call with this key still runs
	CodeMismatch   = "KERNEL_UNPROCESSABLE_001" // 422: the key was used with another input
	CodeStore      = "KERNEL_UNAVAILABLE_006"   // 503: the store did not answer
)

// FieldReplayed is the reply field set to "true" on an outcome replayed
// for a repeated key.
const FieldReplayed = "Idempotent-Replayed"

// maxKey bounds an idempotency key, in bytes, on every protocol.
const maxKey = 255

// ValidKey reports whether key can be an idempotency key. A key is 1 to
// 255 bytes of printable ASCII: what an HTTP structured-field string
// carries (draft-ietf-httpapi-idempotency-key-header).
func ValidKey(key string) bool {
	if key == "" || len(key) > maxKey {
		return false
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return false
		}
	}
	return true
}

// codeKeyMalformed: the key is not a bounded sf-string.
const codeKeyMalformed = "KERNEL_VALIDATION_005"

// ErrKeyMalformed returns the 400 of a malformed idempotency key
// (KERNEL_VALIDATION_005).
func ErrKeyMalformed() *pipeline.Error {
	return pipeline.NewError(pipeline.KindValidation, codeKeyMalformed,
		"The idempotency key must be 1 to 255 printable ASCII characters "+
			"(over HTTP: a structured-field string, e.g. Idempotency-Key: \"8e03978e-40d5\").")
}
