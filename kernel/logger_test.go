package kernel_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

// TestDefaultLoggerWarnsOfUnknownOperation: a user who sets no logger
// sees the warning for an operation ID in the config that no operation
// has, on slog's default logger (stderr unless the program set another).
func TestDefaultLoggerWarnsOfUnknownOperation(t *testing.T) {
	var logs pipelinetest.LogSink
	logs.CaptureDefault(t)
	_, err := kernel.New(kernel.WithRegistry(newRegistry(t, nil)),
		kernel.WithConfigJSON([]byte(`{"Sundial":{"Kernel":{"Resilience":{"Operations":{"test.ecoh":{"PermitLimit":5}}}}}}`)))
	if err != nil {
		t.Fatal(err)
	}
	found := logs.Find(func(r pipelinetest.Record) bool {
		return r.Level == slog.LevelWarn && r.Attrs["operation"] == "test.ecoh"
	})
	if len(found) != 1 {
		t.Errorf("default log = %v, want one warning for test.ecoh", logs.Records())
	}
}

// TestDefaultLoggerFollowsSlogDefault: the default logger passes Warn and
// above, not Info, to slog's default logger as it is when each record is
// written (set after New here), with the attributes and groups of With
// and WithGroup.
func TestDefaultLoggerFollowsSlogDefault(t *testing.T) {
	k, err := kernel.New()
	if err != nil {
		t.Fatal(err)
	}
	var logs pipelinetest.LogSink
	logs.CaptureDefault(t)
	l := k.Logger().With("a", 1).WithGroup("g")
	ctx := context.Background()
	l.Info("quiet", "b", 2)
	l.Warn("loud", "b", 2)
	l.Error("louder")
	recs := logs.Records()
	if len(recs) != 2 || recs[0].Message != "loud" || recs[1].Message != "louder" {
		t.Fatalf("default log = %v, want the Warn and Error records only", recs)
	}
	if recs[0].Attrs["a"] != int64(1) || recs[0].Attrs["g.b"] != int64(2) {
		t.Errorf("Warn record attrs = %v, want a=1 and g.b=2", recs[0].Attrs)
	}
	if l.Enabled(ctx, slog.LevelInfo) || !l.Enabled(ctx, slog.LevelWarn) {
		t.Error("default logger: Info enabled or Warn disabled")
	}
}

// TestDefaultLoggerInfoIsFree: a request log at Info through the default
// logger, checked with Enabled first as the adapters do, allocates
// nothing.
func TestDefaultLoggerInfoIsFree(t *testing.T) {
	k, err := kernel.New()
	if err != nil {
		t.Fatal(err)
	}
	l, ctx := k.Logger(), context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		if l.Enabled(ctx, slog.LevelInfo) {
			l.LogAttrs(ctx, slog.LevelInfo, "http request", slog.String("operation", "test.echo"), slog.Int("status", 200))
		}
		l.LogAttrs(ctx, slog.LevelDebug, "detail", slog.String("operation", "test.echo"))
	})
	if allocs != 0 {
		t.Errorf("filtered Info and Debug records: %v allocations, want 0", allocs)
	}
}

// BenchmarkDefaultLoggerFiltered is the cost of an Info record the default
// logger filters out, against a logger that discards everything.
func BenchmarkDefaultLoggerFiltered(b *testing.B) {
	k, err := kernel.New()
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		l    *slog.Logger
	}{{"default", k.Logger()}, {"discard", slog.New(slog.DiscardHandler)}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				bc.l.LogAttrs(ctx, slog.LevelInfo, "http request", slog.String("operation", "test.echo"))
			}
		})
	}
}

// TestDefaultLoggerAsSlogDefault: a program that makes the kernel's
// default logger slog's default does not send each record round in a
// circle; its records go to stderr.
func TestDefaultLoggerAsSlogDefault(t *testing.T) {
	k, err := kernel.New()
	if err != nil {
		t.Fatal(err)
	}
	var logs pipelinetest.LogSink
	logs.CaptureDefault(t) // restores slog's default and the log package when t ends
	slog.SetDefault(k.Logger().With("service", "test"))
	done := make(chan struct{})
	go func() {
		defer close(done)
		k.Logger().Warn("kernel: a warning from TestDefaultLoggerAsSlogDefault")
	}()
	<-done // a record handed back to itself overflows the stack instead
}

// forward is a handler that passes every record to next, as a fan-out or
// an enriching handler of an application does.
type forward struct {
	next slog.Handler
	seen *int
}

func (f forward) Enabled(ctx context.Context, l slog.Level) bool { return f.next.Enabled(ctx, l) }
func (f forward) Handle(ctx context.Context, r slog.Record) error {
	*f.seen++
	return f.next.Handle(ctx, r)
}
func (f forward) WithAttrs(as []slog.Attr) slog.Handler {
	return forward{f.next.WithAttrs(as), f.seen}
}
func (f forward) WithGroup(name string) slog.Handler { return forward{f.next.WithGroup(name), f.seen} }

// TestDefaultLoggerWrappedAsSlogDefault: a program whose slog default is
// a handler of its own around the kernel's default logger's handler does
// not send each record round in a circle either: the record passes the
// wrapper once, then goes to stderr.
func TestDefaultLoggerWrappedAsSlogDefault(t *testing.T) {
	k, err := kernel.New()
	if err != nil {
		t.Fatal(err)
	}
	var logs pipelinetest.LogSink
	logs.CaptureDefault(t) // restores slog's default and the log package when t ends
	seen := 0
	slog.SetDefault(slog.New(forward{k.Logger().Handler(), &seen}))
	done := make(chan struct{})
	go func() {
		defer close(done)
		k.Logger().Warn("kernel: a warning from TestDefaultLoggerWrappedAsSlogDefault")
	}()
	<-done // a record handed back to itself overflows the stack instead
	if seen != 1 {
		t.Errorf("the wrapper saw the record %d times, want once", seen)
	}
}
