package main

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// Event is one thing a service did or saw, stamped with the wall-clock
// time it happened. The experiments read these to measure what each hop
// experienced; the separate-process roles print them as log lines.
type Event struct {
	At   time.Time
	Kind string // e.g. "reserved", "released", "charged", "refused", "cancelled"
	// Remaining is the time left on the call's deadline when the event was
	// recorded; HasDeadline is false when the call had no deadline.
	Remaining   time.Duration
	HasDeadline bool
	// Attrs are event-specific facts (IDs, amounts, header values).
	Attrs map[string]string
}

// Journal records a service's events. It is safe for concurrent use; its
// zero value is not usable, use newJournal.
type Journal struct {
	service string
	logger  *slog.Logger

	mu      sync.Mutex // guards events and waiters
	events  []Event
	waiters []chan struct{}
}

// newJournal returns an empty journal for service that also logs each
// event to logger (nil: no logging).
func newJournal(service string, logger *slog.Logger) *Journal {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Journal{service: service, logger: logger}
}

// Record appends an event with the time left on ctx's deadline, logs it,
// and wakes every Wait. attrs are key/value pairs.
func (j *Journal) Record(ctx context.Context, kind string, attrs ...string) Event {
	e := Event{At: time.Now(), Kind: kind}
	e.Remaining, e.HasDeadline = remaining(ctx)
	if len(attrs) > 0 {
		e.Attrs = make(map[string]string, len(attrs)/2)
		for i := 0; i+1 < len(attrs); i += 2 {
			e.Attrs[attrs[i]] = attrs[i+1]
		}
	}
	j.mu.Lock()
	j.events = append(j.events, e)
	waiters := j.waiters
	j.waiters = nil
	j.mu.Unlock()
	for _, w := range waiters {
		close(w)
	}
	args := []any{"service", j.service, "event", kind}
	if e.HasDeadline {
		args = append(args, "remainingMs", e.Remaining.Milliseconds())
	}
	for i := 0; i+1 < len(attrs); i += 2 {
		args = append(args, attrs[i], attrs[i+1])
	}
	j.logger.Info("chain: "+j.service+" "+kind, args...)
	return e
}

// Events returns a copy of the events of the given kinds (all events when
// no kind is given), in the order they were recorded.
func (j *Journal) Events(kinds ...string) []Event {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []Event
	for _, e := range j.events {
		if len(kinds) == 0 || slices.Contains(kinds, e.Kind) {
			out = append(out, e)
		}
	}
	return out
}

// Count returns how many events of kind were recorded.
func (j *Journal) Count(kind string) int { return len(j.Events(kind)) }

// Wait blocks until n events of any of the kinds have been recorded and
// returns them, or returns an error when ctx ends first. It polls nothing:
// every Record wakes it.
func (j *Journal) Wait(ctx context.Context, n int, kinds ...string) ([]Event, error) {
	for {
		j.mu.Lock()
		var got []Event
		for _, e := range j.events {
			if slices.Contains(kinds, e.Kind) {
				got = append(got, e)
			}
		}
		if len(got) >= n {
			j.mu.Unlock()
			return got, nil
		}
		w := make(chan struct{})
		j.waiters = append(j.waiters, w)
		j.mu.Unlock()
		select {
		case <-w:
		case <-ctx.Done():
			return got, fmt.Errorf("chain: %s: waiting for %d %v events, saw %d: %w", j.service, n, kinds, len(got), context.Cause(ctx))
		}
	}
}

// remaining returns the time left on ctx's deadline (negative once it has
// passed) and whether ctx has a deadline at all.
func remaining(ctx context.Context) (time.Duration, bool) {
	if ctx == nil {
		return 0, false
	}
	d, ok := ctx.Deadline()
	if !ok {
		return 0, false
	}
	return time.Until(d), true
}
