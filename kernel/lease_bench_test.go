package kernel_test

import (
	"context"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

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
//
// "side-by-side/lease=N" runs the process kernel and one leasing N
// permits per round trip in alternating blocks of 256 calls. It reports
// each one's time per call and their throughput ratio (lease/process):
// on a shared machine the two then meet the same load, which separate
// runs do not. It also reports the ratio of the
// process's CPU time per call (getrusage: every goroutine of the
// process, the lease's Redis client included), which the machine's other
// work disturbs less than wall time.
func BenchmarkClusterLease(b *testing.B) {
	srv := redistest.Start(b)
	for _, c := range []struct{ name, policy string }{
		{"process", leaseBenchProcess},
		{"lease", leaseBenchCluster + `,"LeasePermits":1000`},
		{"per-call", leaseBenchCluster},
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

	for _, share := range []string{"1000", "10000"} {
		b.Run("side-by-side/lease="+share, func(b *testing.B) {
			rdb := cluster.NewClient(&redis.Options{Addr: srv.Addr()})
			defer rdb.Close()
			ks := [2]*kernel.Kernel{}
			for i, policy := range []string{leaseBenchProcess, leaseBenchCluster + `,"LeasePermits":` + share} {
				ks[i] = newBenchKernel(b, `{"Sundial":{"Kernel":{"Resilience":{"Operations":{"bench.noop":{`+policy+`}}}}}}`,
					benchHandler, kernel.WithRedis(rdb))
				defer ks[i].Close()
			}
			ctx := context.Background()
			const block = 256
			var spent, cpu [2]time.Duration
			for b.Loop() {
				for i, k := range ks {
					start, startCPU := time.Now(), processCPU()
					for range block {
						if _, err := kernel.Call[benchIn, benchOut](ctx, k, benchOp, benchIn{}); err != nil {
							b.Fatal(err)
						}
					}
					spent[i] += time.Since(start)
					cpu[i] += processCPU() - startCPU
				}
			}
			calls := float64(b.N * block)
			b.ReportMetric(float64(spent[0].Nanoseconds())/calls, "process-ns/call")
			b.ReportMetric(float64(spent[1].Nanoseconds())/calls, "lease-ns/call")
			b.ReportMetric(float64(spent[0])/float64(spent[1]), "lease/process-throughput")
			b.ReportMetric(float64(cpu[0])/float64(cpu[1]), "lease/process-cpu-throughput")
		})
	}
}

// The policies BenchmarkClusterLease compares: a limit that never binds,
// in process scope and leased in cluster scope.
const (
	leaseBenchProcess = `"TimeoutSeconds":1,"PermitLimit":1000000000,"WindowSeconds":3600`
	leaseBenchCluster = leaseBenchProcess + `,"Scope":"cluster","StoreTimeoutMs":1000`
)

// processCPU returns the CPU time the process has used (user and system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
