package operations

import (
	"errors"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundial-go/sundial/pipeline"
)

// ownStatus is a handler's error that carries an RPC status of its own,
// such as one made by status.Error. The gRPC and Connect adapters answer
// it with exactly that status: code, message and details.
type ownStatus struct {
	err error
	st  *status.Status
}

func (o *ownStatus) Error() string              { return pipeline.ErrorText(o.err) }
func (o *ownStatus) Unwrap() error              { return o.err }
func (o *ownStatus) GRPCStatus() *status.Status { return o.st }

// HandlerStatus returns the status the handler answered with.
func (o *ownStatus) HandlerStatus() *status.Status { return o.st }

// statusOutcome returns the outcome of a handler's error err. An error
// that carries an RPC status (a GRPCStatus method) with a code other
// than OK is the code's outcome (CodeOutcome), with the status message.
// Any other error is returned as it is.
func statusOutcome(err error) error {
	st, ok := rpcStatus(err)
	if !ok {
		return err
	}
	kind, code := CodeOutcome(st.Code())
	return pipeline.Wrap(kind, code, st.Message(), &ownStatus{err: err, st: st})
}

// rpcStatus returns the status err carries itself: a handler's own
// status.Error, not one wrapped in another error, whose text the caller
// must not see. It reports none when err is nil, carries a nil status or
// OK, or is an outcome already. A method of err that panics (a typed nil)
// means no status.
func rpcStatus(err error) (st *status.Status, ok bool) {
	defer func() {
		if recover() != nil {
			st, ok = nil, false
		}
	}()
	carrier, is := err.(interface{ GRPCStatus() *status.Status })
	if !is || errors.As(err, new(*pipeline.Error)) {
		return nil, false
	}
	if st = carrier.GRPCStatus(); st == nil || st.Code() == codes.OK {
		return nil, false
	}
	return st, true
}

// CodeOutcome returns the outcome kind of RPC status code c and the
// stable code of its outcome: GRPC_ and the code's canonical name, such
// as GRPC_DEADLINE_EXCEEDED. OK is [pipeline.KindOK]. InvalidArgument and
// OutOfRange are VALIDATION; AlreadyExists and Aborted are CONFLICT;
// ResourceExhausted and Unavailable are UNAVAILABLE. Unknown, Internal,
// Unimplemented, DataLoss and any other code are UNEXPECTED: failures
// for the circuit breaker.
func CodeOutcome(c codes.Code) (pipeline.Kind, string) {
	if c < codes.Code(len(rpcCodes)) {
		o := rpcCodes[c]
		return o.kind, o.code
	}
	return pipeline.KindUnexpected, "GRPC_" + strings.ToUpper(c.String())
}

// rpcCodes is the outcome kind and stable code of each canonical RPC
// status code, indexed by the code.
var rpcCodes = [...]struct {
	kind pipeline.Kind
	code string
}{
	codes.OK:                 {pipeline.KindOK, "GRPC_OK"},
	codes.Canceled:           {pipeline.KindCanceled, "GRPC_CANCELLED"},
	codes.Unknown:            {pipeline.KindUnexpected, "GRPC_UNKNOWN"},
	codes.InvalidArgument:    {pipeline.KindValidation, "GRPC_INVALID_ARGUMENT"},
	codes.DeadlineExceeded:   {pipeline.KindTimeout, "GRPC_DEADLINE_EXCEEDED"},
	codes.NotFound:           {pipeline.KindNotFound, "GRPC_NOT_FOUND"},
	codes.AlreadyExists:      {pipeline.KindConflict, "GRPC_ALREADY_EXISTS"},
	codes.PermissionDenied:   {pipeline.KindForbidden, "GRPC_PERMISSION_DENIED"},
	codes.ResourceExhausted:  {pipeline.KindUnavailable, "GRPC_RESOURCE_EXHAUSTED"},
	codes.FailedPrecondition: {pipeline.KindUnprocessable, "GRPC_FAILED_PRECONDITION"},
	codes.Aborted:            {pipeline.KindConflict, "GRPC_ABORTED"},
	codes.OutOfRange:         {pipeline.KindValidation, "GRPC_OUT_OF_RANGE"},
	codes.Unimplemented:      {pipeline.KindUnexpected, "GRPC_UNIMPLEMENTED"},
	codes.Internal:           {pipeline.KindUnexpected, "GRPC_INTERNAL"},
	codes.Unavailable:        {pipeline.KindUnavailable, "GRPC_UNAVAILABLE"},
	codes.DataLoss:           {pipeline.KindUnexpected, "GRPC_DATA_LOSS"},
	codes.Unauthenticated:    {pipeline.KindUnauthenticated, "GRPC_UNAUTHENTICATED"},
}
