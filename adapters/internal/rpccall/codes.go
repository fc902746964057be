package rpccall

import (
	"google.golang.org/grpc/codes"

	"github.com/sundial-go/sundial/adapters/internal/outcome"
	"github.com/sundial-go/sundial/pipeline"
)

// codeOf is the outcome table's gRPC column: the code a server answers
// each kind with. The kind a code reads as is [operations.CodeOutcome]'s.
var codeOf = outcome.NewTable(codes.Internal, map[pipeline.Kind]codes.Code{
	pipeline.KindOK:              codes.OK,
	pipeline.KindValidation:      codes.InvalidArgument,
	pipeline.KindUnauthenticated: codes.Unauthenticated,
	pipeline.KindForbidden:       codes.PermissionDenied,
	pipeline.KindNotFound:        codes.NotFound,
	pipeline.KindConflict:        codes.AlreadyExists,
	pipeline.KindUnprocessable:   codes.FailedPrecondition,
	pipeline.KindCanceled:        codes.Canceled,
	pipeline.KindTimeout:         codes.DeadlineExceeded,
	pipeline.KindUnavailable:     codes.Unavailable,
}, nil)

// CodeFor returns the gRPC status code of an outcome kind, from the outcome
// table of docs/pipeline.md. CONFLICT maps to AlreadyExists and
// UNPROCESSABLE to FailedPrecondition. UNEXPECTED, and any value outside
// the closed set of kinds, maps to Internal.
func CodeFor(k pipeline.Kind) codes.Code {
	return codeOf.For(k)
}
