package grpcadapter

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundial-go/sundial/adapters/internal/rpccall"
	"github.com/sundial-go/sundial/pipeline"
)

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
func Status(err error, domain string) *status.Status { return rpccall.Status(err, domain) }

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
func FromStatus(err error) error { return rpccall.FromStatus(err) }

// kindFor returns the outcome kind of a gRPC status code (see FromStatus).
var kindFor = rpccall.KindFor

// fromHandler converts the error of a user's gRPC handler to an outcome
// that remembers the handler's status.
var fromHandler = rpccall.FromHandler

// CodeFor returns the gRPC status code of an outcome kind, from the outcome
// table of docs/pipeline.md. CONFLICT maps to AlreadyExists and
// UNPROCESSABLE to FailedPrecondition. UNEXPECTED, and any value outside
// the closed set of kinds, maps to Internal.
func CodeFor(k pipeline.Kind) codes.Code { return rpccall.CodeFor(k) }

// defaultDomain is the google.rpc.ErrorInfo domain of the statuses the
// adapter writes when WithDomain is not given.
const defaultDomain = rpccall.DefaultDomain
