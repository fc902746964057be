package kernel

import (
	"context"
	"runtime/debug"

	"github.com/sundial-go/sundial/pipeline"
)

// recoverHandler returns h with panics turned into an UNEXPECTED outcome
// wrapping a *pipeline.PanicError (its text never reaches a caller).
// onPanic, when not nil, is called with the invocation and the panic
// first.
func recoverHandler(h pipeline.Handler, onPanic func(*pipeline.Invocation, *pipeline.PanicError)) pipeline.Handler {
	return func(ctx context.Context, inv *pipeline.Invocation) (out any, err error) {
		defer func() {
			if v := recover(); v != nil {
				out, err = nil, recovered(inv, v, onPanic)
			}
		}()
		return h(ctx, inv)
	}
}

// recovered is the outcome of a panic with value v recovered while
// running inv: an UNEXPECTED outcome wrapping a *pipeline.PanicError with
// the stack. It calls onPanic first when not nil.
func recovered(inv *pipeline.Invocation, v any, onPanic func(*pipeline.Invocation, *pipeline.PanicError)) *pipeline.Error {
	p := &pipeline.PanicError{Value: v, Stack: debug.Stack()}
	if onPanic != nil {
		onPanic(inv, p)
	}
	return pipeline.Wrap(pipeline.KindUnexpected, pipeline.CodeUnexpected, pipeline.UnexpectedMessage, p)
}
