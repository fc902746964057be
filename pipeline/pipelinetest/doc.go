// Package pipelinetest provides utilities for testing code that runs in a
// Sundial pipeline: middleware, handlers and what they log.
//
// [NewInvocation] makes a [pipeline.Invocation] from a few options, with the
// deadlines reconciled as the kernel would. [Handler] returns a handler
// with a fixed result, and a [Recorder] is a middleware that records what
// each call saw on its way in and what it returned on its way out:
//
//	rec := pipelinetest.NewRecorder()
//	h := pipeline.Chain(pipelinetest.Handler("ok", nil), mw, rec)
//	out, err := h(ctx, pipelinetest.NewInvocation(pipelinetest.WithTimeout(time.Second)))
//	call, _ := rec.Last()
//	// call.HasDeadline reports whether mw gave the handler a deadline.
//
// A [LogSink] is a [log/slog.Handler] that keeps the records logged through
// it, for tests to inspect or to wait for.
package pipelinetest
