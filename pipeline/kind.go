package pipeline

// Kind is the closed set of outcome categories. Every outcome of every call
// has exactly one Kind; adapters translate a Kind to their protocol (HTTP
// status, gRPC code, CLI exit code) in one function each.
type Kind uint8

// The kinds, in the order of the outcome table (docs/pipeline.md).
const (
	// KindOK is success: the error is nil.
	KindOK Kind = iota
	// KindValidation: the input was malformed or failed validation.
	KindValidation
	// KindUnauthenticated: the caller is not known.
	KindUnauthenticated
	// KindForbidden: the caller is known but may not do this.
	KindForbidden
	// KindNotFound: the addressed resource does not exist.
	KindNotFound
	// KindConflict: the call conflicts with the current state.
	KindConflict
	// KindUnprocessable: the request is well-formed but cannot be processed
	// as sent, e.g. an idempotency key reused with a different input
	// (docs/idempotency.md).
	KindUnprocessable
	// KindCanceled: the caller gave up before the deadline fired.
	KindCanceled
	// KindTimeout: the invocation's deadline fired (or a downstream timed
	// out). Side effects may have happened.
	KindTimeout
	// KindUnavailable: the call was rejected by a limit or a dependency is
	// down; retrying later may succeed.
	KindUnavailable
	// KindUnexpected: an unhandled error or a panic. Its message never
	// reaches the caller.
	KindUnexpected

	numKinds
)

var kindNames = [numKinds]string{
	KindOK:              "OK",
	KindValidation:      "VALIDATION",
	KindUnauthenticated: "UNAUTHENTICATED",
	KindForbidden:       "FORBIDDEN",
	KindNotFound:        "NOT_FOUND",
	KindConflict:        "CONFLICT",
	KindUnprocessable:   "UNPROCESSABLE",
	KindCanceled:        "CANCELLED",
	KindTimeout:         "TIMEOUT",
	KindUnavailable:     "UNAVAILABLE",
	KindUnexpected:      "UNEXPECTED",
}

// String returns the kind's upper-case name, e.g. "UNAVAILABLE". An unknown
// value prints as "UNEXPECTED".
func (k Kind) String() string {
	if k >= numKinds {
		return kindNames[KindUnexpected]
	}
	return kindNames[k]
}
