package rpccall

import (
	"encoding/json"
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundial-go/sundial/adapters/internal/outcome"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// This file reads the outcome back from the status of a call: what a
// client of a Sundial server, or of any gRPC or Connect server, gets.

// KindFor returns the outcome kind of a gRPC status code: see
// [operations.CodeOutcome]. It inverts CodeFor where CodeFor is
// one-to-one.
func KindFor(c codes.Code) pipeline.Kind {
	kind, _ := operations.CodeOutcome(c)
	return kind
}

// FromStatus converts the error of a gRPC call to an outcome: see the gRPC
// adapter's FromStatus.
func FromStatus(err error) error {
	st, ok := foreignStatus(err)
	if !ok {
		return err
	}
	kind, code := operations.CodeOutcome(st.Code())
	out := pipeline.Wrap(kind, code, st.Message(), err).
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

// FromHandler converts the error of a user's gRPC handler to an outcome
// that remembers the handler's status.
func FromHandler(err error) error {
	st, ok := foreignStatus(err)
	if !ok {
		return err // nil, an outcome, a plain error (UNEXPECTED), a context error or a typed nil
	}
	kind, code := operations.CodeOutcome(st.Code())
	return pipeline.Wrap(kind, code, st.Message(), &HandlerStatus{St: st})
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

// Answer returns the outcome a server's status carries: the inverse of
// Status for a Sundial server. A status without an ErrorInfo reason, or
// an error without a status, is FromStatus's.
func Answer(err error) (out error) {
	defer func() {
		if recover() != nil {
			out = FromStatus(err) // a typed nil in the chain: FromStatus leaves it as it is
		}
	}()
	gs, ok := errors.AsType[interface {
		error
		GRPCStatus() *status.Status
	}](err)
	if !ok {
		return FromStatus(err)
	}
	st := gs.GRPCStatus()
	var (
		info  *errdetails.ErrorInfo
		retry *errdetails.RetryInfo
	)
	for _, d := range st.Details() {
		switch x := d.(type) {
		case *errdetails.ErrorInfo:
			info = x
		case *errdetails.RetryInfo:
			retry = x
		}
	}
	if info == nil || info.GetReason() == "" {
		return FromStatus(err)
	}
	e := pipeline.Wrap(KindFor(st.Code()), info.GetReason(), st.Message(), err)
	for k, v := range info.GetMetadata() {
		if k != outcome.DetailRetryAfter {
			e = e.WithDetail(k, metadataValue(v))
		}
	}
	if rd := retry.GetRetryDelay(); rd != nil && rd.IsValid() && rd.AsDuration() >= 0 {
		e = e.WithRetryAfter(rd.AsDuration())
	}
	return e
}

// metadataValue reads back a details value that Status wrote as a string:
// a number, a boolean, an object or an array as JSON, anything else as the
// string.
func metadataValue(s string) any {
	var v any
	if json.Unmarshal([]byte(s), &v) == nil {
		switch v.(type) {
		case float64, bool, map[string]any, []any:
			return v
		}
	}
	return s
}
