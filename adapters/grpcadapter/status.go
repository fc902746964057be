package grpcadapter

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sundial-go/sundial/adapters/internal/outcome"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// defaultDomain is the google.rpc.ErrorInfo domain of the statuses the
// adapter writes when WithDomain is not given.
const defaultDomain = "sundial"

// Status returns the gRPC status of an outcome, or nil for a nil outcome
// (OK). Its code is [CodeFor] the outcome's kind, and its message the
// outcome's safe message. It carries a google.rpc.ErrorInfo. The reason is
// the outcome's stable code, and the domain is domain ("sundial" when
// empty). The metadata are the outcome's details as strings: numbers in
// decimal, durations in seconds, other values as JSON. A constraint
// outcome's failing fields go in a google.rpc.BadRequest instead of the
// metadata. An outcome with a retry-after ([pipeline.Error.RetryAfter])
// adds a google.rpc.RetryInfo with that delay. It also adds the metadata
// entry [outcome.DetailRetryAfter]. Both are in whole seconds, rounded up.
//
// Any error is an outcome: err is read with [pipeline.AsError]. So a
// context error is TIMEOUT or CANCELLED. A foreign error is UNEXPECTED,
// typed nils of any type included. An UNEXPECTED outcome carries only
// [pipeline.UnexpectedMessage] and its code. Neither the wrapped error's
// text nor its details nor a retry-after reach the caller.
//
// A status that an operation's handler or an application's own gRPC
// handler returned goes back as the handler wrote it, unless the
// pipeline replaced the outcome (see [Adapter.UnaryServerInterceptor]).
func Status(err error, domain string) *status.Status {
	if err == nil {
		return nil
	}
	e := pipeline.AsError(err)
	if hs, ok := e.Unwrap().(*handlerStatus); ok && hs != nil {
		// A status returned by a user's own gRPC handler (fromHandler)
		// that no middleware replaced.
		return hs.st
	}
	if own, ok := e.Unwrap().(interface{ HandlerStatus() *status.Status }); ok {
		// A status an operation's handler returned (status.Error).
		return own.HandlerStatus()
	}
	if domain == "" {
		domain = defaultDomain
	}
	kind := e.Kind()
	st := status.New(CodeFor(kind), outcome.SafeMessage(e))
	info := &errdetails.ErrorInfo{Reason: e.Code(), Domain: domain}
	details := []protoadapt.MessageV1{info}
	if kind != pipeline.KindUnexpected {
		safe := outcome.SafeDetails(e)
		if vs := operations.Violations(e); vs != nil {
			// The failing fields go in their typed form only.
			delete(safe, operations.DetailViolations)
			details = append(details, badRequest(vs))
		}
		secs, retry := outcome.RetryAfterSeconds(e)
		if len(safe) > 0 || retry {
			info.Metadata = make(map[string]string, len(safe)+1)
			for k, v := range safe {
				info.Metadata[k] = detailString(v)
			}
		}
		if retry {
			info.Metadata[outcome.DetailRetryAfter] = strconv.FormatInt(secs, 10)
			details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(time.Duration(secs) * time.Second)})
		}
	}
	if ws, err := st.WithDetails(details...); err == nil {
		st = ws
	}
	return st
}

// detailString renders one details value as ErrorInfo metadata: strings as
// they are, integers and floats in their shortest decimal form, booleans as
// "true"/"false", durations in seconds, nil as "", and anything else as
// compact JSON.
func detailString(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case bool:
		return strconv.FormatBool(x)
	case int:
		return strconv.Itoa(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case int32:
		return strconv.FormatInt(int64(x), 10)
	case uint64:
		return strconv.FormatUint(x, 10)
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case time.Duration:
		return strconv.FormatFloat(x.Seconds(), 'f', -1, 64)
	case fmt.Stringer:
		return x.String()
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// kindFor returns the outcome kind of a gRPC status code. It inverts
// [CodeFor] where CodeFor is one-to-one. InvalidArgument and OutOfRange are
// VALIDATION; FailedPrecondition is UNPROCESSABLE. AlreadyExists and
// Aborted are CONFLICT; Unavailable and ResourceExhausted are UNAVAILABLE.
// Every code without a kind of its own is UNEXPECTED: Unknown, Internal,
// Unimplemented, DataLoss.
func kindFor(c codes.Code) pipeline.Kind {
	if k, ok := grpcCodes.KindOf(c); ok {
		return k
	}
	return pipeline.KindUnexpected
}

// codePrefix prefixes the stable codes of outcomes made from the gRPC
// statuses of downstream calls: "GRPC_UNAVAILABLE", "GRPC_DEADLINE_EXCEEDED".
const codePrefix = "GRPC_"

// FromStatus converts the error of a gRPC call to an outcome. nil stays
// nil. An error without a gRPC status, or already a *pipeline.Error, is
// returned as it is. A status error becomes a *pipeline.Error of the
// code's kind (see below). Its code is "GRPC_<CODE>", e.g.
// GRPC_UNAVAILABLE, and its message the status message. Its details hold
// "grpcCode". A google.rpc.ErrorInfo adds "reason" and "domain". A
// google.rpc.RetryInfo gives that delay as its retry-after
// ([pipeline.Error.WithRetryAfter]). The result wraps the status error, so
// status.Code(err) still works on it. FromStatus never panics. An error
// whose methods do, such as a typed nil, is returned as it is.
//
// The client interceptors apply FromStatus to every failed call. So a
// downstream timeout is a TIMEOUT outcome, and a downstream that is down
// is UNAVAILABLE, instead of an UNEXPECTED error.
//
// The kind of a code is the inverse of [CodeFor] where CodeFor is
// one-to-one. InvalidArgument and OutOfRange are VALIDATION;
// FailedPrecondition is UNPROCESSABLE. AlreadyExists and Aborted are
// CONFLICT; Unavailable and ResourceExhausted are UNAVAILABLE. Unknown,
// Internal, Unimplemented and DataLoss are UNEXPECTED.
func FromStatus(err error) error {
	st, ok := foreignStatus(err)
	if !ok {
		return err
	}
	out := pipeline.Wrap(kindFor(st.Code()), codePrefix+codeName(st.Code()), st.Message(), err).
		WithDetail("grpcCode", st.Code().String())
	for _, d := range st.Details() {
		switch x := d.(type) {
		case *errdetails.ErrorInfo:
			out = out.WithDetail("reason", x.GetReason()).WithDetail("domain", x.GetDomain())
		case *errdetails.RetryInfo:
			if rd := x.GetRetryDelay(); rd != nil && rd.IsValid() && rd.AsDuration() >= 0 {
				out = out.WithRetryAfter(rd.AsDuration())
			}
		}
	}
	return out
}

// codeNames are the canonical upper-snake names of the codes whose String
// is not one in upper case.
var codeNames = map[codes.Code]string{
	codes.Canceled:           "CANCELLED",
	codes.DeadlineExceeded:   "DEADLINE_EXCEEDED",
	codes.InvalidArgument:    "INVALID_ARGUMENT",
	codes.NotFound:           "NOT_FOUND",
	codes.AlreadyExists:      "ALREADY_EXISTS",
	codes.PermissionDenied:   "PERMISSION_DENIED",
	codes.ResourceExhausted:  "RESOURCE_EXHAUSTED",
	codes.FailedPrecondition: "FAILED_PRECONDITION",
	codes.OutOfRange:         "OUT_OF_RANGE",
	codes.Unimplemented:      "UNIMPLEMENTED",
	codes.DataLoss:           "DATA_LOSS",
	codes.Unauthenticated:    "UNAUTHENTICATED",
}

// codeName is the canonical upper-snake name of a code: "DEADLINE_EXCEEDED".
func codeName(c codes.Code) string {
	if name, ok := codeNames[c]; ok {
		return name
	}
	return strings.ToUpper(c.String())
}

// handlerStatus carries a status that a user's own gRPC handler returned,
// so that Status can return it unchanged when nothing replaced it.
type handlerStatus struct {
	st *status.Status
}

func (h *handlerStatus) Error() string              { return h.st.Err().Error() }
func (h *handlerStatus) GRPCStatus() *status.Status { return h.st }

// fromHandler converts the error of a user's gRPC handler to an outcome
// that remembers the handler's status.
func fromHandler(err error) error {
	st, ok := foreignStatus(err)
	if !ok {
		return err // nil, an outcome, a plain error (UNEXPECTED), a context error or a typed nil
	}
	return pipeline.Wrap(kindFor(st.Code()), codePrefix+codeName(st.Code()), st.Message(), &handlerStatus{st: st})
}

// foreignStatus returns the gRPC status of err when err carries one and is
// not already an outcome. An error whose methods panic (a typed nil whose
// Unwrap, GRPCStatus or Error reads its receiver) carries none.
func foreignStatus(err error) (st *status.Status, ok bool) {
	if err == nil {
		return nil, false
	}
	defer func() {
		if recover() != nil {
			st, ok = nil, false
		}
	}()
	if _, isOutcome := errors.AsType[*pipeline.Error](err); isOutcome {
		return nil, false
	}
	return status.FromError(err)
}

// badRequest is the google.rpc.BadRequest detail of a constraint outcome:
// one FieldViolation per failing field, named by its proto field path,
// with the rule as reason and the message (which states the rule's
// parameter) as description.
func badRequest(vs []operations.Violation) *errdetails.BadRequest {
	br := &errdetails.BadRequest{FieldViolations: make([]*errdetails.BadRequest_FieldViolation, len(vs))}
	for i, v := range vs {
		br.FieldViolations[i] = &errdetails.BadRequest_FieldViolation{Field: v.Field, Description: v.Message, Reason: v.Rule}
	}
	return br
}
