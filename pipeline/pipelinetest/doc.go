// Package pipelinetest provides utilities for testing code that runs in a
// Sundial pipeline: middleware, handlers and what they log.
//
// [NewInvocation] makes a [pipeline.Invocation] from a [pipeline.Spec].
// It reconciles the deadlines as the kernel would. [Handler] returns a
// handler with a fixed result. A [Recorder] is a middleware that records
// what each call saw on its way in and what it returned:
//
//	rec := new(pipelinetest.Recorder)
//	h := pipeline.Chain(pipelinetest.Handler("ok", nil), mw, rec)
//	inv := pipelinetest.NewInvocation(pipeline.Spec{Deadline: time.Now().Add(time.Second), DeadlineSource: pipeline.DeadlineOperation})
//	out, err := h(ctx, inv)
//	call, _ := rec.Last()
//	// call.HasDeadline reports whether mw gave the handler a deadline.
//
// A [LogSink] keeps the records logged through its logger, for tests to
// inspect or to wait for.
//
// [HandlerStarted] tells a call whose handler stalls from one the kernel
// never started because its deadline had passed.
package pipelinetest
