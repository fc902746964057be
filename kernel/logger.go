package kernel

import (
	"context"
	"log/slog"
	"os"
	"slices"
)

// defaultLogLevel is the least level the default logger passes on.
const defaultLogLevel = slog.LevelWarn

// defaultHandler is the handler of the kernel's logger when WithLogger is
// not given. It passes records at Warn and above to the handler of
// slog.Default, read when each record is written: a default set after New
// is used. Records below Warn cost one comparison.
type defaultHandler struct {
	// with replays WithAttrs and WithGroup on the default's handler.
	with []func(slog.Handler) slog.Handler
}

func (h defaultHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= defaultLogLevel && target().Enabled(ctx, l)
}

func (h defaultHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < defaultLogLevel {
		return nil
	}
	d := target()
	for _, w := range h.with {
		d = w(d)
	}
	return d.Handle(ctx, r)
}

func (h defaultHandler) WithAttrs(as []slog.Attr) slog.Handler {
	if len(as) == 0 {
		return h
	}
	return h.then(func(d slog.Handler) slog.Handler { return d.WithAttrs(as) })
}

func (h defaultHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return h.then(func(d slog.Handler) slog.Handler { return d.WithGroup(name) })
}

func (h defaultHandler) then(w func(slog.Handler) slog.Handler) defaultHandler {
	return defaultHandler{with: append(slices.Clip(h.with), w)}
}

// stderrHandler writes records as text to stderr.
var stderrHandler = slog.NewTextHandler(os.Stderr, nil)

// target returns the handler of slog.Default, or stderrHandler when that
// is a defaultHandler itself (slog.SetDefault(k.Logger())), which would
// hand each record back to itself.
func target() slog.Handler {
	d := slog.Default().Handler()
	if _, ok := d.(defaultHandler); ok {
		return stderrHandler
	}
	return d
}
