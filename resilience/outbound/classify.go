package outbound

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundial-go/sundial/pipeline"
)

// class is what an attempt's outcome allows.
type class uint8

const (
	final     class = iota // success or an answer not to retry
	retryable              // the downstream did not act on it
	ambiguous              // it may have acted: retry only with a key
)

// notSent marks an error of an attempt that put nothing on the wire.
type notSent struct{ err error }

func (e *notSent) Error() string { return e.err.Error() }
func (e *notSent) Unwrap() error { return e.err }
func (e *notSent) NotSent() bool { return true }

// NotSent returns err marked as the failure of an attempt that sent nothing
// (eg the dial failed). [Dependency.Do] retries it without an idempotency
// key. Clients call it when they know; nil stays nil. Any error in the chain
// with a method NotSent() bool that returns true counts alike. So a client
// package can mark its errors without importing this one (httpadapter does).
// The opposite mark, a method NoRetry() bool that returns true, makes an
// outcome final. grpcadapter sets it when the server's grpc-retry-pushback-ms
// asks not to retry.
func NotSent(err error) error {
	if err == nil {
		return nil
	}
	return &notSent{err: err}
}

// classify judges the outcome err of an attempt of a call whose own context
// is parent (still live). It returns the downstream's retry-after.
func classify(err error) (class, time.Duration, bool) {
	if err == nil {
		return final, 0, false
	}
	if ns, ok := errors.AsType[interface {
		error
		NotSent() bool
	}](err); (ok && ns.NotSent()) || errors.Is(err, syscall.ECONNREFUSED) {
		return retryable, 0, false
	}
	if nr, ok := errors.AsType[interface {
		error
		NoRetry() bool
	}](err); ok && nr.NoRetry() {
		return final, 0, false // the server asked not to be retried (gRPC pushback)
	}
	if e, ok := errors.AsType[*pipeline.Error](err); ok {
		ra, has := e.RetryAfter()
		switch e.Kind() {
		case pipeline.KindUnavailable:
			return retryable, ra, has
		case pipeline.KindTimeout, pipeline.KindUnexpected:
			return ambiguous, ra, has
		}
		return final, 0, false
	}
	if st, ok := grpcStatus(err); ok {
		switch st.Code() {
		case codes.Unavailable:
			return retryable, 0, false
		case codes.DeadlineExceeded, codes.Unknown, codes.Internal:
			return ambiguous, 0, false
		}
		return final, 0, false
	}
	if errors.Is(err, context.Canceled) {
		return final, 0, false
	}
	return ambiguous, 0, false // a reset, an EOF, an attempt's own timeout
}

// unanswered reports whether err says that the dependency gave no answer.
// Nothing was sent (NotSent). The connection was refused, reset, aborted or
// closed before an answer (EOF). The network or the host could not be
// reached, or its name not resolved. A gRPC Unavailable status without
// details counts too: grpc-go reports such a failure that way. A timeout, a
// context's end and any other outcome are answers of a kind, or the caller's
// own; they do not count.
func unanswered(err error) (yes bool) {
	defer func() {
		if recover() != nil {
			yes = false // a typed nil in the chain: say nothing about it
		}
	}()
	if st, ok := grpcStatus(err); ok {
		return st.Code() == codes.Unavailable && len(st.Details()) == 0
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if _, ok := errors.AsType[*pipeline.Error](err); ok {
		return false
	}
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return false
	}
	if ns, ok := errors.AsType[interface {
		error
		NotSent() bool
	}](err); ok && ns.NotSent() {
		return true
	}
	for _, e := range [...]error{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED,
		syscall.EPIPE, syscall.ENETUNREACH, syscall.EHOSTUNREACH, io.EOF, io.ErrUnexpectedEOF} {
		if errors.Is(err, e) {
			return true
		}
	}
	_, dns := errors.AsType[*net.DNSError](err)
	return dns
}

// grpcStatus returns the gRPC status err carries, if any; an error whose
// methods panic (a typed nil) carries none.
func grpcStatus(err error) (st *status.Status, ok bool) {
	defer func() {
		if recover() != nil {
			st, ok = nil, false
		}
	}()
	if _, has := errors.AsType[interface {
		error
		GRPCStatus() *status.Status
	}](err); !has {
		return nil, false
	}
	return status.FromError(err)
}
