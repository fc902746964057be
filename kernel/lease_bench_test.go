package kernel_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/resilience/cluster"
	"github.com/sundial-go/sundial/resilience/cluster/redistest"
)

// BenchmarkClusterLease measures one call of an operation whose rate
// limit is counted in this process ("process"), across replicas with a
// lease of 1,000 permits per round trip ("lease"), and across replicas
// with a round trip per call ("per-call"), side by side on one loopback
// Redis (docs/performance.md, "Leases"). The limit never binds: the
// figure is the cost of admitting. It reports every Redis command the
// kernel sent (the heartbeat included) per 1,000 admitted calls
// (cmds/1000calls).
func BenchmarkClusterLease(b *testing.B) {
	srv := redistest.Start(b)
	const limit = `"TimeoutSeconds":1,"PermitLimit":1000000000,"WindowSeconds":3600`
	for _, c := range []struct{ name, policy string }{
		{"process", limit},
		{"lease", limit + `,"Scope":"cluster","StoreTimeoutMs":1000,"LeasePermits":1000`},
		{"per-call", limit + `,"Scope":"cluster","StoreTimeoutMs":1000`},
	} {
		b.Run(c.name, func(b *testing.B) {
			var cmds atomic.Int64
			rdb := cluster.NewClient(&redis.Options{Addr: srv.Addr()})
			rdb.AddHook(tripHook{&cmds})
			defer rdb.Close()
			k := newBenchKernel(b, `{"Sundial":{"Kernel":{"Resilience":{"Operations":{"bench.noop":{`+c.policy+`}}}}}}`,
				benchHandler, kernel.WithRedis(rdb))
			defer k.Close()
			ctx := context.Background()
			b.ReportAllocs()
			cmds.Store(0)
			for b.Loop() {
				if _, err := kernel.Call[benchIn, benchOut](ctx, k, benchOp, benchIn{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(1000*float64(cmds.Load())/float64(b.N), "cmds/1000calls")
		})
	}
}
