package pipeline

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"time"
)

// The codes of the pipeline's own outcomes. Applications use codes of
// their own (e.g. "SHOP_UNAVAILABLE_001"). The wire spelling of the
// cancellation code is British ("CANCELLED"); identifiers use Go's. Every
// other code belongs to the package that produces it.
const (
	CodeTimeout    = "KERNEL_TIMEOUT_001"
	CodeCanceled   = "KERNEL_CANCELLED_001"
	CodeUnexpected = "KERNEL_UNEXPECTED_001"
	CodeValidation = "KERNEL_VALIDATION_001"
)

// UnexpectedMessage is the only text a caller ever sees for an UNEXPECTED
// outcome; the real error goes to the log.
const UnexpectedMessage = "An unexpected error occurred."

// Error is the outcome of a failed invocation. It has a [Kind], a stable
// code and a human message that may reach the caller. It may have details
// (a small map of JSON-encodable values, e.g. "id") and a retry-after.
// It may wrap a cause, which never reaches the caller.
//
// An Error cannot be changed once made: the With methods return changed
// copies, and [Error.Details] returns a copy of the details. Share Error
// values freely, between goroutines too.
//
// Its kind is always one of the closed set of [Kind] values but KindOK:
// constructors given any other kind make an UNEXPECTED error. An
// UNEXPECTED error shows callers nothing of its message, details or cause:
// the adapters send [UnexpectedMessage] and no details.
type Error struct {
	kind       Kind
	code       string
	message    string
	details    map[string]any // never written after the Error is made
	retryAfter time.Duration
	hasRetry   bool
	cause      error
}

// NewError returns an error of the given kind, code and message.
func NewError(kind Kind, code, message string) *Error {
	if kind == KindOK || kind >= numKinds {
		kind = KindUnexpected
	}
	return &Error{kind: kind, code: code, message: message}
}

// Wrap returns an error of the given kind and code that wraps cause, so that
// errors.Is and errors.As see through it. The cause's text is not part of
// the message.
func Wrap(kind Kind, code, message string, cause error) *Error {
	e := NewError(kind, code, message)
	e.cause = cause
	return e
}

// Kind returns the error's kind: KindUnexpected for a nil *Error and for
// one not made by a constructor (the zero Error, new(pipeline.Error)),
// whose kind would otherwise read as success.
func (e *Error) Kind() Kind {
	if e == nil || e.kind == KindOK || e.kind >= numKinds {
		return KindUnexpected
	}
	return e.kind
}

// Code returns the error's stable code (KERNEL_UNEXPECTED_001 for a nil
// *Error and for one without a code).
func (e *Error) Code() string {
	if e == nil || e.code == "" {
		return CodeUnexpected
	}
	return e.code
}

// Message returns the error's message as made. For an UNEXPECTED error,
// callers see [UnexpectedMessage] instead.
func (e *Error) Message() string {
	if e == nil {
		return UnexpectedMessage
	}
	return e.message
}

// Error returns "CODE: message" and, when the error wraps a cause, ": "
// and the cause's text. A cause whose Error method panics (a typed nil
// whose method reads its receiver) is shown by its type.
func (e *Error) Error() string {
	if e == nil {
		return CodeUnexpected + ": " + UnexpectedMessage
	}
	if e.cause != nil {
		return e.code + ": " + e.message + ": " + ErrorText(e.cause)
	}
	return e.code + ": " + e.message
}

// Unwrap returns the wrapped cause, or nil.
func (e *Error) Unwrap() error {
	if e == nil {
		return nil
	}
	return e.cause
}

// Details returns a copy of the error's details (nil when it has none).
func (e *Error) Details() map[string]any {
	if e == nil || len(e.details) == 0 {
		return nil
	}
	return maps.Clone(e.details)
}

// WithDetail returns a copy of e with the detail key set to value. The
// retry-after is not a detail: set it with WithRetryAfter.
func (e *Error) WithDetail(key string, value any) *Error {
	c := *e
	c.details = make(map[string]any, len(e.details)+1)
	maps.Copy(c.details, e.details)
	c.details[key] = value
	return &c
}

// withCause returns a copy of e wrapping cause.
func (e *Error) withCause(cause error) *Error {
	c := *e
	c.cause = cause
	return &c
}

// WithRetryAfter returns a copy of e telling the caller to retry after d
// (negative: no retry-after). Adapters send it as an HTTP Retry-After
// header and details.retryAfter, a gRPC google.rpc.RetryInfo and
// details.retryAfter, in whole seconds rounded up and at least 1.
func (e *Error) WithRetryAfter(d time.Duration) *Error {
	c := *e
	c.retryAfter, c.hasRetry = max(d, 0), d >= 0
	return &c
}

// RetryAfter returns the retry-after and whether the error has one.
func (e *Error) RetryAfter() (time.Duration, bool) {
	if e == nil || !e.hasRetry {
		return 0, false
	}
	return e.retryAfter, true
}

var (
	errTimeout  = NewError(KindTimeout, CodeTimeout, "The invocation's deadline was exceeded.")
	errCanceled = NewError(KindCanceled, CodeCanceled, "The caller canceled the invocation.")
)

// ErrTimeout returns the TIMEOUT outcome of an invocation whose deadline
// passed (KERNEL_TIMEOUT_001).
func ErrTimeout() *Error { return errTimeout }

// ErrCanceled returns the CANCELLED outcome of an invocation its caller
// abandoned (KERNEL_CANCELLED_001).
func ErrCanceled() *Error { return errCanceled }

// errTypedNil is the outcome of a typed nil returned as an error.
func errTypedNil(err error) *Error {
	return Wrap(KindUnexpected, CodeUnexpected, UnexpectedMessage,
		fmt.Errorf("pipeline: a nil %T was returned as a non-nil error", err))
}

// isTypedNil reports whether err holds a nil pointer (or other nil
// reference) of some type.
func isTypedNil(err error) bool {
	switch v := reflect.ValueOf(err); v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		return v.IsNil()
	}
	return false
}

// classify walks err's chain once: it finds the *Error in it (coded; nil
// with found when err is, or wraps, a typed nil that could not be read)
// or, failing that, whether it is a context error. A panic while walking
// the chain — an Unwrap, Is or As method reading a nil receiver — counts
// as a typed nil: a foreign error must not take the process down.
func classify(err error) (coded *Error, found bool, ctxErr *Error) {
	defer func() {
		if recover() != nil {
			coded, found, ctxErr = nil, true, nil
		}
	}()
	if isTypedNil(err) {
		return nil, true, nil
	}
	if pe, ok := errors.AsType[*Error](err); ok {
		return pe, true, nil
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return nil, false, errTimeout
	case errors.Is(err, context.Canceled):
		return nil, false, errCanceled
	}
	return nil, false, nil
}

// AsError returns err as an *Error. It returns nil for nil, and the
// *Error in err's chain when there is one. A context error gives
// KERNEL_TIMEOUT_001 or KERNEL_CANCELLED_001 wrapping err. Anything else,
// a typed nil included, gives an UNEXPECTED outcome wrapping err.
func AsError(err error) *Error {
	if err == nil {
		return nil
	}
	if e, ok := err.(*Error); ok && e != nil {
		return e
	}
	e, found, ctxErr := classify(err)
	switch {
	case found && e != nil:
		return e
	case found:
		return errTypedNil(err)
	case ctxErr != nil:
		return ctxErr.withCause(err)
	}
	return Wrap(KindUnexpected, CodeUnexpected, UnexpectedMessage, err)
}

// ErrorText returns err.Error(), "" for nil, and, when err is a typed nil
// or its Error method panics, a description of its type instead: logs of
// foreign errors must not take the process down.
func ErrorText(err error) (s string) {
	if err == nil {
		return ""
	}
	defer func() {
		if recover() != nil {
			s = fmt.Sprintf("%T (its Error method panicked)", err)
		}
	}()
	return err.Error()
}
