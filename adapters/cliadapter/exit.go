package cliadapter

import "github.com/sundial-go/sundial/pipeline"

// Exit codes of the command line (DESIGN.md's outcome table).
const (
	ExitOK          = 0
	ExitUnexpected  = 1
	ExitValidation  = 2 // also usage errors
	ExitNotFound    = 3
	ExitDenied      = 4 // UNAUTHENTICATED and FORBIDDEN
	ExitConflict    = 5
	ExitUnavailable = 6
	ExitTimeout     = 7
	ExitCancelled   = 8
)

// ExitCodeFor returns the process exit code of an outcome kind.
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
	case pipeline.KindCancelled:
		return ExitCancelled
	case pipeline.KindTimeout:
		return ExitTimeout
	case pipeline.KindUnavailable:
		return ExitUnavailable
	}
	return ExitUnexpected
}
