package grpcadapter

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// TestReceiverServesTheNextCallAndExitsWhenIdle: with the bound on, a
// request message is read on a receiver goroutine, which then waits for
// the next message to read and exits once it has waited receiverIdle.
func TestReceiverServesTheNextCallAndExitsWhenIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := &Adapter{cfg: defaultConfig(), receivers: make(chan *reception)}
		reads := 0
		dec := func(any) error { reads++; return nil }
		if err := a.receive(dec, nil); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the receiver is back waiting for a message
		probe := &reception{dec: dec, done: make(chan error, 1)}
		select {
		case a.receivers <- probe: // the idle receiver takes the next message
		default:
			t.Fatal("no receiver waits for the next message after a call")
		}
		if err := <-probe.done; err != nil || reads != 2 {
			t.Fatalf("the idle receiver read: err %v, %d reads, want nil and 2", err, reads)
		}
		time.Sleep(receiverIdle - time.Nanosecond)
		synctest.Wait()
		select {
		case a.receivers <- probe:
			<-probe.done
		default:
			t.Fatalf("the receiver left before it was idle for %v", receiverIdle)
		}
		time.Sleep(receiverIdle)
		synctest.Wait() // the receiver has exited: the bubble holds no goroutine
		select {
		case a.receivers <- probe:
			t.Fatalf("a receiver still waits after %v idle", receiverIdle)
		default:
		}
	})
}

// TestServeBoundsTheReadOnly: without an interceptor a call is read and
// run by one receiver goroutine (serve). WithRecvTimeout bounds the read
// alone: a call whose message was read runs on past the bound and gets its
// handler's answer; a message that comes after the bound is answered
// DeadlineExceeded / KERNEL_TIMEOUT_001 at the bound and never runs. The
// calls after it, on reused receptions, are bounded afresh.
func TestServeBoundsTheReadOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const bound = 100 * time.Millisecond
		var ran atomic.Int32
		reg := operations.NewRegistry()
		slow := func(ctx context.Context, in struct{}) (struct{}, error) {
			ran.Add(1)
			time.Sleep(3 * bound)
			return struct{}{}, ctx.Err()
		}
		if err := operations.Register(reg, operations.Descriptor{ID: "work.slow"}, slow); err != nil {
			t.Fatal(err)
		}
		k, err := kernel.New(kernel.WithRegistry(reg), kernel.WithTelemetry(false))
		if err != nil {
			t.Fatal(err)
		}
		a, err := New(k, WithRecvTimeout(bound), WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		a.cfg.recvExact = true // the bound itself, without its jitter (TestRecvWaitIsJittered)
		m := a.methodOf("work.slow")
		defer func() {
			time.Sleep(receiverIdle) // the receivers exit, the test failed or not
			synctest.Wait()
		}()

		start := time.Now()
		if _, err := m.serve(t.Context(), func(any) error { return nil }); err != nil {
			t.Fatalf("a call read at once, running %v past the bound: %v, want its handler's answer", 2*bound, err)
		}
		if took := time.Since(start); took != 3*bound || ran.Load() != 1 {
			t.Fatalf("answered after %v with %d runs, want %v and 1", took, ran.Load(), 3*bound)
		}

		arrive := make(chan struct{})
		start = time.Now()
		_, err = m.serve(t.Context(), func(any) error { <-arrive; return nil })
		st := status.Convert(err)
		if st.Code() != codes.DeadlineExceeded || !strings.Contains(fmt.Sprint(st.Details()), pipeline.CodeTimeout) {
			t.Fatalf("a message not read in time: %v, want DeadlineExceeded %s", st, pipeline.CodeTimeout)
		}
		if took := time.Since(start); took != bound {
			t.Errorf("answered after %v, want %v", took, bound)
		}
		close(arrive) // the message comes after all: it is dropped
		synctest.Wait()
		if n := ran.Load(); n != 1 {
			t.Errorf("the handler ran %d times, want once: a message read after the bound ran", n)
		}

		// Receptions are reused: a later call, read at once, still runs
		// past the bound.
		for i := range 2 {
			start = time.Now()
			if _, err := m.serve(t.Context(), func(any) error { return nil }); err != nil {
				t.Errorf("call %d after the timeout: %v, want its handler's answer", i+3, err)
			}
			if took := time.Since(start); took != 3*bound {
				t.Errorf("call %d after the timeout answered after %v, want %v", i+3, took, 3*bound)
			}
		}
	})
}

// TestOwnInterceptorIsSkipped: the interceptor UnaryServerInterceptor
// returns, alone on a server, is recognised (the adapter's methods then
// take serve's single hand-off); any other function is not.
func TestOwnInterceptorIsSkipped(t *testing.T) {
	a := &Adapter{}
	if !isOwnUnary(a.UnaryServerInterceptor()) {
		t.Error("isOwnUnary(UnaryServerInterceptor()) = false, want true")
	}
	other := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return h(ctx, req)
	}
	if isOwnUnary(other) {
		t.Error("isOwnUnary(another interceptor) = true, want false")
	}
}

// TestRecvWaitIsJittered: each call's wait for its message is
// WithRecvTimeout's d plus up to d/4 drawn at random, so that calls
// stalled together are not answered together.
func TestRecvWaitIsJittered(t *testing.T) {
	const d = time.Second
	a := &Adapter{cfg: defaultConfig()}
	a.cfg.recvTimeout = d
	lo, hi := time.Duration(1<<62), time.Duration(0)
	for range 1000 {
		w := a.recvWait()
		if w < d || w > d+d/4 {
			t.Fatalf("recvWait() = %v, want within [%v, %v]", w, d, d+d/4)
		}
		lo, hi = min(lo, w), max(hi, w)
	}
	if hi-lo < d/8 {
		t.Errorf("1000 waits spread over %v, want at least %v of the %v allowed", hi-lo, d/8, d/4)
	}
	a.cfg.recvTimeout = 0
	if w := a.recvWait(); w != 0 {
		t.Errorf("recvWait() with the bound off = %v, want 0", w)
	}
}

// TestResetBeforeItsHandlerDoesNoWork: a call whose client reset it
// before its handler started (as a rapid-reset client does) is answered
// Canceled at once: its message is not read, no receiver goroutine
// starts, and no invocation runs. Its interceptors do not run either.
func TestResetBeforeItsHandlerDoesNoWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ran atomic.Int32
		reg := operations.NewRegistry()
		work := func(context.Context, struct{}) (struct{}, error) { ran.Add(1); return struct{}{}, nil }
		if err := operations.Register(reg, operations.Descriptor{ID: "work.any"}, work); err != nil {
			t.Fatal(err)
		}
		k, err := kernel.New(kernel.WithRegistry(reg), kernel.WithTelemetry(false))
		if err != nil {
			t.Fatal(err)
		}
		a, err := New(k, WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		m := a.methodOf("work.any")
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		var reads atomic.Int32
		dec := func(any) error { reads.Add(1); return status.Error(codes.Canceled, "context canceled") }
		icpt := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			t.Error("an interceptor ran for a call reset before its handler")
			return h(ctx, req)
		}
		for _, ic := range []grpc.UnaryServerInterceptor{nil, icpt} {
			_, err := m.handle(nil, ctx, dec, ic)
			if status.Code(err) != codes.Canceled {
				t.Errorf("a call reset before its handler: %v, want Canceled", err)
			}
		}
		synctest.Wait()
		if reads.Load() != 0 || ran.Load() != 0 {
			t.Errorf("%d reads and %d runs for calls reset before their handler, want none", reads.Load(), ran.Load())
		}
		select {
		case a.receivers <- &reception{dec: dec, done: make(chan error, 1)}:
			t.Error("a receiver goroutine started for a call reset before its handler")
		default:
		}
	})
}
