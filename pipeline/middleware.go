package pipeline

import (
	"fmt"
	"runtime/debug"
)

// Handler runs an invocation and returns its outcome: nil for success, an
// error (ideally an [*Error]) otherwise. A successful handler stores its
// result with [Invocation.SetOutput].
type Handler func(inv *Invocation) error

// Middleware acts on an invocation around the rest of the chain. Invoke must
// call next at most once; not calling it ends the invocation with the
// returned outcome (a rejection). Middleware that replaces the invocation's
// context (see [Invocation.SetContext]) must restore it before returning.
type Middleware interface {
	Invoke(inv *Invocation, next Handler) error
}

// MiddlewareFunc adapts a function to [Middleware].
type MiddlewareFunc func(inv *Invocation, next Handler) error

// Invoke calls f(inv, next).
func (f MiddlewareFunc) Invoke(inv *Invocation, next Handler) error { return f(inv, next) }

// Chain composes middleware around terminal into one Handler. It runs once,
// when a pipeline is built; calling the result allocates nothing for the
// chain. The first middleware is the outermost: it acts first on the
// invocation and last on the outcome. Nil middleware are skipped.
func Chain(terminal Handler, mws ...Middleware) Handler {
	h := terminal
	for i := len(mws) - 1; i >= 0; i-- {
		m := mws[i]
		if m == nil {
			continue
		}
		next := h
		h = func(inv *Invocation) error { return m.Invoke(inv, next) }
	}
	return h
}

// PanicError is the cause wrapped by the UNEXPECTED outcome that [Recover]
// produces. Its Value and Stack are for logs only: the caller sees
// [UnexpectedMessage].
type PanicError struct {
	Value any
	Stack []byte
}

func (p *PanicError) Error() string { return fmt.Sprintf("panic: %v", p.Value) }

// Recover returns a Handler that runs h and turns a panic into an UNEXPECTED
// outcome wrapping a [*PanicError]. onPanic, if not nil, is called with the
// invocation and the panic (the kernel logs it there). The process lives on;
// the panic text never becomes part of the outcome's message.
func Recover(h Handler, onPanic func(inv *Invocation, p *PanicError)) Handler {
	return func(inv *Invocation) (err error) {
		defer func() {
			if v := recover(); v != nil {
				p := &PanicError{Value: v, Stack: debug.Stack()}
				if onPanic != nil {
					onPanic(inv, p)
				}
				err = Wrap(KindUnexpected, CodeUnexpected, UnexpectedMessage, p)
			}
		}()
		return h(inv)
	}
}
