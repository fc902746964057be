package kernel_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

// errReset is what chanRaw returns once aborted or once its caller left.
var errReset = errors.New("fake transport: stream reset")

// chanRaw is a transport stream over channels. out is unbuffered: a Send
// waits for the caller to read. in is the caller's messages; closed:
// io.EOF.
type chanRaw struct {
	caller  context.Context
	in      chan any
	out     chan any
	aborted chan struct{}
	once    sync.Once

	mu    sync.Mutex
	cause error
	beats int // heartbeats sent
}

func newChanRaw(caller context.Context) *chanRaw {
	return &chanRaw{caller: caller, in: make(chan any, 16), out: make(chan any),
		aborted: make(chan struct{})}
}

func (r *chanRaw) Send(m any) error {
	select {
	case r.out <- m:
		return nil
	case <-r.aborted:
		return errReset
	case <-r.caller.Done():
		return errReset
	}
}

func (r *chanRaw) Recv() (any, int, error) {
	select {
	case m, ok := <-r.in:
		if !ok {
			return nil, 0, io.EOF
		}
		return m, 10, nil
	case <-r.aborted:
		return nil, 0, errReset
	case <-r.caller.Done():
		return nil, 0, errReset
	}
}

func (r *chanRaw) Abort(cause error) {
	r.once.Do(func() {
		r.mu.Lock()
		r.cause = cause
		r.mu.Unlock()
		close(r.aborted)
	})
}

// collect reads the stream's messages as the caller until it is aborted,
// leaves or is stopped. The function it returns stops it and returns what it read.
func (r *chanRaw) collect() func() []any {
	var got []any
	stop, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		for {
			select {
			case m := <-r.out:
				got = append(got, m)
			case <-r.aborted:
				return
			case <-r.caller.Done():
				return
			case <-stop:
				return
			}
		}
	}()
	return func() []any {
		close(stop)
		<-exited
		return got
	}
}

// Event is a server stream's output; Watch its request; Line a client
// stream's input, constrained.
type (
	Watch struct{ From int }
	Event struct{ Seq int }
	Line  struct {
		SKU string `json:"sku" validate:"required"`
	}
	Done struct{ Lines int }
)

// streamRegistry registers a unary operation and the three kinds of
// stream, whose handlers behave as the test's hooks say.
func streamRegistry(t *testing.T, events int, watch func(ctx context.Context) error) *operations.Registry {
	t.Helper()
	reg := operations.NewRegistry()
	err := errors.Join(
		operations.Register(reg, operations.Descriptor{ID: "orders.get"},
			func(context.Context, Watch) (Event, error) { return Event{}, nil }),
		operations.RegisterServerStream(reg, operations.Descriptor{ID: "orders.watch"},
			func(ctx context.Context, in Watch, out *operations.Sender[Event]) error {
				for i := range events {
					if err := out.Send(Event{Seq: in.From + i}); err != nil {
						return err
					}
				}
				if watch != nil {
					return watch(ctx)
				}
				return nil
			}),
		operations.RegisterClientStream(reg, operations.Descriptor{ID: "orders.import"},
			func(ctx context.Context, in *operations.Receiver[Line]) (Done, error) {
				n := 0
				for {
					_, err := in.Recv()
					if err == io.EOF {
						return Done{Lines: n}, nil
					}
					if err != nil {
						return Done{}, err
					}
					n++
				}
			}),
		operations.RegisterBidiStream(reg, operations.Descriptor{ID: "support.chat"},
			func(ctx context.Context, in *operations.Receiver[Line], out *operations.Sender[Line]) error {
				for {
					m, err := in.Recv()
					if err == io.EOF {
						return nil
					}
					if err != nil {
						return err
					}
					if err := out.Send(Line{SKU: "re:" + m.SKU}); err != nil {
						return err
					}
				}
			}),
	)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

func streamKernel(t *testing.T, reg *operations.Registry, section string) *kernel.Kernel {
	t.Helper()
	k, err := kernel.New(kernel.WithRegistry(reg), kernel.WithConfigJSON([]byte(wrap(section))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close() })
	return k
}

// TestStreamKinds: Op.Stream runs each kind of stream end to end. A
// server stream's messages reach the transport in order, a client
// stream's reply is the outcome's Output, and a bidi stream answers each
// message.
func TestStreamKinds(t *testing.T) {
	k := streamKernel(t, streamRegistry(t, 3, nil), `{}`)
	ctx := t.Context()

	t.Run("server", func(t *testing.T) {
		raw := newChanRaw(ctx)
		got := raw.collect()
		out := k.Op("orders.watch").Stream(ctx, kernel.StreamCall{Input: &Watch{From: 7}, Raw: raw})
		if out.Err != nil {
			t.Fatalf("outcome %v", out.Err)
		}
		if sent, want := got(), []any{Event{7}, Event{8}, Event{9}}; fmt.Sprint(sent) != fmt.Sprint(want) {
			t.Fatalf("sent %v, want %v", sent, want)
		}
	})
	t.Run("client", func(t *testing.T) {
		raw := newChanRaw(ctx)
		for range 4 {
			raw.in <- &Line{SKU: "a"}
		}
		close(raw.in)
		out := k.Op("orders.import").Stream(ctx, kernel.StreamCall{Raw: raw})
		if out.Err != nil || out.Output != (Done{Lines: 4}) {
			t.Fatalf("outcome %v, %v; want {4}", out.Output, out.Err)
		}
	})
	t.Run("bidi", func(t *testing.T) {
		raw := newChanRaw(ctx)
		raw.in <- &Line{SKU: "x"}
		raw.in <- &Line{SKU: "y"}
		close(raw.in)
		got := raw.collect()
		out := k.Op("support.chat").Stream(ctx, kernel.StreamCall{Raw: raw})
		if out.Err != nil {
			t.Fatalf("outcome %v", out.Err)
		}
		if sent, want := fmt.Sprint(got()), "[{re:x} {re:y}]"; sent != want {
			t.Fatalf("sent %v, want %s", sent, want)
		}
	})
}

// TestStreamChecksEachMessage: the kernel checks the constraints of each
// of the caller's messages. A message that fails ends the stream with
// its VALIDATION outcome; the handler's Recv returns it.
func TestStreamChecksEachMessage(t *testing.T) {
	k := streamKernel(t, streamRegistry(t, 0, nil), `{}`)
	raw := newChanRaw(t.Context())
	raw.in <- &Line{SKU: "a"}
	raw.in <- &Line{} // sku is required
	raw.in <- &Line{SKU: "c"}
	close(raw.in)
	out := k.Op("orders.import").Stream(t.Context(), kernel.StreamCall{Raw: raw})
	assertErr(t, out.Err, pipeline.KindValidation, "KERNEL_VALIDATION_007")
	if out.Output != nil {
		t.Fatalf("output %v on a failed stream", out.Output)
	}
}

// TestUnaryTakesNoStream: a unary operation's handle refuses a stream
// with UNEXPECTED, and nothing runs; a streaming operation's handle
// refuses a unary call.
func TestUnaryTakesNoStream(t *testing.T) {
	k := streamKernel(t, streamRegistry(t, 1, nil), `{}`)
	raw := newChanRaw(t.Context())
	out := k.Op("orders.get").Stream(t.Context(), kernel.StreamCall{Input: &Watch{}, Raw: raw})
	assertErr(t, out.Err, pipeline.KindUnexpected, pipeline.CodeUnexpected)
	out = k.Op("orders.watch").Invoke(t.Context(), kernel.Unary{Input: &Watch{}})
	assertErr(t, out.Err, pipeline.KindUnexpected, pipeline.CodeUnexpected)
	out = k.Op("orders.watch").Stream(t.Context(), kernel.StreamCall{Input: &Watch{}})
	assertErr(t, out.Err, pipeline.KindUnexpected, pipeline.CodeUnexpected)
}

// TestStreamAdmission: a stream is admitted as a unary call is. The rate
// limit turns the second stream of a window away, the breaker opens on
// failures, and a priority naming no class is refused; none of them
// opens the stream.
func TestStreamAdmission(t *testing.T) {
	fail := errors.New("boom")
	t.Run("rate", func(t *testing.T) {
		k := streamKernel(t, streamRegistry(t, 0, nil), `{"Operations":{"orders.watch":{"PermitLimit":1,"WindowSeconds":60}}}`)
		op := k.Op("orders.watch")
		if out := op.Stream(t.Context(), kernel.StreamCall{Input: &Watch{}, Raw: newChanRaw(t.Context())}); out.Err != nil {
			t.Fatal(out.Err)
		}
		out := op.Stream(t.Context(), kernel.StreamCall{Input: &Watch{}, Raw: newChanRaw(t.Context())})
		assertErr(t, out.Err, pipeline.KindUnavailable, "KERNEL_UNAVAILABLE_002")
	})
	t.Run("breaker", func(t *testing.T) {
		ran := 0
		reg := streamRegistry(t, 0, func(context.Context) error { ran++; return fail })
		k := streamKernel(t, reg, `{"Operations":{"orders.watch":{"FailureThreshold":2}}}`)
		op := k.Op("orders.watch")
		for range 2 {
			out := op.Stream(t.Context(), kernel.StreamCall{Input: &Watch{}, Raw: newChanRaw(t.Context())})
			assertErr(t, out.Err, pipeline.KindUnexpected, pipeline.CodeUnexpected)
		}
		out := op.Stream(t.Context(), kernel.StreamCall{Input: &Watch{}, Raw: newChanRaw(t.Context())})
		assertErr(t, out.Err, pipeline.KindUnavailable, "KERNEL_UNAVAILABLE_004")
		if ran != 2 {
			t.Fatalf("the handler ran %d times, want 2", ran)
		}
	})
	t.Run("priority", func(t *testing.T) {
		k := streamKernel(t, streamRegistry(t, 0, nil), `{}`)
		out := k.Op("orders.watch").Stream(t.Context(), kernel.StreamCall{Caller: kernel.Caller{Priority: "urgent"},
			Input: &Watch{}, Raw: newChanRaw(t.Context())})
		assertErr(t, out.Err, pipeline.KindValidation, "KERNEL_VALIDATION_009")
	})
}

// TestStreamDeadline: the stream's deadline is the caller's, capped by
// the operation's TimeoutSeconds. It ends the stream with TIMEOUT at
// that instant, mid-stream; the breaker counts the operation's deadline
// as a failure and the caller's as neutral.
func TestStreamDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		wait := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
		k := streamKernel(t, streamRegistry(t, 1, wait), `{"Operations":{"orders.watch":{"TimeoutSeconds":2}}}`)
		op := k.Op("orders.watch")
		for _, c := range []struct {
			caller time.Duration
			want   time.Duration
		}{{0, 2 * time.Second}, {time.Second, time.Second}, {5 * time.Second, 2 * time.Second}} {
			raw := newChanRaw(t.Context())
			stop := raw.collect()
			start := time.Now()
			var caller kernel.Caller
			if c.caller > 0 {
				caller.Deadline = start.Add(c.caller)
			}
			out := op.Stream(t.Context(), kernel.StreamCall{Caller: caller, Input: &Watch{}, Raw: raw})
			stop()
			assertErr(t, out.Err, pipeline.KindTimeout, "KERNEL_TIMEOUT_001")
			if got := time.Since(start); got != c.want {
				t.Errorf("caller deadline %v: ended after %v, want %v", c.caller, got, c.want)
			}
		}
	})
}

// assertErr fails t unless err is of kind and code.
func assertErr(t *testing.T, err error, kind pipeline.Kind, code string) {
	t.Helper()
	if err == nil || pipelinetest.KindOf(err) != kind || pipelinetest.CodeOf(err) != code {
		t.Fatalf("outcome %v (%v %s), want %v %s", err, pipelinetest.KindOf(err), pipelinetest.CodeOf(err), kind, code)
	}
}

// TestStreamHandlerPanics: a streaming handler's panic is its UNEXPECTED
// outcome; its stream is closed and leaves the open streams.
func TestStreamHandlerPanics(t *testing.T) {
	reg := operations.NewRegistry()
	if err := operations.RegisterServerStream(reg, operations.Descriptor{ID: "orders.watch"},
		func(context.Context, Watch, *operations.Sender[Event]) error { panic("handler bug") }); err != nil {
		t.Fatal(err)
	}
	k, err := kernel.New(kernel.WithRegistry(reg), kernel.WithLogger(slog.New(slog.DiscardHandler)),
		kernel.WithConfigJSON([]byte(wrap(`{"Operations":{"orders.watch":{"Stream":{"MaxStreams":1,"IdleSeconds":60}}}}`))))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	for range 2 { // the slot is given back: the second is admitted too
		out := k.Op("orders.watch").Stream(t.Context(), kernel.StreamCall{Input: &Watch{}, Raw: newChanRaw(t.Context())})
		assertErr(t, out.Err, pipeline.KindUnexpected, pipeline.CodeUnexpected)
	}
	if st := k.Status().Operations[0]; st.Streams != 0 {
		t.Fatalf("%d open streams after the panics, want 0", st.Streams)
	}
}

// TestStreamWithoutBuiltIns: with the built-in middleware off, streams
// still run (with no clocks or pool) and Status reports every operation.
func TestStreamWithoutBuiltIns(t *testing.T) {
	k, err := kernel.New(kernel.WithRegistry(streamRegistry(t, 2, nil)),
		kernel.WithConfigJSON([]byte(`{"Sundial":{"Kernel":{"UseBuiltInMiddleware":false}}}`)))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	if st := k.Status(); len(st.Operations) != 4 {
		t.Fatalf("status of %d operations, want 4", len(st.Operations))
	}
	raw := newChanRaw(t.Context())
	got := raw.collect()
	out := k.Op("orders.watch").Stream(t.Context(), kernel.StreamCall{Input: &Watch{From: 1}, Raw: raw})
	if out.Err != nil || fmt.Sprint(got()) != "[{1} {2}]" {
		t.Fatalf("outcome %v, sent %v; want [{1} {2}]", out.Err, got())
	}
}
