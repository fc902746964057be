package pipelinetest_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/slogtest"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

func TestNewInvocationDefaults(t *testing.T) {
	inv := pipelinetest.NewInvocation(pipeline.Spec{})
	if inv.Operation() != nil || inv.Protocol() != pipeline.ProtocolInProcess || inv.Route() != "" ||
		inv.Input() != nil || inv.IdempotencyKey() != "" || inv.Timing().Source != pipeline.DeadlineNone {
		t.Errorf("NewInvocation() = %+v, want an empty in-process invocation", inv)
	}
	if _, has := inv.Deadline(); has {
		t.Error("NewInvocation() has a deadline")
	}
	if _, has := pipelinetest.CallerDeadline(inv); has {
		t.Error("NewInvocation() has a caller deadline")
	}
	if _, found := inv.Baggage("k"); found {
		t.Error("NewInvocation() has baggage")
	}
}

func TestNewInvocationSpec(t *testing.T) {
	in := &struct{ N int }{1}
	inv := pipelinetest.NewInvocation(pipeline.Spec{
		Operation:      pipelinetest.Operation("orders.create"),
		Protocol:       pipeline.ProtocolHTTP,
		Route:          "POST /orders",
		Input:          in,
		Baggage:        map[string]string{"tenant": "acme", "region": "eu"},
		IdempotencyKey: "key-1",
	})
	if inv.OperationID() != "orders.create" || inv.Operation() != pipelinetest.Operation("orders.create") {
		t.Errorf("operation = %v", inv.Operation())
	}
	if inv.Protocol() != pipeline.ProtocolHTTP || inv.Route() != "POST /orders" || inv.Input() != in {
		t.Errorf("protocol %v, route %q, input %v", inv.Protocol(), inv.Route(), inv.Input())
	}
	if v, _ := inv.Baggage("tenant"); v != "acme" {
		t.Errorf("Baggage(tenant) = %q, want acme", v)
	}
	if v, _ := inv.Baggage("region"); v != "eu" {
		t.Errorf("Baggage(region) = %q, want eu", v)
	}
	if inv.IdempotencyKey() != "key-1" {
		t.Errorf("IdempotencyKey() = %q, want key-1", inv.IdempotencyKey())
	}

	host := pipelinetest.NewInvocation(pipeline.Spec{Route: "GET /healthz"})
	if host.Operation() != nil || host.Name() != "GET /healthz" {
		t.Errorf("no operation: operation %v, name %q; want none, the route", host.Operation(), host.Name())
	}
}

func TestCustomOperation(t *testing.T) {
	type descriptor struct{ pipelinetest.Operation }
	desc := &descriptor{"orders.get"}
	inv := pipelinetest.NewInvocation(pipeline.Spec{Operation: desc})
	if inv.Operation() != desc || inv.OperationID() != "orders.get" {
		t.Errorf("custom operation: operation %v", inv.Operation())
	}
}

func TestDeadlines(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return now.Add(time.Duration(s) * time.Second) }
	tests := []struct {
		name       string
		spec       pipeline.Spec
		deadline   time.Time // zero: none
		source     pipeline.DeadlineSource
		callerDead time.Time // zero: none
	}{
		{"none", pipeline.Spec{}, time.Time{}, pipeline.DeadlineNone, time.Time{}},
		{"caller only",
			pipeline.Spec{CallerDeadline: at(5)},
			at(5), pipeline.DeadlineCaller, at(5)},
		{"caller earlier than the operation's",
			pipeline.Spec{CallerDeadline: at(5), Deadline: at(10), DeadlineSource: pipeline.DeadlineOperation},
			at(5), pipeline.DeadlineCaller, at(5)},
		{"caller later than the operation's",
			pipeline.Spec{CallerDeadline: at(10), Deadline: at(5), DeadlineSource: pipeline.DeadlineOperation},
			at(5), pipeline.DeadlineOperation, at(10)},
		{"caller equal to the kernel's",
			pipeline.Spec{Deadline: at(5), DeadlineSource: pipeline.DeadlineKernel, CallerDeadline: at(5)},
			at(5), pipeline.DeadlineCaller, at(5)},
		{"kernel",
			pipeline.Spec{Deadline: at(5), DeadlineSource: pipeline.DeadlineKernel},
			at(5), pipeline.DeadlineKernel, time.Time{}},
		{"deadline of the caller",
			pipeline.Spec{Deadline: at(5), DeadlineSource: pipeline.DeadlineCaller},
			at(5), pipeline.DeadlineCaller, at(5)},
		{"deadline without a source",
			pipeline.Spec{Deadline: at(5), DeadlineSource: pipeline.DeadlineNone},
			at(5), pipeline.DeadlineCaller, at(5)},
		{"source without a deadline",
			pipeline.Spec{DeadlineSource: pipeline.DeadlineKernel},
			time.Time{}, pipeline.DeadlineNone, time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv := pipelinetest.NewInvocation(tt.spec)
			d, has := inv.Deadline()
			if has != !tt.deadline.IsZero() || !d.Equal(tt.deadline) || inv.Timing().Source != tt.source {
				t.Errorf("Deadline() = %v, %v, %v; want %v, %v", d, has, inv.Timing().Source, tt.deadline, tt.source)
			}
			c, has := pipelinetest.CallerDeadline(inv)
			if has != !tt.callerDead.IsZero() || !c.Equal(tt.callerDead) {
				t.Errorf("CallerDeadline() = %v, %v; want %v", c, has, tt.callerDead)
			}
		})
	}
}

func TestHandler(t *testing.T) {
	want := errors.New("x")
	out, err := pipelinetest.Handler(42, want)(context.Background(), nil)
	if out != 42 || err != want {
		t.Errorf("Handler(42, x)() = %v, %v", out, err)
	}
	if out, err := pipelinetest.Handler(nil, nil)(context.Background(), pipelinetest.NewInvocation(pipeline.Spec{})); out != nil || err != nil {
		t.Errorf("Handler(nil, nil)() = %v, %v", out, err)
	}
}

func TestRecorder(t *testing.T) {
	rec := new(pipelinetest.Recorder)
	if _, found := rec.Last(); found || len(rec.Calls()) != 0 {
		t.Fatal("a new Recorder has calls")
	}
	notFound := pipeline.NewError(pipeline.KindNotFound, "X_NOT_FOUND_001", "no")
	h := pipeline.Chain(pipelinetest.Handler("out", notFound), rec)

	// A live context with a deadline.
	deadline := time.Now().Add(time.Minute)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	inv := pipelinetest.NewInvocation(pipeline.Spec{Operation: pipelinetest.Operation("a.b")})
	if out, err := h(ctx, inv); out != "out" || err != notFound {
		t.Errorf("chain = %v, %v; want what the handler returned", out, err)
	}
	// An ended context without a deadline.
	ended, cancel2 := context.WithCancel(context.Background())
	cancel2()
	inv2 := pipelinetest.NewInvocation(pipeline.Spec{})
	_, _ = h(ended, inv2)

	calls := rec.Calls()
	if len(calls) != 2 {
		t.Fatalf("Calls() = %d calls, want 2", len(calls))
	}
	c := calls[0]
	if c.Invocation != inv || c.Context != ctx || !c.HasDeadline || !c.Deadline.Equal(deadline) || c.ContextErr != nil {
		t.Errorf("first call = %+v; want inv, ctx, its deadline, no ctx error", c)
	}
	if !c.Returned || c.Result != "out" || c.Err != notFound {
		t.Errorf("first call outcome = %v, %v, %v", c.Returned, c.Result, c.Err)
	}
	last, found := rec.Last()
	if !found || last.Invocation != inv2 || last.HasDeadline || !errors.Is(last.ContextErr, context.Canceled) {
		t.Errorf("Last() = %+v, %v; want the second call, no deadline, context.Canceled", last, found)
	}

	calls[0].Result = "changed"
	if rec.Calls()[0].Result != "out" {
		t.Error("changing what Calls returned changed the Recorder")
	}
	rec.Reset()
	if _, found := rec.Last(); found {
		t.Error("Last() after Reset found a call")
	}
}

func TestRecorderPanicAndReset(t *testing.T) {
	var rec pipelinetest.Recorder // the zero Recorder is ready
	h := pipeline.Chain(func(context.Context, *pipeline.Invocation) (any, error) { panic("boom") }, &rec)
	func() {
		defer func() { _ = recover() }()
		_, _ = h(context.Background(), nil)
	}()
	if c, found := rec.Last(); !found || c.Returned {
		t.Errorf("a call that panicked: Last() = %+v, %v; want Returned false", c, found)
	}

	// A Reset while a call runs: the old call's return is not recorded over a
	// newer one.
	rec.Reset()
	release := make(chan struct{})
	entered := make(chan struct{})
	slow := pipeline.Chain(func(context.Context, *pipeline.Invocation) (any, error) {
		close(entered)
		<-release
		return "slow", nil
	}, &rec)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = slow(context.Background(), nil)
	}()
	<-entered
	rec.Reset()
	_, _ = pipeline.Chain(pipelinetest.Handler("fast", nil), &rec)(context.Background(), nil)
	close(release)
	<-done
	calls := rec.Calls()
	if len(calls) != 1 || calls[0].Result != "fast" {
		t.Errorf("Calls() after Reset = %+v, want only the fast call", calls)
	}
}

func TestRecorderConcurrent(t *testing.T) {
	rec := new(pipelinetest.Recorder)
	h := pipeline.Chain(pipelinetest.Handler(nil, nil), rec)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			_, _ = h(context.Background(), pipelinetest.NewInvocation(pipeline.Spec{}))
			_ = rec.Calls()
			_, _ = rec.Last()
		})
	}
	wg.Wait()
	calls := rec.Calls()
	if len(calls) != 16 {
		t.Fatalf("Calls() = %d, want 16", len(calls))
	}
	for i, c := range calls {
		if !c.Returned {
			t.Errorf("call %d did not return", i)
		}
	}
}

type secret string

func (secret) LogValue() slog.Value { return slog.StringValue("***") }

func TestLogSink(t *testing.T) {
	sink := new(pipelinetest.LogSink)
	logger := sink.Logger()
	logger.Debug("debug kept", "n", 1)
	logger.With("svc", "shop").WithGroup("req").With("id", 7).Warn("access",
		"status", 504, slog.Group("deadline", "source", "caller", "ms", 1500*time.Millisecond),
		"password", secret("hunter2"), slog.Group("", "inline", true), slog.Attr{})
	logger.Error("access", "err", errors.New("boom"))

	recs := sink.Records()
	if len(recs) != 3 {
		t.Fatalf("Records() = %d records, want 3", len(recs))
	}
	if recs[0].Level != slog.LevelDebug || recs[0].Message != "debug kept" || recs[0].Attrs["n"] != int64(1) || recs[0].Time.IsZero() {
		t.Errorf("first record = %+v", recs[0])
	}
	got := recs[1]
	want := map[string]any{
		"svc":                 "shop",
		"req.id":              int64(7),
		"req.status":          int64(504),
		"req.deadline.source": "caller",
		"req.deadline.ms":     1500 * time.Millisecond,
		"req.password":        "***",
		"req.inline":          true,
	}
	if got.Level != slog.LevelWarn || got.Message != "access" || len(got.Attrs) != len(want) {
		t.Errorf("second record = %v %q %v; want WARN access %v", got.Level, got.Message, got.Attrs, want)
	}
	for k, v := range want {
		if got.Attrs[k] != v {
			t.Errorf("Attrs[%q] = %#v, want %#v", k, got.Attrs[k], v)
		}
	}

	found := sink.Find(pipelinetest.Message("access"))
	if len(found) != 2 || found[1].Level != slog.LevelError {
		t.Fatalf("Find(access) = %v, want the 2 access records", found)
	}
	if err, _ := found[1].Attrs["err"].(error); err == nil || err.Error() != "boom" {
		t.Errorf("err attr = %#v, want the error", found[1].Attrs["err"])
	}
	if n := len(sink.Find(func(r pipelinetest.Record) bool { return r.Level >= slog.LevelWarn })); n != 2 {
		t.Errorf("Find(>= WARN) = %d records, want 2", n)
	}
	if len(sink.Find(pipelinetest.Message("nothing"))) != 0 {
		t.Error("Find(nothing) found records")
	}

	found[0].Attrs["svc"] = "changed"
	if sink.Find(pipelinetest.Message("access"))[0].Attrs["svc"] != "shop" {
		t.Error("changing a returned record changed the sink")
	}

	sink.Reset()
	if len(sink.Records()) != 0 {
		t.Error("Records() after Reset is not empty")
	}
	logger.Info("after reset")
	if len(sink.Records()) != 1 {
		t.Error("the sink does not keep records after Reset")
	}
}

func TestLogSinkZeroValue(t *testing.T) {
	var sink pipelinetest.LogSink
	sink.Logger().Info("hello", "k", "v")
	if r := sink.Find(pipelinetest.Message("hello")); len(r) != 1 || r[0].Attrs["k"] != "v" {
		t.Errorf("zero LogSink kept %v", r)
	}
}

// TestLogSinkHandler runs the standard library's conformance tests for
// slog handlers on the handler of a LogSink's logger.
func TestLogSinkHandler(t *testing.T) {
	var sink *pipelinetest.LogSink
	slogtest.Run(t, func(*testing.T) slog.Handler {
		sink = new(pipelinetest.LogSink)
		return sink.Logger().Handler()
	}, func(t *testing.T) map[string]any {
		recs := sink.Records()
		if len(recs) != 1 {
			t.Fatalf("got %d records, want 1", len(recs))
		}
		return nested(recs[0])
	})
}

// nested turns a record into the nested map slogtest expects.
func nested(r pipelinetest.Record) map[string]any {
	m := map[string]any{slog.LevelKey: r.Level, slog.MessageKey: r.Message}
	if !r.Time.IsZero() {
		m[slog.TimeKey] = r.Time
	}
	for k, v := range r.Attrs {
		parts := strings.Split(k, ".")
		at := m
		for _, p := range parts[:len(parts)-1] {
			sub, ok := at[p].(map[string]any)
			if !ok {
				sub = map[string]any{}
				at[p] = sub
			}
			at = sub
		}
		at[parts[len(parts)-1]] = v
	}
	return m
}

func TestLogSinkWaitFor(t *testing.T) {
	sink := new(pipelinetest.LogSink)
	logger := sink.Logger()
	logger.Info("early")
	if r, found := sink.WaitFor(0, pipelinetest.Message("early")); !found || r.Message != "early" {
		t.Errorf("WaitFor(early) = %v, %v; want the record already kept", r, found)
	}

	start := time.Now()
	if _, found := sink.WaitFor(20*time.Millisecond, pipelinetest.Message("never")); found {
		t.Error("WaitFor(never) found a record")
	}
	if time.Since(start) < 20*time.Millisecond {
		t.Error("WaitFor(never) returned before its timeout")
	}

	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(10 * time.Millisecond)
		logger.Info("noise")
		logger.Info("late", "n", 1)
		logger.Info("late", "n", 2)
	}()
	r, found := sink.WaitFor(5*time.Second, func(r pipelinetest.Record) bool {
		return r.Message == "late" && r.Attrs["n"] == int64(2)
	})
	<-done
	if !found || r.Attrs["n"] != int64(2) {
		t.Errorf("WaitFunc(late, n=2) = %v, %v", r, found)
	}
	if r, found := sink.WaitFor(time.Second, pipelinetest.Message("late")); !found || r.Attrs["n"] != int64(1) {
		t.Errorf("WaitFor(late) = %v, %v; want the first late record", r, found)
	}
}

func TestLogSinkConcurrent(t *testing.T) {
	sink := new(pipelinetest.LogSink)
	logger := sink.Logger().With("shared", 1)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 50 {
				logger.Info("msg", "i", i)
				_ = sink.Find(pipelinetest.Message("msg"))
			}
		})
	}
	waited := make(chan bool)
	go func() {
		_, found := sink.WaitFor(5*time.Second, func(r pipelinetest.Record) bool { return len(sink.Find(pipelinetest.Message("msg"))) >= 400 })
		waited <- found
	}()
	wg.Wait()
	if !<-waited {
		t.Error("WaitFunc did not see the 400th record")
	}
	if n := len(sink.Records()); n != 400 {
		t.Errorf("Records() = %d, want 400", n)
	}
}

// fatalRecorder is a testing.TB whose Fatalf records instead of stopping.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper()                        {}
func (f *fatalRecorder) Fatalf(format string, a ...any) { f.msg = fmt.Sprintf(format, a...) }

// TestHandlerStarted: a start reported on the channel is a start (its
// value returned), even while the chain runs; the chain returned with
// nothing reported is no start; neither for 10 s fails the test.
func TestHandlerStarted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		started := make(chan int, 1)
		calls := 0
		running := func() int {
			calls++
			if calls == 3 {
				started <- 7 // the handler starts while the test polls
			}
			return 1
		}
		if v, ok := pipelinetest.HandlerStarted(t, started, running); !ok || v != 7 {
			t.Errorf("a start reported after two polls: %d, %v; want 7, true", v, ok)
		}
		if _, ok := pipelinetest.HandlerStarted(t, started, func() int { return 0 }); ok {
			t.Error("the chain returned and nothing was reported: a start, want none")
		}
		started <- 1
		if _, ok := pipelinetest.HandlerStarted(t, started, func() int { return 0 }); !ok {
			t.Error("a start reported before the chain returned: none, want a start")
		}
		f := &fatalRecorder{TB: t}
		begin := time.Now()
		if _, ok := pipelinetest.HandlerStarted(f, started, func() int { return 1 }); ok || f.msg == "" || time.Since(begin) < 10*time.Second {
			t.Errorf("neither for ever: %v after %v with %q; want no start and a failure after 10s", ok, time.Since(begin), f.msg)
		}
	})
}
