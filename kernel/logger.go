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
	if l < defaultLogLevel {
		return false
	}
	d, ctx := target(ctx)
	return d.Enabled(ctx, l)
}

func (h defaultHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < defaultLogLevel {
		return nil
	}
	d, ctx := target(ctx)
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

// passing marks the context of a record a defaultHandler passes on.
type passing struct{}

// target returns the handler of slog.Default and the context to give it. It
// returns stderrHandler when that handler would hand the record back to a
// defaultHandler. That is so when it is one (slog.SetDefault(k.Logger())). It
// is so too when ctx shows that the record came round once already (a handler
// that wraps one).
func target(ctx context.Context) (slog.Handler, context.Context) {
	if ctx == nil {
		ctx = context.Background()
	}
	d := slog.Default().Handler()
	if _, ok := d.(defaultHandler); ok || ctx.Value(passing{}) != nil {
		return stderrHandler, ctx
	}
	return d, context.WithValue(ctx, passing{}, true)
}
