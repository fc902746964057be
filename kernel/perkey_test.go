package kernel_test

import (
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/resilience/cluster/redistest"
)

// perKeyOps is orders.create limited to 3 calls per key in a window that
// no test run crosses (1e9 s: the next boundary is in 2033), so counts do
// not depend on how long a burst takes.
const perKeyOps = `"Resilience":{"Operations":{"orders.create":{"Scope":"%s","StoreTimeoutMs":2000,
	"PerKey":{"PermitLimit":3,"WindowSeconds":1000000000}}}}`

// perKeyRuns numbers the runs of TestPerKeyLimit in this process: each
// counts under key prefixes of its own, as the shared Redis Cluster keeps
// the last run's 1e9 s windows (go test -count).
var perKeyRuns atomic.Int64

// TestPerKeyLimit: the PerKey keys limit each tenant (the baggage member
// "tenant") separately. Process scope counts per kernel; cluster scope
// across three kernels sharing Redis — a single server, or a Redis
// Cluster named by Redis.Addresses or found from one node (Cluster true). A tenant over its limit gets 503
// KERNEL_UNAVAILABLE_002; a key that is not valid gets 400
// KERNEL_VALIDATION_008 and takes nothing.
func TestPerKeyLimit(t *testing.T) {
	scope := func(s string) string { return strings.Replace(perKeyOps, "%s", s, 1) }
	run := strconv.FormatInt(perKeyRuns.Add(1), 10)
	cases := []struct {
		name    string
		config  func(t *testing.T) string
		kernels int
		want    int // admitted per tenant across the kernels
	}{
		{"process", func(*testing.T) string { return `{"Sundial":{"Kernel":{` + scope("process") + `}}}` }, 3, 9},
		{"cluster on one server", func(t *testing.T) string {
			return `{"Sundial":{"Kernel":{"Redis":{"Address":"` + redistest.Start(t).Addr() + `","KeyPrefix":"pk1-` + run + `"},` + scope("cluster") + `}}}`
		}, 3, 3},
		{"cluster on a Redis Cluster", func(t *testing.T) string {
			addrs := `"` + strings.Join(redistest.SharedCluster(t).Addrs(), `","`) + `"`
			return `{"Sundial":{"Kernel":{"Redis":{"Addresses":[` + addrs + `],"KeyPrefix":"pk2-` + run + `"},` + scope("cluster") + `}}}`
		}, 3, 3},
		{"cluster on a Redis Cluster found from one node", func(t *testing.T) string {
			seed := redistest.SharedCluster(t).Addrs()[0]
			return `{"Sundial":{"Kernel":{"Redis":{"Address":"` + seed + `","Cluster":true,"KeyPrefix":"pk3-` + run + `"},` + scope("cluster") + `}}}`
		}, 3, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			config := tc.config(t)
			var ks []*kernel.Kernel
			for range tc.kernels {
				k, err := clusterKernel(config)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { k.Close() })
				ks = append(ks, k)
			}
			var admitted [4]atomic.Int64
			var wg sync.WaitGroup
			for tenant := range 4 {
				for i := range 12 {
					wg.Go(func() {
						out := ks[i%len(ks)].Op("orders.create").Invoke(withTenant("t"+strconv.Itoa(tenant)), kernel.Unary{Input: new("x")})
						switch code := pipelinetest.CodeOf(out.Err); {
						case out.Err == nil:
							admitted[tenant].Add(1)
						case code != resilience.CodeRateLimited:
							t.Errorf("tenant %d: %v, want admitted or %s", tenant, out.Err, resilience.CodeRateLimited)
						}
					})
				}
			}
			wg.Wait()
			for tenant := range 4 {
				if got := admitted[tenant].Load(); got != int64(tc.want) {
					t.Errorf("tenant %d: admitted %d of 12 across %d kernels, want %d", tenant, got, len(ks), tc.want)
				}
			}
			out := ks[0].Op("orders.create").Invoke(withTenant("t{x}"), kernel.Unary{Input: new("x")})
			if e := pipeline.AsError(out.Err); e == nil || e.Kind() != pipeline.KindValidation || e.Code() != "KERNEL_VALIDATION_008" {
				t.Fatalf("a key with braces: %v, want VALIDATION %s", out.Err, "KERNEL_VALIDATION_008")
			}
		})
	}
}

// TestPerKeyConfigErrors: the PerKey keys are checked like every other,
// with their key path.
func TestPerKeyConfigErrors(t *testing.T) {
	const root = "Sundial.Kernel.Resilience.Operations.orders.create.PerKey"
	for _, tc := range []struct{ name, section, want string }{
		{"limit zero", `{"PermitLimit":0}`, root + ".PermitLimit: must be greater than 0"},
		{"unknown key", `{"Limit":3}`, root + ".Limit: unknown key"},
		{"bad baggage member", `{"PermitLimit":3,"Baggage":"ten ant"}`, root + ".Baggage: want a baggage member name"},
		{"not an object", `3`, root + ": want an object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := clusterKernel(wrap(`{"Operations":{"orders.create":{"PerKey":` + tc.section + `}}}`))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}
