package pipelinetest

import (
	"context"
	"log"
	"log/slog"
	"maps"
	"sync"
	"time"
)

// Record is one log record kept by a [LogSink].
type Record struct {
	// Time is the record's time (the zero time when it had none).
	Time time.Time
	// Level and Message are the record's level and message.
	Level   slog.Level
	Message string
	// Attrs holds the record's attributes and those of the logger, flattened:
	// an attribute k inside group g is under "g.k". Values are as
	// [slog.Value.Any] returns them once resolved: every signed integer is an
	// int64, every unsigned one a uint64, a float a float64, a
	// [time.Duration] and a [time.Time] themselves, an error the error.
	Attrs map[string]any
}

// LogSink keeps every record logged through its [LogSink.Logger], at
// every level, for tests to inspect ([LogSink.Records], [LogSink.Find])
// or to wait for ([LogSink.WaitFor]). The loggers its logger's With and
// WithGroup methods return keep their records in the same LogSink.
//
// The zero LogSink is ready to use. Its methods are safe for concurrent
// use.
type LogSink struct {
	mu      sync.Mutex
	records []Record
	changed chan struct{} // closed, and replaced, when a record is added
}

// Logger returns a logger that logs to s.
func (s *LogSink) Logger() *slog.Logger { return slog.New(sinkHandler{sink: s}) }

// CaptureDefault makes s's logger slog's default (slog.SetDefault) until
// the test t ends; it then restores the default logger and the log
// package's output and flags, which SetDefault changes. A test that calls
// it must not run in parallel with others.
func (s *LogSink) CaptureDefault(t interface{ Cleanup(func()) }) {
	prev, out, flags := slog.Default(), log.Writer(), log.Flags()
	slog.SetDefault(s.Logger())
	t.Cleanup(func() {
		slog.SetDefault(prev)
		log.SetOutput(out)
		log.SetFlags(flags)
	})
}

// Records returns a copy of the records kept so far, oldest first.
func (s *LogSink) Records() []Record {
	return s.Find(func(Record) bool { return true })
}

// Message returns a match of [LogSink.Find] and [LogSink.WaitFor]: the
// records whose message is msg.
func Message(msg string) func(Record) bool {
	return func(r Record) bool { return r.Message == msg }
}

// Find returns the records kept so far for which match returns true,
// oldest first.
func (s *LogSink) Find(match func(Record) bool) []Record {
	s.mu.Lock()
	recs := s.records // elements are never written once added
	s.mu.Unlock()
	var out []Record
	for _, r := range recs {
		if r = clone(r); match(r) {
			out = append(out, r)
		}
	}
	return out
}

// WaitFor returns the first record for which match returns true, waiting
// up to timeout for one to be logged, and whether there is one.
func (s *LogSink) WaitFor(timeout time.Duration, match func(Record) bool) (Record, bool) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		s.mu.Lock()
		recs := s.records // elements are never written once added
		if s.changed == nil {
			s.changed = make(chan struct{})
		}
		changed := s.changed
		s.mu.Unlock()
		for _, r := range recs {
			if c := clone(r); match(c) {
				return c, true
			}
		}
		select {
		case <-changed:
		case <-t.C:
			return Record{}, false
		}
	}
}

// WaitSampled waits up to timeout until the records whose message is msg
// account for want events, and returns their counts: own, the records
// of one event each; suppressed, the sum of the "suppressed" attribute of
// the summaries of a sampled logger (logs.Sampled).
func (s *LogSink) WaitSampled(timeout time.Duration, msg string, want int64) (own, suppressed int64) {
	count := func() {
		own, suppressed = 0, 0
		for _, r := range s.Find(Message(msg)) {
			if n, ok := r.Attrs["suppressed"].(int64); ok {
				suppressed += n
			} else {
				own++
			}
		}
	}
	s.WaitFor(timeout, func(Record) bool { count(); return own+suppressed >= want })
	count()
	return own, suppressed
}

// Reset forgets the records kept so far.
func (s *LogSink) Reset() {
	s.mu.Lock()
	s.records = nil
	s.mu.Unlock()
}

func (s *LogSink) add(r Record) {
	s.mu.Lock()
	s.records = append(s.records, r)
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
	s.mu.Unlock()
}

// clone returns r with a copy of its attributes, so that callers cannot
// change what the sink keeps.
func clone(r Record) Record {
	r.Attrs = maps.Clone(r.Attrs)
	return r
}

// sinkHandler is the [slog.Handler] of a LogSink's logger, with the
// logger's attributes and groups.
type sinkHandler struct {
	sink   *LogSink
	prefix string         // the open groups, each followed by "."
	attrs  map[string]any // the logger's attributes, flattened; never written once shared
}

func (h sinkHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h sinkHandler) Handle(_ context.Context, r slog.Record) error {
	attrs := make(map[string]any, len(h.attrs)+r.NumAttrs())
	maps.Copy(attrs, h.attrs)
	r.Attrs(func(a slog.Attr) bool {
		flatten(attrs, h.prefix, a)
		return true
	})
	h.sink.add(Record{Time: r.Time, Level: r.Level, Message: r.Message, Attrs: attrs})
	return nil
}

func (h sinkHandler) WithAttrs(as []slog.Attr) slog.Handler {
	if len(as) == 0 {
		return h
	}
	attrs := maps.Clone(h.attrs)
	if attrs == nil {
		attrs = make(map[string]any, len(as))
	}
	for _, a := range as {
		flatten(attrs, h.prefix, a)
	}
	h.attrs = attrs
	return h
}

func (h sinkHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	h.prefix += name + "."
	return h
}

// flatten adds a to m under prefix, resolving its value and flattening
// groups; an empty attribute is skipped and a group with an empty key is
// inlined, as slog's handlers do.
func flatten(m map[string]any, prefix string, a slog.Attr) {
	v := a.Value.Resolve()
	if v.Kind() == slog.KindGroup {
		p := prefix
		if a.Key != "" {
			p += a.Key + "."
		}
		for _, g := range v.Group() {
			flatten(m, p, g)
		}
		return
	}
	if a.Key == "" && v.Any() == nil {
		return
	}
	m[prefix+a.Key] = v.Any()
}

var _ slog.Handler = sinkHandler{}
