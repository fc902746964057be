package logs

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// The bounds of a Sampler (docs/observability.md).
const (
	// sampleBurst events at once get a record each.
	// Then sampleRate a second do, on average.
	sampleBurst = 10
	sampleRate  = 1.0
	// sampleSummaryAfter is how long after the first event without a
	// record of its own the summary comes.
	sampleSummaryAfter = 10 * time.Second
)

// A Sampler bounds the log records of one kind of event that callers
// can cause at will, once per call: bad input, a cancelled call. Without
// it, a flood of such calls writes a flood of records, synchronously.
//
// Ten events at once get a record each, then one a second on average.
// The others are counted. A summary function receives their count ten
// seconds after the first of them. A Sampler is safe for concurrent use.
type Sampler struct {
	summary func(suppressed int64, within time.Duration)

	mu      sync.Mutex // guards the fields below
	tokens  float64
	last    time.Time
	pending int64       // events without a record since the last summary
	timer   *time.Timer // pending the summary; nil: none
}

// NewSampler returns a Sampler that passes the count of the events
// it suppressed, and the window they fell in, to summary, which writes
// their record. A nil summary writes nothing.
func NewSampler(summary func(suppressed int64, within time.Duration)) *Sampler {
	return &Sampler{summary: summary, tokens: sampleBurst}
}

// Sampled returns a logger that writes to l the records a new
// Sampler allows; each record written to it is one event. The summary
// is one record at level on l: the message msg, the count in
// "suppressed", and 10 (seconds) in "withinS". A nil l
// gives nil.
func Sampled(l *slog.Logger, level slog.Level, msg string) *slog.Logger {
	if l == nil {
		return nil
	}
	s := NewSampler(func(n int64, within time.Duration) {
		l.LogAttrs(context.Background(), level, msg,
			slog.Int64("suppressed", n), slog.Float64("withinS", within.Seconds()))
	})
	return slog.New(sampledHandler{inner: l.Handler(), s: s})
}

// Allow reports whether one more event gets a record of its own. When it
// does not, the event is counted in the next summary.
func (s *Sampler) Allow() bool {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.last.IsZero() {
		s.tokens = min(sampleBurst, s.tokens+now.Sub(s.last).Seconds()*sampleRate)
	}
	s.last = now
	if s.tokens >= 1 {
		s.tokens--
		return true
	}
	s.suppressLocked()
	return false
}

// Suppress counts one event that never gets a record of its own in the
// next summary.
func (s *Sampler) Suppress() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.suppressLocked()
}

func (s *Sampler) suppressLocked() {
	s.pending++
	if s.timer == nil {
		s.timer = time.AfterFunc(sampleSummaryAfter, s.summarize)
	}
}

// summarize passes the count of the suppressed events to the summary.
func (s *Sampler) summarize() {
	s.mu.Lock()
	n := s.pending
	s.pending, s.timer = 0, nil
	s.mu.Unlock()
	if s.summary != nil && n > 0 {
		s.summary(n, sampleSummaryAfter)
	}
}

// sampledHandler passes on the records its sampler allows.
type sampledHandler struct {
	inner slog.Handler
	s     *Sampler
}

func (h sampledHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h sampledHandler) Handle(ctx context.Context, r slog.Record) error {
	if !h.s.Allow() {
		return nil
	}
	return h.inner.Handle(ctx, r)
}

func (h sampledHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return sampledHandler{inner: h.inner.WithAttrs(as), s: h.s}
}

func (h sampledHandler) WithGroup(name string) slog.Handler {
	return sampledHandler{inner: h.inner.WithGroup(name), s: h.s}
}
