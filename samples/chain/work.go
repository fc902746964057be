package main

import (
	"context"
	"fmt"
	"time"

	"github.com/sundial-go/sundial/pipeline"
)

// Slow is the input of inventory.slow and billing.slow: work for DelayMs
// milliseconds.
type Slow struct {
	DelayMs int `json:"delayMs" query:"delayMs"`
}

// Validate implements operations.Validator.
func (s *Slow) Validate() error {
	if s.DelayMs < 0 {
		return pipeline.NewError(pipeline.KindValidation, "CHAIN_VALIDATION_001", "delayMs must not be negative").WithDetail("field", "delayMs")
	}
	return nil
}

// SlowDone is the output of inventory.slow and billing.slow.
type SlowDone struct {
	Service string `json:"service"`
	DelayMs int    `json:"delayMs"`
}

// refuseIfShort returns a TIMEOUT outcome (gRPC DeadlineExceeded, HTTP 504)
// when ctx has less time left than need — the check a service makes before
// it starts work that cannot finish in time — and records the refusal. It
// returns nil when the work fits or ctx has no deadline.
//
// A real service has to estimate need with a safety margin; here need is
// the configured duration of the simulated work.
func refuseIfShort(ctx context.Context, j *Journal, code, what string, need time.Duration) error {
	left, ok := remaining(ctx)
	if !ok || left >= need {
		return nil
	}
	j.Record(ctx, "refused", "what", what, "needMs", fmt.Sprint(need.Milliseconds()))
	return pipeline.NewError(pipeline.KindTimeout, code, fmt.Sprintf("Not enough time left to %s: %d ms remaining, it takes %d ms.",
		what, max(left.Milliseconds(), 0), need.Milliseconds())).
		WithDetail("remainingMs", max(left.Milliseconds(), 0)).
		WithDetail("needMs", need.Milliseconds())
}

// work simulates d of work that stops as soon as ctx ends, and returns
// ctx's error then. It records "started" and, when it returns, "finished"
// or "stopped"; a watcher records "ctx-done" the instant ctx ends, whether
// or not the work notices.
//
// With swallow set the work is the failure mode of experiment 7: it never
// looks at ctx (like a handler that catches the cancellation and carries
// on), so it runs its full d after the caller has gone.
func work(ctx context.Context, j *Journal, what string, d time.Duration, swallow bool) error {
	j.Record(ctx, "started", "what", what)
	stopWatch := context.AfterFunc(ctx, func() {
		j.Record(ctx, "ctx-done", "what", what, "cause", pipeline.ErrorText(context.Cause(ctx)))
	})
	defer stopWatch()
	if swallow {
		time.Sleep(d) // the bug: the cancellation is never observed
		j.Record(ctx, "finished", "what", what, "ctxErr", pipeline.ErrorText(ctx.Err()))
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		j.Record(ctx, "finished", "what", what)
		return nil
	case <-ctx.Done():
		j.Record(ctx, "stopped", "what", what, "cause", pipeline.ErrorText(context.Cause(ctx)))
		return ctx.Err()
	}
}
