package operations

import (
	"errors"
	"strings"
	"unicode"

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
// than OK is an outcome of the code's kind (statusKind), coded
// GRPC_<CODE>, with the status message. Any other error is returned as
// it is.
func statusOutcome(err error) error {
	st, ok := rpcStatus(err)
	if !ok {
		return err
	}
	return pipeline.Wrap(statusKind(st.Code()), "GRPC_"+codeName(st.Code()), st.Message(),
		&ownStatus{err: err, st: st})
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

// statusKind returns the outcome kind of an RPC status code. Unknown,
// Internal, Unimplemented, DataLoss and any other code count as
// UNEXPECTED: they are failures for the circuit breaker.
func statusKind(c codes.Code) pipeline.Kind {
	switch c {
	case codes.Canceled:
		return pipeline.KindCanceled
	case codes.DeadlineExceeded:
		return pipeline.KindTimeout
	case codes.InvalidArgument, codes.OutOfRange:
		return pipeline.KindValidation
	case codes.NotFound:
		return pipeline.KindNotFound
	case codes.AlreadyExists, codes.Aborted:
		return pipeline.KindConflict
	case codes.PermissionDenied:
		return pipeline.KindForbidden
	case codes.Unauthenticated:
		return pipeline.KindUnauthenticated
	case codes.FailedPrecondition:
		return pipeline.KindUnprocessable
	case codes.ResourceExhausted, codes.Unavailable:
		return pipeline.KindUnavailable
	}
	return pipeline.KindUnexpected
}

// codeName returns c's canonical name in upper snake case, such as
// RESOURCE_EXHAUSTED.
func codeName(c codes.Code) string {
	if c == codes.Canceled {
		return "CANCELLED"
	}
	var b strings.Builder
	for i, r := range c.String() {
		if i > 0 && unicode.IsUpper(r) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToUpper(r))
	}
	return b.String()
}
