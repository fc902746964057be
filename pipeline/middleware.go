package pipeline

import (
	"context"
	"fmt"
	"reflect"
)

// Handler runs an invocation under ctx and returns its result and outcome.
// The outcome is nil for success, else ideally an [*Error]. ctx carries
// the invocation's cancellation and, inside the Resilience stage and
// below, its deadline. Pass it to every downstream call.
type Handler func(ctx context.Context, inv *Invocation) (any, error)

// Middleware acts on an invocation before and after the rest of the chain.
// Invoke calls next to continue (with ctx or a context derived from it)
// and returns what next returned, or an outcome of its own; it may also
// not call next at all (a rejection).
type Middleware interface {
	Invoke(ctx context.Context, inv *Invocation, next Handler) (any, error)
}

// MiddlewareFunc adapts a function to [Middleware].
type MiddlewareFunc func(ctx context.Context, inv *Invocation, next Handler) (any, error)

// Invoke calls f.
func (f MiddlewareFunc) Invoke(ctx context.Context, inv *Invocation, next Handler) (any, error) {
	return f(ctx, inv, next)
}

// Chain composes mws around terminal into one Handler, once: calling it
// allocates nothing for the chain itself. The first middleware is the
// outermost: it acts first on the invocation and last on the outcome.
// Nil middleware — untyped, or a typed nil such as a nil pointer — are
// skipped.
func Chain(terminal Handler, mws ...Middleware) Handler {
	h := terminal
	for i := len(mws) - 1; i >= 0; i-- {
		m := mws[i]
		if isNil(m) {
			continue
		}
		next := h
		h = func(ctx context.Context, inv *Invocation) (any, error) { return m.Invoke(ctx, inv, next) }
	}
	return h
}

// isNil reports whether m is nil or holds a nil pointer, func, map, chan
// or slice (whose Invoke would most likely dereference it).
func isNil(m Middleware) bool {
	if m == nil {
		return true
	}
	switch v := reflect.ValueOf(m); v.Kind() {
	case reflect.Pointer, reflect.Func, reflect.Map, reflect.Chan, reflect.Slice, reflect.Interface:
		return v.IsNil()
	}
	return false
}

// PanicError is the cause of the UNEXPECTED outcome of a recovered panic.
type PanicError struct {
	Value any
	Stack []byte
}

func (p *PanicError) Error() string {
	if p == nil {
		return "panic"
	}
	return fmt.Sprintf("panic: %v", p.Value)
}
