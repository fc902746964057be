package rpccall

import (
	"encoding/json"
	"fmt"
	"strconv"
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

// DefaultDomain is the google.rpc.ErrorInfo domain of the statuses the
// adapter writes when WithDomain is not given.
const DefaultDomain = "sundial"

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
// pipeline replaced the outcome (see the gRPC adapter's interceptors).
func Status(err error, domain string) *status.Status {
	if err == nil {
		return nil
	}
	e := pipeline.AsError(err)
	if hs, ok := e.Unwrap().(*HandlerStatus); ok && hs != nil {
		// A status returned by a user's own gRPC handler (fromHandler)
		// that no middleware replaced.
		return hs.St
	}
	if own, ok := e.Unwrap().(interface{ HandlerStatus() *status.Status }); ok {
		// A status an operation's handler returned (status.Error).
		return own.HandlerStatus()
	}
	if domain == "" {
		domain = DefaultDomain
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

// HandlerStatus carries a status that a user's own gRPC handler returned,
// so that Status can return it unchanged when nothing replaced it.
type HandlerStatus struct {
	St *status.Status
}

func (h *HandlerStatus) Error() string              { return h.St.Err().Error() }
func (h *HandlerStatus) GRPCStatus() *status.Status { return h.St }

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

// StatusCode is the gRPC code the outcome err (nil: success) is answered
// with, as a number (kernel.Transport.Status).
func StatusCode(err error) int {
	if err == nil {
		return int(codes.OK)
	}
	e := pipeline.AsError(err)
	if hs, ok := e.Unwrap().(*HandlerStatus); ok && hs != nil {
		return int(hs.St.Code())
	}
	if own, ok := e.Unwrap().(interface{ HandlerStatus() *status.Status }); ok {
		return int(own.HandlerStatus().Code())
	}
	return int(CodeFor(e.Kind()))
}
