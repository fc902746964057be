package kernel_test

import (
	"context"
	"testing"
	"time"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience/cluster/redistest"
)

// TestMaxStreamsAcrossKernels: with Scope cluster, MaxStreams counts the
// streams open on every replica, through the cluster store's slots.
func TestMaxStreamsAcrossKernels(t *testing.T) {
	srv := redistest.Start(t)
	config := `{"Sundial":{"Kernel":{"Redis":{"Address":"` + srv.Addr() + `","KeyPrefix":"ks"},
		"Resilience":{"Operations":{"orders.watch":{"Scope":"cluster","StoreTimeoutMs":2000,
		"Stream":{"MaxStreams":2}}}}}}}`
	opened := make(chan struct{}, 2)
	reg := streamRegistry(t, 0, func(ctx context.Context) error {
		opened <- struct{}{}
		<-ctx.Done()
		return context.Cause(ctx)
	})
	var ks []*kernel.Kernel
	for range 2 {
		k, err := kernel.New(kernel.WithRegistry(reg), kernel.WithConfigJSON([]byte(config)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { k.Close() })
		ks = append(ks, k)
	}
	ctx, leave := context.WithCancel(t.Context())
	defer leave()
	outs := make(chan kernel.Outcome, 2)
	for _, k := range ks {
		go func() {
			outs <- k.Op("orders.watch").Stream(ctx, kernel.StreamCall{Input: &Watch{}, Raw: newChanRaw(ctx)})
		}()
		<-opened
	}
	for _, k := range ks {
		out := k.Op("orders.watch").Stream(t.Context(), kernel.StreamCall{Input: &Watch{}, Raw: newChanRaw(t.Context())})
		assertErr(t, out.Err, pipeline.KindUnavailable, "KERNEL_UNAVAILABLE_003")
	}
	leave()
	for range 2 {
		assertErr(t, (<-outs).Err, pipeline.KindCanceled, "KERNEL_CANCELLED_001")
	}
	// The slots are given back: a stream opens again. Each slot's
	// removal from the store runs after its stream returned, so a stream
	// opened at once may still be refused; it opens within the removal's
	// StoreTimeout.
	ctx2, leave2 := context.WithCancel(t.Context())
	defer leave2()
	for give := time.Now().Add(10 * time.Second); ; {
		out := make(chan kernel.Outcome, 1)
		go func() {
			out <- ks[1].Op("orders.watch").Stream(ctx2, kernel.StreamCall{Input: &Watch{}, Raw: newChanRaw(ctx2)})
		}()
		select {
		case <-opened:
			leave2()
			<-out
			return
		case o := <-out:
			assertErr(t, o.Err, pipeline.KindUnavailable, "KERNEL_UNAVAILABLE_003")
			if time.Now().After(give) {
				t.Fatal("no stream opened within 10 s of the others' end: their slots were not given back")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
