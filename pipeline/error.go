package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"strconv"
	"strings"
	"time"
)

// Stable codes of the outcomes the framework itself produces. Applications
// use codes of their own (e.g. "SHOP_UNAVAILABLE_001").
const (
	CodeTimeout            = "KERNEL_TIMEOUT_001"
	CodeCancelled          = "KERNEL_CANCELLED_001"
	CodeUnexpected         = "KERNEL_UNEXPECTED_001"
	CodeValidation         = "KERNEL_VALIDATION_001"
	CodeBadDeadline        = "KERNEL_VALIDATION_002"
	CodeNotFound           = "KERNEL_NOT_FOUND_001"
	CodeRateLimited        = "KERNEL_UNAVAILABLE_002"
	CodeConcurrencyLimited = "KERNEL_UNAVAILABLE_003"
	CodeCircuitOpen        = "KERNEL_UNAVAILABLE_004"
)

// UnexpectedMessage is the only text a caller ever sees for an UNEXPECTED
// outcome; the real error goes to the log.
const UnexpectedMessage = "An unexpected error occurred."

// Error is the outcome of a failed invocation: a Kind, a stable Code, a
// human Message that may reach the caller, Details (a small map of
// JSON-encodable values, e.g. "id" and "retryAfter") and an optional wrapped
// cause that never reaches the caller.
//
// Error values are immutable once returned from a constructor's With methods
// chain; share them freely.
type Error struct {
	Kind    Kind
	Code    string
	Message string
	Details map[string]any
	cause   error
}

// NewError returns an error of the given kind, code and message.
func NewError(kind Kind, code, message string) *Error {
	return &Error{Kind: kind, Code: code, Message: message}
}

// Errorf is NewError with a formatted message.
func Errorf(kind Kind, code, format string, args ...any) *Error {
	return &Error{Kind: kind, Code: code, Message: fmt.Sprintf(format, args...)}
}

// Wrap returns an error of the given kind and code that wraps cause, so that
// errors.Is and errors.As see through it. The cause's text is not part of
// Message.
func Wrap(kind Kind, code, message string, cause error) *Error {
	return &Error{Kind: kind, Code: code, Message: message, cause: cause}
}

// Convenience constructors, one per failure kind.

// Validation returns a VALIDATION error.
func Validation(code, message string) *Error { return NewError(KindValidation, code, message) }

// NotFound returns a NOT_FOUND error.
func NotFound(code, message string) *Error { return NewError(KindNotFound, code, message) }

// Conflict returns a CONFLICT error.
func Conflict(code, message string) *Error { return NewError(KindConflict, code, message) }

// Forbidden returns a FORBIDDEN error.
func Forbidden(code, message string) *Error { return NewError(KindForbidden, code, message) }

// Unauthenticated returns an UNAUTHENTICATED error.
func Unauthenticated(code, message string) *Error {
	return NewError(KindUnauthenticated, code, message)
}

// Unavailable returns an UNAVAILABLE error.
func Unavailable(code, message string) *Error { return NewError(KindUnavailable, code, message) }

// Timeout returns a TIMEOUT error.
func Timeout(code, message string) *Error { return NewError(KindTimeout, code, message) }

// Cancelled returns a CANCELLED error.
func Cancelled(code, message string) *Error { return NewError(KindCancelled, code, message) }

// Error implements error as "CODE: message".
func (e *Error) Error() string {
	if e.cause != nil {
		return e.Code + ": " + e.Message + ": " + e.cause.Error()
	}
	return e.Code + ": " + e.Message
}

// Unwrap returns the wrapped cause, if any.
func (e *Error) Unwrap() error { return e.cause }

// WithDetail returns a copy of e with details[key] = value.
func (e *Error) WithDetail(key string, value any) *Error {
	c := *e
	c.Details = make(map[string]any, len(e.Details)+1)
	maps.Copy(c.Details, e.Details)
	c.Details[key] = value
	return &c
}

// WithCause returns a copy of e wrapping cause.
func (e *Error) WithCause(cause error) *Error {
	c := *e
	c.cause = cause
	return &c
}

// Detail returns details[key].
func (e *Error) Detail(key string) (any, bool) {
	v, ok := e.Details[key]
	return v, ok
}

// SafeMessage returns the message a caller may see: Message, except for
// UNEXPECTED, which is always [UnexpectedMessage].
func (e *Error) SafeMessage() string {
	if e.Kind == KindUnexpected || e.Kind >= numKinds {
		return UnexpectedMessage
	}
	return e.Message
}

// Timeout and cancellation outcomes are shared values: the hot path does not
// allocate them.
var (
	errTimeout   = NewError(KindTimeout, CodeTimeout, "The invocation's deadline was exceeded.")
	errCancelled = NewError(KindCancelled, CodeCancelled, "The caller cancelled the invocation.")
	errTypedNil  = Wrap(KindUnexpected, CodeUnexpected, UnexpectedMessage, errors.New("pipeline: a nil *pipeline.Error was returned as a non-nil error"))
)

// ErrTimeout returns the framework's TIMEOUT outcome (KERNEL_TIMEOUT_001).
func ErrTimeout() *Error { return errTimeout }

// ErrCancelled returns the framework's CANCELLED outcome (KERNEL_CANCELLED_001).
func ErrCancelled() *Error { return errCancelled }

// KindOf classifies any error. It is total: nil is OK, an [*Error] anywhere
// in the chain gives its Kind, context.DeadlineExceeded is TIMEOUT,
// context.Canceled is CANCELLED, anything else is UNEXPECTED — including a
// nil *Error returned as a non-nil error.
func KindOf(err error) Kind {
	if err == nil {
		return KindOK
	}
	if e, ok := errors.AsType[*Error](err); ok {
		if e == nil {
			return KindUnexpected
		}
		return e.Kind
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return KindTimeout
	case errors.Is(err, context.Canceled):
		return KindCancelled
	}
	return KindUnexpected
}

// AsError converts any non-nil error to an [*Error]: an *Error in the chain
// is returned as it is (an already-coded error is never overwritten);
// context errors become the framework's TIMEOUT/CANCELLED outcomes wrapping
// them; anything else becomes UNEXPECTED wrapping it. AsError(nil) is nil.
// A nil *Error returned as a non-nil error (a typed nil) becomes an
// UNEXPECTED outcome that does not wrap it (its Error method would
// dereference nil).
func AsError(err error) *Error {
	if err == nil {
		return nil
	}
	if e, ok := errors.AsType[*Error](err); ok {
		if e == nil {
			return errTypedNil
		}
		return e
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return errTimeout.WithCause(err)
	case errors.Is(err, context.Canceled):
		return errCancelled.WithCause(err)
	}
	return Wrap(KindUnexpected, CodeUnexpected, UnexpectedMessage, err)
}

// CodeOf returns the code of AsError(err), or "" for nil.
func CodeOf(err error) string {
	if err == nil {
		return ""
	}
	return AsError(err).Code
}

// DetailRetryAfter is the details key of a retry hint: whole seconds after
// which a retry may succeed (rejections by a rate limit or an open breaker
// carry it).
const DetailRetryAfter = "retryAfter"

// RetryAfter reads details["retryAfter"] as a delay. It accepts a number of
// seconds of any integer or float type, a json.Number, a decimal string or
// a time.Duration; absent, negative, NaN and absurdly large (over 1e9 s)
// values report false. Adapters turn it into their protocol's retry hint
// (HTTP Retry-After, gRPC RetryInfo).
func (e *Error) RetryAfter() (time.Duration, bool) {
	v, ok := e.Details[DetailRetryAfter]
	if !ok {
		return 0, false
	}
	var secs float64
	switch x := v.(type) {
	case time.Duration:
		secs = x.Seconds()
	case int:
		secs = float64(x)
	case int64:
		secs = float64(x)
	case int32:
		secs = float64(x)
	case uint64:
		secs = float64(x)
	case float64:
		secs = x
	case float32:
		secs = float64(x)
	case json.Number:
		f, err := x.Float64()
		if err != nil {
			return 0, false
		}
		secs = f
	case string:
		f, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
		if err != nil {
			return 0, false
		}
		secs = f
	default:
		return 0, false
	}
	if math.IsNaN(secs) || secs < 0 || secs > 1e9 {
		return 0, false
	}
	return time.Duration(secs * float64(time.Second)), true
}
