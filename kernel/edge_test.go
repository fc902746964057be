package kernel_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/baggage"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/kernel/propagation"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience"
)

// stragglerKernel serves test.slow, whose handler ignores its context and
// returns only when release is closed (or at once for input "quick"),
// under config; its logs go to the returned sink.
func stragglerKernel(t *testing.T, config string, release <-chan struct{}) (*kernel.Kernel, *pipelinetest.LogSink) {
	t.Helper()
	reg := operations.NewRegistry()
	err := operations.Register(reg, operations.Descriptor{ID: "test.slow"}, func(ctx context.Context, in string) (string, error) {
		switch in {
		case "quick":
			return "quick", nil
		case "honour":
			<-ctx.Done()
			return "", ctx.Err()
		}
		<-release
		return "late", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sink := new(pipelinetest.LogSink)
	k, err := kernel.New(kernel.WithRegistry(reg), kernel.WithLogger(sink.Logger()), kernel.WithConfigJSON([]byte(config)))
	if err != nil {
		t.Fatal(err)
	}
	return k, sink
}

const slowConfig = `{"Sundial":{"Kernel":{"Resilience":{"Operations":{"test.slow":{"TimeoutSeconds":0.5,"ConcurrencyLimit":1}}}}}}`

// TestHandleAnswersAtTheDeadline: a handler that ignores its context does
// not hold its caller: Handle answers TIMEOUT at the deadline plus the
// settle window, the straggler keeps its concurrency slot until it
// returns, and its late result is logged once, with the operation.
func TestHandleAnswersAtTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		k, sink := stragglerKernel(t, slowConfig, release)
		start := time.Now()
		in := "ignore"
		o := k.Op("test.slow").Handle(t.Context(), kernel.Unary{Caller: kernel.Caller{Protocol: pipeline.ProtocolGRPC}, Input: &in})
		if pipelinetest.CodeOf(o.Err) != pipeline.CodeTimeout || !o.Expired || o.Output != nil {
			t.Fatalf("Handle = %v (expired %v, output %v), want %s at the deadline", o.Err, o.Expired, o.Output, pipeline.CodeTimeout)
		}
		if el := time.Since(start); el != 500*time.Millisecond+5*time.Millisecond {
			t.Errorf("answered after %v, want the deadline (500ms) plus the 5ms settle window", el)
		}
		if n := k.Running(); n != 1 {
			t.Errorf("Running() = %d while the straggler runs, want 1", n)
		}
		quick := "quick"
		if o := k.Op("test.slow").Handle(t.Context(), kernel.Unary{Input: &quick}); pipelinetest.CodeOf(o.Err) != resilience.CodeConcurrencyLimited {
			t.Errorf("second call while the straggler holds the only slot = %v, want %s", o.Err, resilience.CodeConcurrencyLimited)
		}
		if len(sink.Find(pipelinetest.Message("kernel: late result discarded"))) != 0 {
			t.Error("late result logged before the handler returned")
		}
		time.Sleep(time.Second)
		close(release)
		if err := k.Wait(t.Context()); err != nil {
			t.Fatalf("Wait = %v", err)
		}
		recs := sink.Find(pipelinetest.Message("kernel: late result discarded"))
		if len(recs) != 1 {
			t.Fatalf("late result logged %d times, want once", len(recs))
		}
		r := recs[0]
		if r.Attrs["operation"] != "test.slow" || r.Attrs["protocol"] != "grpc" || r.Attrs["code"] != pipeline.CodeTimeout || r.Attrs["handlerCode"] != "" {
			t.Errorf("late result record = %v, want operation test.slow, protocol grpc, code %s and the handler's own success (handlerCode \"\")", r.Attrs, pipeline.CodeTimeout)
		}
		if o := k.Op("test.slow").Handle(t.Context(), kernel.Unary{Input: &quick}); o.Err != nil || o.Output != "quick" {
			t.Errorf("call after the straggler returned = %v, %v; want its slot back", o.Output, o.Err)
		}
	})
}

// TestServeHonouringHandlerAnswersItself: a handler that honours its
// context returns at the deadline, within the settle window, and its own
// (attributed) outcome is the answer, given once, on the calling
// goroutine, with nothing logged as late.
func TestServeHonouringHandlerAnswersItself(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k, sink := stragglerKernel(t, slowConfig, nil)
		start := time.Now()
		in := "honour"
		var got []kernel.Outcome
		k.Op("test.slow").Serve(t.Context(), kernel.Unary{Input: &in}, func(o kernel.Outcome) { got = append(got, o) })
		if len(got) != 1 {
			t.Fatalf("respond called %d times, want once", len(got))
		}
		if o := got[0]; pipelinetest.CodeOf(o.Err) != pipeline.CodeTimeout || o.Expired {
			t.Errorf("Serve = %v (expired %v), want %s from the chain", o.Err, o.Expired, pipeline.CodeTimeout)
		}
		if el := time.Since(start); el != 500*time.Millisecond {
			t.Errorf("answered after %v, want 500ms", el)
		}
		if len(sink.Records()) != 0 {
			t.Errorf("logs = %v, want none", sink.Records())
		}
	})
}

// TestHandleCallerCancels: a caller that goes away while a handler that
// ignores its context runs gets CANCELLED after the settle window.
func TestHandleCallerCancels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		k, _ := stragglerKernel(t, slowConfig, release)
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(100*time.Millisecond, cancel)
		start := time.Now()
		in := "ignore"
		o := k.Op("test.slow").Handle(ctx, kernel.Unary{Input: &in})
		if pipelinetest.CodeOf(o.Err) != pipeline.CodeCanceled || !o.Expired {
			t.Errorf("Handle = %v (expired %v), want %s", o.Err, o.Expired, pipeline.CodeCanceled)
		}
		if el := time.Since(start); el != 105*time.Millisecond {
			t.Errorf("answered after %v, want 105ms", el)
		}
		close(release)
		if err := k.Wait(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

// TestRejectIsObserved: a call an adapter turned away before the pipeline
// runs nothing, yet gets a span and a real trace ID, like every answer.
func TestRejectIsObserved(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	ran := false
	k, err := kernel.New(kernel.WithTracerProvider(tp), kernel.WithRegistry(newRegistry(t, func(_ context.Context, in echoIn) (echoOut, error) {
		ran = true
		return echoOut(in), nil
	})))
	if err != nil {
		t.Fatal(err)
	}
	bad := pipeline.NewError(pipeline.KindValidation, "KERNEL_VALIDATION_002", "malformed deadline")
	ctx, http := context.Background(), kernel.Caller{Protocol: pipeline.ProtocolHTTP}
	for name, o := range map[string]kernel.Outcome{
		"Op.Reject": k.Op("test.echo").Reject(ctx, http, bad),
		"Kernel.Reject": k.Reject(ctx, kernel.Caller{Route: "GET /nowhere", Protocol: pipeline.ProtocolHTTP},
			pipeline.NewError(pipeline.KindNotFound, "KERNEL_NOT_FOUND_001", "no route")),
	} {
		if o.Err == nil || o.TraceID == "" || len(o.TraceID) != 32 {
			t.Errorf("%s = %v, trace ID %q; want the rejection with a trace ID", name, o.Err, o.TraceID)
		}
	}
	if _, err := kernel.Call[echoIn, echoOut](ctx, k, "no.such", echoIn{}); pipelinetest.CodeOf(err) != "KERNEL_NOT_FOUND_001" {
		t.Errorf("Call(no.such) = %v, want KERNEL_NOT_FOUND_001", err)
	}
	if ran {
		t.Error("the handler ran for a rejected call")
	}
	if n := len(rec.Ended()); n != 3 {
		t.Errorf("%d spans ended, want 3 (one per rejection)", n)
	}
}

type nilReader struct{ msg string }

// nilIs is an error whose Is method reads its receiver.
type nilIs struct{ target error }

func (e *nilIs) Error() string        { return "nilIs" }
func (e *nilIs) Is(target error) bool { return e.target == target }

func (e *nilReader) Error() string { return e.msg } // reads its receiver: panics on a nil one

// TestTypedNilOutcomes: a handler returning a typed nil — ours or a
// foreign type whose Error method reads its receiver — gives UNEXPECTED,
// never a panic, with the logger on.
func TestTypedNilOutcomes(t *testing.T) {
	for name, fn := range map[string]func(context.Context, echoIn) (echoOut, error){
		"pipeline": func(context.Context, echoIn) (echoOut, error) { var e *pipeline.Error; return echoOut{}, e },
		"foreign":  func(context.Context, echoIn) (echoOut, error) { var e *nilReader; return echoOut{}, e },
		"foreign Is, wrapped": func(context.Context, echoIn) (echoOut, error) {
			return echoOut{}, fmt.Errorf("x: %w", (*nilIs)(nil))
		},
		"zero Error": func(context.Context, echoIn) (echoOut, error) { return echoOut{}, new(pipeline.Error) },
	} {
		t.Run(name, func(t *testing.T) {
			sink := new(pipelinetest.LogSink)
			k, err := kernel.New(kernel.WithRegistry(newRegistry(t, fn)), kernel.WithLogger(sink.Logger()), kernel.WithAccessLog(sink.Logger()))
			if err != nil {
				t.Fatal(err)
			}
			o := k.Op("test.echo").Handle(context.Background(), kernel.Unary{Input: &echoIn{}})
			e, ok := o.Err.(*pipeline.Error)
			if !ok || e == nil || e.Kind() != pipeline.KindUnexpected {
				t.Fatalf("Handle = %#v, want a non-nil UNEXPECTED *pipeline.Error", o.Err)
			}
			_ = e.Error()
			if len(sink.Records()) == 0 {
				t.Error("no access-log record")
			}
		})
	}
}

// TestBaggageAndIdempotencyKey: the context's W3C baggage is copied onto
// the invocation, and an idempotency key from a protocol header reaches
// the handler's context as baggage, so downstream calls carry it.
func TestBaggageAndIdempotencyKey(t *testing.T) {
	var mu sync.Mutex
	var seen string
	var inv *pipeline.Invocation
	k, err := kernel.New(kernel.UseAt(pipeline.StageHandle, pipeline.MiddlewareFunc(func(ctx context.Context, i *pipeline.Invocation, next pipeline.Handler) (any, error) {
		mu.Lock()
		seen, inv = baggage.FromContext(ctx).Member(propagation.BaggageIdempotencyKey).Value(), i
		mu.Unlock()
		return next(ctx, i)
	})), kernel.WithRegistry(newRegistry(t, nil)))
	if err != nil {
		t.Fatal(err)
	}
	m, _ := baggage.NewMemberRaw("tenant", "acme")
	b, _ := baggage.New(m)
	ctx := baggage.ContextWithBaggage(context.Background(), b)
	o := k.Op("test.echo").Handle(ctx, kernel.Unary{Caller: kernel.Caller{IdempotencyKey: "key-1"}, Input: &echoIn{}})
	if o.Err != nil {
		t.Fatal(o.Err)
	}
	mu.Lock()
	defer mu.Unlock()
	if v, _ := inv.Baggage("tenant"); v != "acme" || inv.IdempotencyKey() != "key-1" || seen != "key-1" {
		t.Errorf("baggage tenant = %q, IdempotencyKey() = %q, context's key = %q; want acme, key-1, key-1", v, inv.IdempotencyKey(), seen)
	}
}

// TestMiddlewarePanicRecoveredAtTheEdge: a panic in a middleware run by
// Handle (on the guard's goroutine) becomes UNEXPECTED instead of taking
// the process down.
func TestMiddlewarePanicRecoveredAtTheEdge(t *testing.T) {
	k, err := kernel.New(kernel.WithRegistry(newRegistry(t, nil)), kernel.UseAt(pipeline.StageTenant,
		pipeline.MiddlewareFunc(func(context.Context, *pipeline.Invocation, pipeline.Handler) (any, error) {
			panic(errors.New("tenant middleware"))
		})))
	if err != nil {
		t.Fatal(err)
	}
	o := k.Op("test.echo").Handle(context.Background(), kernel.Unary{Input: &echoIn{}})
	if pipelinetest.KindOf(o.Err) != pipeline.KindUnexpected {
		t.Errorf("Handle = %v, want UNEXPECTED", o.Err)
	}
}

// TestStragglersBounded: with MaxStragglers 2, two handlers that ignore
// their context and outlive their deadline make the kernel shed every new
// call with 503 KERNEL_UNAVAILABLE_005 and a retry-after of 1 second,
// running nothing, until one returns; the count is Stragglers().
func TestStragglersBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		k, _ := stragglerKernel(t, `{"Sundial":{"Kernel":{"MaxStragglers":2,"Resilience":{"Operations":{"test.slow":{"TimeoutSeconds":0.5}}}}}}`, release)
		ignore, quick := "ignore", "quick"
		for i := range 2 {
			if o := k.Op("test.slow").Handle(t.Context(), kernel.Unary{Input: &ignore}); pipelinetest.CodeOf(o.Err) != pipeline.CodeTimeout {
				t.Fatalf("straggler %d = %v, want %s", i, o.Err, pipeline.CodeTimeout)
			}
		}
		if n := k.Stragglers(); n != 2 {
			t.Fatalf("Stragglers() = %d, want 2", n)
		}
		o := k.Op("test.slow").Handle(t.Context(), kernel.Unary{Input: &quick})
		e := pipeline.AsError(o.Err)
		retry, ok := e.RetryAfter()
		if e.Code() != kernel.CodeOverloaded || e.Kind() != pipeline.KindUnavailable || !ok || retry != time.Second {
			t.Fatalf("call at the bound = %v (retry %v, %v), want %s with a retry-after of 1s", o.Err, retry, ok, kernel.CodeOverloaded)
		}
		close(release)
		if err := k.Wait(t.Context()); err != nil {
			t.Fatal(err)
		}
		if n := k.Stragglers(); n != 0 {
			t.Errorf("Stragglers() after they returned = %d, want 0", n)
		}
		if o := k.Op("test.slow").Handle(t.Context(), kernel.Unary{Input: &quick}); o.Err != nil {
			t.Errorf("call after the stragglers returned = %v, want success", o.Err)
		}
	})
}

// TestOneOperationsStragglersDoNotShedTheOthers: with MaxStragglers 4,
// ten calls to an operation whose handler ignores its context, admitted
// together on time, all outlive their deadline: ten stragglers, past the
// bound. That operation is shed (503 KERNEL_UNAVAILABLE_005), but another
// still answers: it counts the first one's stragglers only up to half of
// MaxStragglers. A second operation may then straggle up to that half; with
// both at their half, every operation is shed, until they return.
func TestOneOperationsStragglersDoNotShedTheOthers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		reg := operations.NewRegistry()
		ignore := func(context.Context, string) (string, error) {
			<-release
			return "late", nil
		}
		for _, err := range []error{
			operations.Register(reg, operations.Descriptor{ID: "test.slow"}, ignore),
			operations.Register(reg, operations.Descriptor{ID: "test.other"}, ignore),
			operations.Register(reg, operations.Descriptor{ID: "test.ok"}, func(context.Context, string) (string, error) { return "ok", nil }),
		} {
			if err != nil {
				t.Fatal(err)
			}
		}
		k, err := kernel.New(kernel.WithRegistry(reg), kernel.WithConfigJSON([]byte(
			`{"Sundial":{"Kernel":{"MaxStragglers":4,"Resilience":{"TimeoutSeconds":0.1}}}}`)))
		if err != nil {
			t.Fatal(err)
		}
		call := func(op string) error {
			in := "x"
			return k.Op(op).Handle(t.Context(), kernel.Unary{Input: &in}).Err
		}
		var wg sync.WaitGroup
		for range 10 {
			wg.Go(func() {
				if err := call("test.slow"); pipelinetest.CodeOf(err) != pipeline.CodeTimeout {
					t.Errorf("slow call = %v, want %s", err, pipeline.CodeTimeout)
				}
			})
		}
		wg.Wait()
		if n := k.Stragglers(); n != 10 {
			t.Fatalf("Stragglers() = %d, want 10: every call admitted on time outlived its deadline", n)
		}
		if err := call("test.slow"); pipelinetest.CodeOf(err) != kernel.CodeOverloaded {
			t.Errorf("call to the straggling operation = %v, want %s", err, kernel.CodeOverloaded)
		}
		if err := call("test.ok"); err != nil {
			t.Errorf("call to another operation = %v, want success: one operation's stragglers shed it", err)
		}
		for i := range 2 {
			if err := call("test.other"); pipelinetest.CodeOf(err) != pipeline.CodeTimeout {
				t.Fatalf("second operation's straggler %d = %v, want %s", i, err, pipeline.CodeTimeout)
			}
		}
		for _, op := range []string{"test.other", "test.ok", "test.slow"} {
			if err := call(op); pipelinetest.CodeOf(err) != kernel.CodeOverloaded {
				t.Errorf("with two operations at half of MaxStragglers each, %s = %v, want %s", op, err, kernel.CodeOverloaded)
			}
		}
		close(release)
		if err := k.Wait(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := call("test.ok"); err != nil {
			t.Errorf("call after the stragglers returned = %v, want success", err)
		}
	})
}
