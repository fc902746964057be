package cliadapter

import "github.com/sundial-go/sundial/pipeline"

// Exit codes of the command line, one per outcome kind (the outcome table
// of docs/pipeline.md, shared with the HTTP status and the gRPC code).
const (
	ExitOK          = 0
	ExitUnexpected  = 1
	ExitValidation  = 2 // also usage errors
	ExitNotFound    = 3
	ExitDenied      = 4 // UNAUTHENTICATED and FORBIDDEN
	ExitConflict    = 5
	ExitUnavailable = 6
	ExitTimeout     = 7
	ExitCanceled    = 8 // CANCELLED
	// ExitUnprocessable: UNPROCESSABLE (an idempotency key reused with
	// another input).
	ExitUnprocessable = 9
)

// ExitCodeFor returns the process exit code of an outcome kind. A kind
// outside the closed set is UNEXPECTED.
func ExitCodeFor(k pipeline.Kind) int {
	switch k {
	case pipeline.KindOK:
		return ExitOK
	case pipeline.KindValidation:
		return ExitValidation
	case pipeline.KindUnauthenticated, pipeline.KindForbidden:
		return ExitDenied
	case pipeline.KindNotFound:
		return ExitNotFound
	case pipeline.KindConflict:
		return ExitConflict
	case pipeline.KindUnprocessable:
		return ExitUnprocessable
	case pipeline.KindCanceled:
		return ExitCanceled
	case pipeline.KindTimeout:
		return ExitTimeout
	case pipeline.KindUnavailable:
		return ExitUnavailable
	}
	return ExitUnexpected
}
