package kernel_test

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/resilience/cluster/redistest"
)

// TestLeaseAcrossKernels: three kernels on one Redis lease shares of 7
// from "PermitLimit": 60 per hour; twelve callers call until they are rate
// limited. Exactly 60 run across the three, and the server's own record
// of the window (its index and count) says 60.
func TestLeaseAcrossKernels(t *testing.T) {
	srv := redistest.Start(t)
	for attempt := 1; ; attempt++ {
		prefix := "lease-k" + strconv.Itoa(attempt)
		config := `{"Sundial":{"Kernel":{"Redis":{"Address":"` + srv.Addr() + `","KeyPrefix":"` + prefix + `"},
			"Resilience":{"Operations":{"orders.create":{"PermitLimit":60,"WindowSeconds":3600,"Scope":"cluster",
			"LeasePermits":7,"StoreTimeoutMs":2000}}}}}}`
		ks := clusterKernels(t, 3, config)
		var ok atomic.Int64
		var wg sync.WaitGroup
		for i := range 12 {
			wg.Go(func() {
				for {
					out := ks[i%3].Op("orders.create").Invoke(t.Context(), kernel.Unary{Input: new("x")})
					if out.Err != nil {
						if pipeline.AsError(out.Err).Code() != resilience.CodeRateLimited {
							t.Errorf("outcome %v", out.Err)
						}
						return
					}
					ok.Add(1)
				}
			})
		}
		wg.Wait()
		rdb := ks[0].Redis()
		rec, err := rdb.HMGet(t.Context(), "{"+prefix+":orders.create}:w:3600000000", "w", "u").Result()
		if err != nil {
			t.Fatal(err)
		}
		now, err := rdb.Time(t.Context()).Result()
		if err != nil {
			t.Fatal(err)
		}
		if rec[0] != strconv.FormatInt(now.Unix()/3600, 10) && attempt < 3 {
			continue // the calls crossed a window boundary
		}
		if ok.Load() != 60 || rec[1] != "60" {
			t.Fatalf("%d ran across 3 kernels, the store counted %v; want 60 and 60", ok.Load(), rec[1])
		}
		return
	}
}

// clusterKernels returns n kernels serving orders.create under config
// (clusterKernel), closed when the test ends.
func clusterKernels(t *testing.T, n int, config string) []*kernel.Kernel {
	t.Helper()
	var ks []*kernel.Kernel
	for range n {
		k, err := clusterKernel(config)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { k.Close() })
		ks = append(ks, k)
	}
	return ks
}
