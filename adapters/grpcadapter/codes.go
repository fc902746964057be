package grpcadapter

import (
	"google.golang.org/grpc/codes"

	"github.com/sundial-go/sundial/pipeline"
)

// CodeFor returns the gRPC status code of an outcome kind, as the outcome
// table of docs/pipeline.md gives it. CONFLICT maps to AlreadyExists, UNPROCESSABLE to FailedPrecondition;
// UNEXPECTED, and any value outside the closed set of kinds, to Internal.
func CodeFor(k pipeline.Kind) codes.Code {
	switch k {
	case pipeline.KindOK:
		return codes.OK
	case pipeline.KindValidation:
		return codes.InvalidArgument
	case pipeline.KindUnauthenticated:
		return codes.Unauthenticated
	case pipeline.KindForbidden:
		return codes.PermissionDenied
	case pipeline.KindNotFound:
		return codes.NotFound
	case pipeline.KindConflict:
		return codes.AlreadyExists
	case pipeline.KindUnprocessable:
		return codes.FailedPrecondition
	case pipeline.KindCanceled:
		return codes.Canceled
	case pipeline.KindTimeout:
		return codes.DeadlineExceeded
	case pipeline.KindUnavailable:
		return codes.Unavailable
	}
	return codes.Internal
}
