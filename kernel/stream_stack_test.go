package kernel_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

// parkedFeed is the state of a watch handler shaped like the shop's
// orders.watch: a log of events under a mutex, and a channel closed when
// an event is added.
type parkedFeed struct {
	mu      sync.Mutex
	log     []Event
	created chan struct{}
	parked  chan struct{} // gets one value per handler about to park
}

// watch sends the events after in.From, then each new one, until its
// context ends: the shop's orders.watch, event for event.
func (f *parkedFeed) watch(ctx context.Context, in Watch, out *operations.Sender[Event]) error {
	seen := in.From
	for {
		f.mu.Lock()
		batch := f.log[min(seen, len(f.log)):]
		created := f.created
		f.mu.Unlock()
		for _, e := range batch {
			seen++
			if err := out.Send(e); err != nil {
				return err
			}
		}
		f.parked <- struct{}{}
		select {
		case <-created:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// parkedStreams is how many streams TestParkedStreamStack opens.
const parkedStreams = 200

// TestParkedStreamStack: a goroutine that holds an open stream, parked in
// a handler shaped like the shop's orders.watch, has a stack the
// collector shrinks to 4 KiB. The runtime halves a stack whose frames
// use less than a quarter of it, less 800 bytes: 1,248 bytes of 8 KiB.
// The kernel's frames under the handler must leave the handler that
// room. The test reads the stacks in use after collections, with every
// handler parked: the figure depends on the frames alone, not on the
// machine's load.
//
// The live heap a parked stream is as exact: the goroutine, its stream,
// its run, what its limits hold, its invocation, its clock and the watch
// of its caller's end. The test bounds it at 2,560 bytes in 20 objects.
//
// The race detector makes frames larger: under it, the test runs itself
// in a test binary built without it, in a fresh process each time (a
// process that opened streams before reuses their stacks). What the
// runtime holds besides the streams at the reads is the same in all the
// reads of a process, and only adds: in about one process of six, a
// goroutine of its own with a 32 KiB stack and a few kilobytes of heap
// (164 bytes of stack and 30 of heap a stream). So the test runs in up to
// five processes, and the streams meet the bound when one process
// measures them within it; every process's figures are kept in the log.
func TestParkedStreamStack(t *testing.T) {
	if raceOn {
		bin := filepath.Join(t.TempDir(), "kernel.test")
		build := exec.Command("go", "test", "-c", "-o", bin, ".")
		build.Env = append(os.Environ(), "GOFLAGS=") // no -race from the environment
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build without the race detector: %v\n%s", err, out)
		}
		var runs []string
		for range 5 {
			out, err := exec.Command(bin, "-test.count=1", "-test.run=^TestParkedStreamStack$", "-test.v").CombinedOutput()
			runs = append(runs, string(out))
			if err == nil {
				t.Logf("without the race detector, in %d processes:\n%s", len(runs), strings.Join(runs, "\n"))
				return
			}
		}
		t.Fatalf("without the race detector, in 5 processes:\n%s", strings.Join(runs, "\n"))
	}
	feed := &parkedFeed{log: []Event{{Seq: 1}}, created: make(chan struct{}),
		parked: make(chan struct{}, parkedStreams)}
	reg := operations.NewRegistry()
	if err := operations.RegisterServerStream(reg, operations.Descriptor{ID: "orders.watch"}, feed.watch); err != nil {
		t.Fatal(err)
	}
	// As the shop's stress test configures it: a rate limit, a deadline
	// cap, a pool and a send stall.
	k, err := kernel.New(kernel.WithRegistry(reg), kernel.WithConfigJSON([]byte(
		`{"Sundial":{"Kernel":{"MaxTimeoutSeconds":3600,"Resilience":{"PermitLimit":100000000,
		"WindowSeconds":1,"Operations":{"orders.watch":{"Stream":{"MaxStreams":1000,"SendStallSeconds":30}}}}}}}`)))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	op := k.Op("orders.watch")

	stack0, heap0 := stackInUse()
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for range parkedStreams {
		raw := &discardRaw{}
		wg.Go(func() {
			out := op.Stream(ctx, kernel.StreamCall{Input: &Watch{}, Raw: raw})
			if out.Err == nil {
				t.Error("a stream ended without its caller's cancel")
			}
		})
	}
	for range parkedStreams {
		<-feed.parked
	}
	waitParked(t, "parkedFeed).watch", parkedStreams)
	// Work of the runtime's or the test's own that is under way at one
	// read only (a goroutine, a stack not yet halved) adds to it, never
	// takes from it: the least of three reads is the streams'.
	stack1, heap1 := stackInUse()
	for range 2 {
		s, h := stackInUse()
		stack1 = min(stack1, s)
		if h.bytes < heap1.bytes {
			heap1 = h
		}
	}
	perStream := float64(stack1-stack0) / parkedStreams
	cancel()
	wg.Wait()
	heap := float64(heap1.bytes-heap0.bytes) / parkedStreams
	objects := float64(heap1.objects-heap0.objects) / parkedStreams
	t.Logf("%d parked streams, a stream: %.0f bytes of goroutine stack, %.0f bytes of heap in %.1f objects",
		parkedStreams, perStream, heap, objects)
	if heap > 2560 || objects > 20 {
		t.Errorf("%.0f bytes of heap in %.1f objects a parked stream, want at most 2,560 in 20", heap, objects)
	}
	// 4 KiB when the stack was halved, 8 KiB when it was not.
	if perStream > 6<<10 {
		t.Errorf("%.0f bytes of stack a parked stream, want 4 KiB: the frames under the handler grew", perStream)
	}
}

// waitParked waits until want goroutines whose stack names fn are parked in
// a select.
func waitParked(t *testing.T, fn string, want int) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n == len(buf) { // the dump did not fit
			buf = make([]byte, 2*len(buf))
			continue
		}
		parked := 0
		for g := range strings.SplitSeq(string(buf[:n]), "\n\n") {
			if strings.Contains(g, fn) && strings.Contains(g, " [select") {
				parked++
			}
		}
		if parked == want {
			return
		}
		runtime.Gosched()
	}
}

// heapInUse is the live heap: its bytes and objects.
type heapInUse struct{ bytes, objects int64 }

// stackInUse returns the bytes of goroutine stacks in use once
// collections have shrunk every stack they can: each halves a stack once.
// It returns the live heap too.
func stackInUse() (uint64, heapInUse) {
	var ms runtime.MemStats
	for range 3 {
		runtime.GC()
	}
	runtime.ReadMemStats(&ms)
	return ms.StackInuse, heapInUse{int64(ms.HeapAlloc), int64(ms.HeapObjects)}
}

// TestStreamPathsAgree: a streaming call runs its handler directly when
// the operation's limits are its only middleware, and at the end of its
// chain otherwise. Both give the same outcomes: the handler's error, its
// panic as UNEXPECTED, the pool's refusal, and the slot given back.
func TestStreamPathsAgree(t *testing.T) {
	fail := pipeline.NewError(pipeline.KindNotFound, "SHOP_NOT_FOUND_001", "gone")
	var mode atomic.Int32 // 0: returns fail; 1: panics; 2: waits for its context
	handler := func(ctx context.Context, _ Watch, out *operations.Sender[Event]) error {
		if err := out.Send(Event{Seq: 1}); err != nil {
			return err
		}
		switch mode.Load() {
		case 0:
			return fail
		case 1:
			panic("handler bug")
		}
		<-ctx.Done()
		return context.Cause(ctx)
	}
	for _, chained := range []bool{false, true} {
		t.Run(fmt.Sprintf("chained=%v", chained), func(t *testing.T) {
			reg := operations.NewRegistry()
			if err := operations.RegisterServerStream(reg, operations.Descriptor{ID: "orders.watch"}, handler); err != nil {
				t.Fatal(err)
			}
			var seen []string // the outcomes the application middleware saw
			opts := []kernel.Option{kernel.WithRegistry(reg), kernel.WithLogger(slog.New(slog.DiscardHandler)),
				kernel.WithConfigJSON([]byte(wrap(`{"Operations":{"orders.watch":{"Stream":{"MaxStreams":1}}}}`)))}
			if chained {
				opts = append(opts, kernel.UseAt(pipeline.StageHandle, pipeline.MiddlewareFunc(
					func(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
						out, err := next(ctx, inv)
						seen = append(seen, pipelinetest.CodeOf(err))
						return out, err
					})))
			}
			k, err := kernel.New(opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer k.Close()
			op := k.Op("orders.watch")
			call := func(ctx context.Context) kernel.Outcome {
				raw := newChanRaw(ctx)
				defer raw.collect()()
				return op.Stream(ctx, kernel.StreamCall{Input: &Watch{}, Raw: raw})
			}
			mode.Store(0)
			assertErr(t, call(t.Context()).Err, pipeline.KindNotFound, "SHOP_NOT_FOUND_001")
			mode.Store(1)
			assertErr(t, call(t.Context()).Err, pipeline.KindUnexpected, pipeline.CodeUnexpected)

			// One stream holds the pool's only slot: the next is refused.
			mode.Store(2)
			ctx, cancel := context.WithCancel(t.Context())
			held := make(chan kernel.Outcome, 1)
			go func() { held <- call(ctx) }()
			for k.Status().Operations[0].Streams != 1 {
				runtime.Gosched()
			}
			assertErr(t, call(t.Context()).Err, pipeline.KindUnavailable, "KERNEL_UNAVAILABLE_003")
			cancel()
			assertErr(t, (<-held).Err, pipeline.KindCanceled, "KERNEL_CANCELLED_001")
			if st := k.Status().Operations[0]; st.Streams != 0 {
				t.Fatalf("%d open streams, want 0", st.Streams)
			}
			mode.Store(0) // the slot was given back
			assertErr(t, call(t.Context()).Err, pipeline.KindNotFound, "SHOP_NOT_FOUND_001")
			if want := "[SHOP_NOT_FOUND_001 KERNEL_UNEXPECTED_001 KERNEL_CANCELLED_001 SHOP_NOT_FOUND_001]"; chained && fmt.Sprint(seen) != want {
				t.Fatalf("the middleware saw %v, want %v", seen, want)
			}
		})
	}
}

// TestStreamHandlerDeadline: on both paths, the handler's context has
// the invocation's deadline (here the operation's TimeoutSeconds) and
// ends when the caller leaves.
func TestStreamHandlerDeadline(t *testing.T) {
	for _, chained := range []bool{false, true} {
		t.Run(fmt.Sprintf("chained=%v", chained), func(t *testing.T) {
			got := make(chan time.Time, 1)
			reg := operations.NewRegistry()
			if err := operations.RegisterServerStream(reg, operations.Descriptor{ID: "orders.watch"},
				func(ctx context.Context, _ Watch, _ *operations.Sender[Event]) error {
					d, _ := ctx.Deadline()
					got <- d
					<-ctx.Done()
					return context.Cause(ctx)
				}); err != nil {
				t.Fatal(err)
			}
			opts := []kernel.Option{kernel.WithRegistry(reg), kernel.WithConfigJSON([]byte(
				wrap(`{"Operations":{"orders.watch":{"TimeoutSeconds":60,"Stream":{"MaxStreams":1}}}}`)))}
			k := newPathKernel(t, chained, opts...)
			ctx, cancel := context.WithCancel(t.Context())
			arrival := time.Now()
			outc := make(chan kernel.Outcome, 1)
			go func() {
				outc <- k.Op("orders.watch").Stream(ctx, kernel.StreamCall{Caller: kernel.Caller{Arrival: arrival},
					Input: &Watch{}, Raw: newChanRaw(ctx)})
			}()
			if d := <-got; !d.Equal(arrival.Add(60 * time.Second)) {
				t.Errorf("the handler's deadline %v, want the arrival plus 60 s", d)
			}
			cancel()
			out := <-outc
			assertErr(t, out.Err, pipeline.KindCanceled, "KERNEL_CANCELLED_001")
			if d, _ := out.Invocation.Deadline(); !d.Equal(arrival.Add(60 * time.Second)) {
				t.Errorf("the invocation's deadline %v, want the arrival plus 60 s", d)
			}
		})
	}
}
