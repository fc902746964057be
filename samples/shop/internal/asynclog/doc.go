// Package asynclog wraps a [slog.Handler] so that logging can never stall
// the goroutine that logs.
//
// # Why
//
// A server writes its access log on the request path — and, when a deadline
// fires, just before the 504 is flushed. If the log's destination stops
// accepting bytes (stderr piped to a process that stopped reading, a full
// pipe, a stuck terminal or disk), a synchronous handler blocks inside
// Write, and with it every request, the timeout answer and /healthz: the
// server freezes although nothing is wrong with it. A log line is worth
// less than an answer, so [Handler] trades completeness for liveness:
//
//   - [Handler.Handle] clones the record ([slog.Record.Clone]) and offers it
//     to a bounded queue (4096 records by default, [WithQueue]) without
//     waiting. It never calls the wrapped handler and never blocks.
//   - When the queue is full the record is dropped and counted
//     ([Handler.Dropped]); Handle returns [ErrDropped] (which [slog.Logger]
//     ignores). Memory is bounded by the queue, not by the writer's speed.
//   - One background goroutine writes the queued records through the
//     wrapped handler. When drops happened it writes one Warn record
//     "asynclog: dropped N records" (attribute dropped=N) through the
//     wrapped root handler as soon as the queue drains, or after at most
//     the report interval ([WithReportInterval], 1 s by default) while it
//     does not drain — so the loss is visible in the log itself.
//   - With [WithFlush] and a [Batch] as the wrapped handler's writer,
//     records reach the destination together, in one Write at most every
//     wait; a record after a quiet wait goes out as soon as it is handled.
//   - [Handler.Close] stops accepting records, flushes what is queued
//     within its context and stops the goroutine. If the context ends
//     first Close returns its error and the goroutine abandons the rest of
//     the queue (counted as dropped); it exits as soon as the write in
//     progress returns. A Write that never returns cannot be interrupted by
//     any wrapper of an [io.Writer]: that one goroutine stays blocked, but
//     nothing else does.
//
// # Ordering
//
// A Handler and every handler derived from it with WithAttrs and WithGroup
// form one tree that shares one queue and one writer goroutine. Records
// from one tree are written in the order they were accepted (the order in
// which Handle calls that returned nil entered the queue); records logged
// by one goroutine are therefore written in the order it logged them.
// Dropped records leave gaps, never reorderings. The drop report is written
// between records, after the records that were accepted before it.
//
// # Contexts
//
// The record is written after Handle returned, typically after the request
// ended, so the wrapped handler receives the caller's context without its
// cancellation ([context.WithoutCancel]): its values (a trace ID) remain.
//
// # Use
//
// The package belongs to the shop sample, its only user. The framework
// logs through whatever logger an application passes it
// (kernel.WithLogger), so a handler that never blocks is the application's
// choice; the shop makes it here.
//
//	h := asynclog.New(slog.NewJSONHandler(os.Stderr, nil))
//	defer h.Close(context.Background()) // or a context bounded by the shutdown grace
//	logger := slog.New(h)
package asynclog
