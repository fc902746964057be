package kernel_test

import (
	"bytes"
	"context"
	"fmt"
	"runtime/pprof"
	"testing"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
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
