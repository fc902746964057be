package kernel_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"runtime/pprof"
	"testing"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
)

// TestStreamsStartNoContextGoroutines: a stream whose only middleware is
// its limits, under an operation's TimeoutSeconds and a caller that can
// leave, starts no goroutine of package context to follow the caller.
// Each open stream holds only its handler's goroutine.
func TestStreamsStartNoContextGoroutines(t *testing.T) {
	const streams = 20
	parked := make(chan struct{}, streams)
	reg := operations.NewRegistry()
	if err := operations.RegisterServerStream(reg, operations.Descriptor{ID: "orders.watch"},
		func(ctx context.Context, _ Watch, _ *operations.Sender[Event]) error {
			parked <- struct{}{}
			<-ctx.Done()
			return context.Cause(ctx)
		}); err != nil {
		t.Fatal(err)
	}
	k, err := kernel.New(kernel.WithRegistry(reg), kernel.WithConfigJSON([]byte(wrap(
		fmt.Sprintf(`{"Operations":{"orders.watch":{"TimeoutSeconds":60,"Stream":{"MaxStreams":%d}}}}`,
			streams)))))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan kernel.Outcome, streams)
	for range streams {
		go func() {
			done <- k.Op("orders.watch").Stream(ctx, kernel.StreamCall{Input: &Watch{}, Raw: newChanRaw(ctx)})
		}()
	}
	for range streams {
		<-parked
	}
	var b bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
	n := bytes.Count(b.Bytes(), []byte("context.(*cancelCtx).propagateCancel"))
	cancel()
	for range streams {
		<-done
	}
	if n != 0 {
		t.Fatalf("%d goroutines of package context follow the callers of %d streams, want 0", n, streams)
	}
}

// waitLimit is a limit that holds each call until its context ends, then
// turns it away with an error of its own.
type waitLimit struct{ waiting chan struct{} }

func (l *waitLimit) Acquire(ctx context.Context, _ *pipeline.Invocation) (resilience.Permit, error) {
	l.waiting <- struct{}{}
	<-ctx.Done()
	return resilience.Permit{}, pipeline.NewError(pipeline.KindUnavailable, "APP_WAIT_001", "Gave up waiting.")
}

// TestStreamLimitWaitAttributed: a caller that leaves while a limit holds
// its stream's call gets CANCELLED on both paths, whatever error the
// limit returns then, as a unary call does.
func TestStreamLimitWaitAttributed(t *testing.T) {
	for _, chained := range []bool{false, true} {
		t.Run(fmt.Sprintf("chained=%v", chained), func(t *testing.T) {
			l := &waitLimit{waiting: make(chan struct{}, 1)}
			reg := unreachedWatch(t)
			opts := []kernel.Option{kernel.WithRegistry(reg),
				kernel.WithLimitKind("wait", func(string, json.RawMessage) (resilience.Limit, error) { return l, nil }),
				kernel.WithConfigJSON([]byte(wrap(`{"Operations":{"orders.watch":{"Limits":{"wait":{}}}}}`)))}
			k := newPathKernel(t, chained, opts...)
			ctx, cancel := context.WithCancel(t.Context())
			outc := make(chan kernel.Outcome, 1)
			go func() {
				outc <- k.Op("orders.watch").Stream(ctx, kernel.StreamCall{Input: &Watch{}, Raw: newChanRaw(ctx)})
			}()
			<-l.waiting
			cancel()
			assertErr(t, (<-outc).Err, pipeline.KindCanceled, "KERNEL_CANCELLED_001")
		})
	}
}

// newPathKernel returns a kernel of opts that runs orders.watch on the
// direct path, or on the chain path (chained) with an application
// middleware that passes each call on.
func newPathKernel(t *testing.T, chained bool, opts ...kernel.Option) *kernel.Kernel {
	t.Helper()
	if chained {
		opts = append(opts, kernel.UseAt(pipeline.StageHandle, pipeline.MiddlewareFunc(
			func(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
				return next(ctx, inv)
			})))
	}
	k, err := kernel.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Close() })
	return k
}

// ctxPanicLimit is a limit that keeps its call's context, then panics.
type ctxPanicLimit struct{ ctx context.Context }

func (l *ctxPanicLimit) Acquire(ctx context.Context, _ *pipeline.Invocation) (resilience.Permit, error) {
	l.ctx = ctx
	panic("ctxPanicLimit")
}

// TestStreamLimitPanicEndsItsContext: when a limit panics, the call's
// outcome is UNEXPECTED and the context the limit had has ended, on both
// paths, as the call has.
func TestStreamLimitPanicEndsItsContext(t *testing.T) {
	for _, chained := range []bool{false, true} {
		t.Run(fmt.Sprintf("chained=%v", chained), func(t *testing.T) {
			l := &ctxPanicLimit{}
			reg := unreachedWatch(t)
			k := newPathKernel(t, chained, kernel.WithRegistry(reg),
				kernel.WithLogger(slog.New(slog.DiscardHandler)),
				kernel.WithLimitKind("panic", func(string, json.RawMessage) (resilience.Limit, error) { return l, nil }),
				kernel.WithConfigJSON([]byte(wrap(
					`{"Operations":{"orders.watch":{"TimeoutSeconds":60,"Limits":{"panic":{}}}}}`))))
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			out := k.Op("orders.watch").Stream(ctx, kernel.StreamCall{Input: &Watch{}, Raw: newChanRaw(ctx)})
			assertErr(t, out.Err, pipeline.KindUnexpected, pipeline.CodeUnexpected)
			if l.ctx == nil || l.ctx.Err() == nil {
				t.Errorf("the limit's context has not ended after the call returned")
			}
		})
	}
}

// unreachedWatch returns a registry of orders.watch, whose handler must
// not run.
func unreachedWatch(t *testing.T) *operations.Registry {
	t.Helper()
	reg := operations.NewRegistry()
	if err := operations.RegisterServerStream(reg, operations.Descriptor{ID: "orders.watch"},
		func(context.Context, Watch, *operations.Sender[Event]) error {
			t.Error("the handler ran")
			return nil
		}); err != nil {
		t.Fatal(err)
	}
	return reg
}
