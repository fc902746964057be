package kernel_test

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
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
// The race detector makes frames larger: under it, the test runs itself
// in a test binary built without it.
func TestParkedStreamStack(t *testing.T) {
	if raceOn {
		cmd := exec.Command("go", "test", "-count=1", "-run=^TestParkedStreamStack$", ".")
		cmd.Env = append(os.Environ(), "GOFLAGS=") // no -race from the environment
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("without the race detector: %v\n%s", err, out)
		}
		return
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

	stack0 := stackInUse()
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
	perStream := float64(stackInUse()-stack0) / parkedStreams
	cancel()
	wg.Wait()
	t.Logf("%d parked streams: %.0f bytes of goroutine stack a stream", parkedStreams, perStream)
	// 4 KiB when the stack was halved, 8 KiB when it was not.
	if perStream > 6<<10 {
		t.Errorf("%.0f bytes of stack a parked stream, want 4 KiB: the frames under the handler grew", perStream)
	}
}

// waitParked waits until n goroutines whose stack names fn are parked in
// a select.
func waitParked(t *testing.T, fn string, n int) {
	t.Helper()
	buf := make([]byte, 1<<22)
	for {
		parked := 0
		for g := range strings.SplitSeq(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(g, fn) && strings.Contains(g, " [select") {
				parked++
			}
		}
		if parked == n {
			return
		}
		runtime.Gosched()
	}
}

// stackInUse returns the bytes of goroutine stacks in use once
// collections have shrunk every stack they can: each halves a stack once.
func stackInUse() uint64 {
	var ms runtime.MemStats
	for range 3 {
		runtime.GC()
	}
	runtime.ReadMemStats(&ms)
	return ms.StackInuse
}
