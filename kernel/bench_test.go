package kernel_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/kernel/propagation"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/resilience/cluster"
	"github.com/sundial-go/sundial/resilience/cluster/redistest"
)

// The pipeline benchmarks measure one in-process call of a no-op operation
// through kernel.Call, side by side with the two floors it is judged
// against:
//
//   - floor-direct: the handler called directly (what the call itself costs);
//   - floor-withtimeout: the handler under a bare context.WithTimeout of 1 s
//     and its cancel (what any deadline costs in Go);
//   - passthrough: an operation with nothing configured, called without a
//     deadline (see benchConfigs for what the kernel still enforces);
//   - deadline: the operation's TimeoutSeconds is 1, nothing else;
//   - full: TimeoutSeconds 1 plus a breaker, a fixed-window rate limit and
//     a concurrency limit, all high enough never to reject;
//   - adaptive: full with an adaptive concurrency limit instead of the
//     static one (its controller samples every call and computes a limit
//     every window; its MinLimit keeps it from ever rejecting).
//
// The kernel runs with its defaults otherwise: its telemetry is on, with
// otel's global no-op providers (BenchmarkTelemetry measures
// it with the SDK). The names are stable so that runs compare with
// benchstat; see docs/performance.md.

const benchOp = "bench.noop"

type benchIn struct{}

type benchOut struct{}

// benchHandler is the operation's handler: it does nothing.
var benchHandler = func(context.Context, benchIn) (benchOut, error) { return benchOut{}, nil }

// benchConfigs are the kernel configurations of the kernel cases.
var benchConfigs = map[string]string{
	// Nothing configured for the operation. The kernel-wide cap
	// (MaxTimeoutSeconds, default 300) still bounds the call.
	"passthrough": `{}`,
	"deadline":    `{"Sundial":{"Kernel":{"Resilience":{"Operations":{"bench.noop":{"TimeoutSeconds":1}}}}}}`,
	"full": `{"Sundial":{"Kernel":{"Resilience":{"Operations":{"bench.noop":{
		"TimeoutSeconds":1,
		"FailureThreshold":5,"BreakSeconds":1,
		"PermitLimit":1000000000,"WindowSeconds":3600,
		"ConcurrencyLimit":1000000}}}}}}`,
	"adaptive": `{"Sundial":{"Kernel":{"Resilience":{"Operations":{"bench.noop":{
		"TimeoutSeconds":1,
		"FailureThreshold":5,"BreakSeconds":1,
		"PermitLimit":1000000000,"WindowSeconds":3600,
		"ConcurrencyLimit":"adaptive","Adaptive":{"MinLimit":1000000,"MaxLimit":1000000}}}}}}}`,
}

// benchCases are the cases of BenchmarkPipeline and BenchmarkPipelineParallel, in order.
var benchCases = []string{"floor-direct", "floor-withtimeout", "passthrough", "deadline", "full", "adaptive"}

// newBenchKernel returns a kernel serving benchOp with fn under the JSON
// config doc.
func newBenchKernel(b *testing.B, doc string, fn func(context.Context, benchIn) (benchOut, error), opts ...kernel.Option) *kernel.Kernel {
	b.Helper()
	reg := operations.NewRegistry()
	if err := operations.Register(reg, operations.Descriptor{ID: benchOp}, fn); err != nil {
		b.Fatal(err)
	}
	k, err := kernel.New(append([]kernel.Option{kernel.WithRegistry(reg), kernel.WithConfigJSON([]byte(doc))}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	return k
}

// benchCall returns the function one iteration of case name runs.
func benchCall(b *testing.B, name string) func(ctx context.Context) error {
	switch name {
	case "floor-direct":
		return func(ctx context.Context) error {
			_, err := benchHandler(ctx, benchIn{})
			return err
		}
	case "floor-withtimeout":
		return func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, time.Second)
			_, err := benchHandler(ctx, benchIn{})
			cancel()
			return err
		}
	}
	doc, ok := benchConfigs[name]
	if !ok {
		b.Fatalf("unknown case %q", name)
	}
	k := newBenchKernel(b, doc, benchHandler)
	return func(ctx context.Context) error {
		_, err := kernel.Call[benchIn, benchOut](ctx, k, benchOp, benchIn{})
		return err
	}
}

// BenchmarkPipeline measures one call per iteration on one goroutine.
func BenchmarkPipeline(b *testing.B) {
	for _, name := range benchCases {
		b.Run(name, func(b *testing.B) {
			call := benchCall(b, name)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := call(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPipelineParallel measures the same calls from GOMAXPROCS
// goroutines at once: per-operation state shared between cores (a lock, a
// contended atomic) shows here as ns/op above the serial figure.
func BenchmarkPipelineParallel(b *testing.B) {
	for _, name := range benchCases {
		b.Run(name, func(b *testing.B) {
			call := benchCall(b, name)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					if err := call(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkRejection measures a call turned away by each limit, with the
// operation's TimeoutSeconds set as in the full case so that the two
// compare: a rejection should cost no more than an admission.
func BenchmarkRejection(b *testing.B) {
	const deadline = `"TimeoutSeconds":1`
	cases := []struct {
		name, limits string
		code         string
	}{
		{"rate", `"PermitLimit":1,"WindowSeconds":3600`, resilience.CodeRateLimited},
		{"concurrency", `"ConcurrencyLimit":1`, resilience.CodeConcurrencyLimited},
		{"breaker", `"FailureThreshold":1,"BreakSeconds":3600`, resilience.CodeCircuitOpen},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			hold, held, release := make(chan bool, 1), make(chan struct{}), make(chan struct{})
			k := newBenchKernel(b,
				`{"Sundial":{"Kernel":{"Resilience":{"Operations":{"bench.noop":{`+deadline+`,`+c.limits+`}}}}}}`,
				func(context.Context, benchIn) (benchOut, error) {
					select {
					case <-hold: // the first call
						close(held)
						<-release
					default:
					}
					return benchOut{}, errors.New("down")
				})
			ctx := context.Background()
			// Use the limit up: the first call holds the only concurrency
			// slot until the end, takes the window's only permit, or
			// opens the breaker.
			var wg sync.WaitGroup
			if c.name == "concurrency" {
				hold <- true
				wg.Go(func() { _, _ = kernel.Call[benchIn, benchOut](ctx, k, benchOp, benchIn{}) })
				<-held
			} else {
				_, _ = kernel.Call[benchIn, benchOut](ctx, k, benchOp, benchIn{})
			}
			defer wg.Wait()
			defer close(release)
			_, err := kernel.Call[benchIn, benchOut](ctx, k, benchOp, benchIn{})
			if pipelinetest.CodeOf(err) != c.code {
				b.Fatalf("Call = %v, want a %s rejection", err, c.code)
			}
			b.ReportAllocs()
			for b.Loop() {
				_, _ = kernel.Call[benchIn, benchOut](ctx, k, benchOp, benchIn{})
			}
		})
	}
}

// BenchmarkLimits measures the deadline case alone ("none") and with one
// limit at a time, high enough never to reject: each limit's cost is its
// figure less none's, measured next to it.
func BenchmarkLimits(b *testing.B) {
	for _, c := range []struct{ name, limit string }{
		{"none", `"TimeoutSeconds":1`},
		{"breaker", `"FailureThreshold":5,"BreakSeconds":1`},
		{"rate", `"PermitLimit":1000000000,"WindowSeconds":3600`},
		{"rate-queue", `"PermitLimit":1000000000,"WindowSeconds":3600,"QueueLimit":10`},
		{"concurrency", `"ConcurrencyLimit":1000000`},
		{"concurrency-queue", `"ConcurrencyLimit":1000000,"ConcurrencyQueueLimit":10`},
	} {
		b.Run(c.name, func(b *testing.B) {
			limits := c.limit
			if c.name != "none" {
				limits = `"TimeoutSeconds":1,` + limits
			}
			k := newBenchKernel(b, `{"Sundial":{"Kernel":{"Resilience":{"Operations":{"bench.noop":{`+limits+`}}}}}}`, benchHandler)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := kernel.Call[benchIn, benchOut](ctx, k, benchOp, benchIn{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// nopExporter drops every span: the SDK does all its work but export.
type nopExporter struct{}

func (nopExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (nopExporter) Shutdown(context.Context) error                             { return nil }

// BenchmarkTelemetry measures the full case with the kernel's telemetry
// disabled (kernel.WithTelemetry(false)), with observability
// off (otel's global no-op providers, the kernel's default) and on (the
// OpenTelemetry SDK: every span sampled and handed to an exporter that
// drops it, metrics aggregated by the SDK's meter provider for a reader
// that is never collected).
func BenchmarkTelemetry(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSyncer(nopExporter{}))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	defer func() { _ = mp.Shutdown(context.Background()) }()
	cases := []struct {
		name string
		opts []kernel.Option
	}{
		{"disabled", []kernel.Option{kernel.WithTelemetry(false)}},
		{"noop", nil},
		{"sdk", []kernel.Option{kernel.WithTracerProvider(tp), kernel.WithMeterProvider(mp)}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			k := newBenchKernel(b, benchConfigs["full"], benchHandler, c.opts...)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := kernel.Call[benchIn, benchOut](ctx, k, benchOp, benchIn{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEdge measures the handle's three entries on the deadline
// case: Invoke (in-process, on the caller's goroutine, unguarded), Serve
// (the HTTP adapter's: guarded, on the caller's goroutine, answering
// through a callback) and Handle (the gRPC and CLI adapters': guarded, the
// chain on a goroutine of its own; handle-workers with kernel.WithWorkers).
// Serve and Handle add the guard that answers at the deadline whatever the
// handler does.
func BenchmarkEdge(b *testing.B) {
	k := newBenchKernel(b, benchConfigs["deadline"], benchHandler)
	in := &benchIn{}
	req := kernel.Unary{Input: in}
	op := k.Op(benchOp)
	ctx := context.Background()
	b.Run("invoke", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if o := op.Invoke(ctx, req); o.Err != nil {
				b.Fatal(o.Err)
			}
		}
	})
	b.Run("serve", func(b *testing.B) {
		var got error
		respond := func(o kernel.Outcome) { got = o.Err }
		b.ReportAllocs()
		for b.Loop() {
			op.Serve(ctx, req, respond)
			if got != nil {
				b.Fatal(got)
			}
		}
	})
	b.Run("handle", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if o := op.Handle(ctx, req); o.Err != nil {
				b.Fatal(o.Err)
			}
		}
	})
	kw := newBenchKernel(b, benchConfigs["deadline"], benchHandler, kernel.WithWorkers(time.Second))
	defer func() { _ = kw.Wait(ctx) }()
	opw := kw.Op(benchOp)
	b.Run("handle-workers", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if o := opw.Handle(ctx, req); o.Err != nil {
				b.Fatal(o.Err)
			}
		}
	})
}

// BenchmarkClusterAdmission measures one admission of a rate limit and of
// a concurrency limit with Scope cluster (Redis on loopback, started by
// the benchmark) next to the same limits with Scope process. It reports
// store round trips per call (roundtrips/op): one per admission for the
// window, two for a concurrency slot (take and give back, the give-back
// after the handler returned).
func BenchmarkClusterAdmission(b *testing.B) {
	srv := redistest.Start(b)
	for _, c := range []struct{ name, limit string }{
		{"rate-process", `"PermitLimit":1000000000,"WindowSeconds":3600`},
		{"rate-cluster", `"PermitLimit":1000000000,"WindowSeconds":3600,"Scope":"cluster","StoreTimeoutMs":1000`},
		{"concurrency-process", `"ConcurrencyLimit":1000000`},
		{"concurrency-cluster", `"ConcurrencyLimit":1000000,"Scope":"cluster","StoreTimeoutMs":1000`},
	} {
		b.Run(c.name, func(b *testing.B) {
			var trips atomic.Int64
			rdb := cluster.NewClient(&redis.Options{Addr: srv.Addr()})
			rdb.AddHook(tripHook{&trips})
			defer rdb.Close()
			k := newBenchKernel(b, `{"Sundial":{"Kernel":{"Resilience":{"Operations":{"bench.noop":{"TimeoutSeconds":1,`+c.limit+`}}}}}}`,
				benchHandler, kernel.WithRedis(rdb))
			defer k.Close()
			ctx := context.Background()
			b.ReportAllocs()
			trips.Store(0)
			for b.Loop() {
				if _, err := kernel.Call[benchIn, benchOut](ctx, k, benchOp, benchIn{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(trips.Load())/float64(b.N), "roundtrips/op")
		})
	}
}

// BenchmarkIdempotency measures what an operation's idempotency policy
// adds to a call (docs/idempotency.md, "Cost"), against "off" (the same
// operation with TimeoutSeconds 1 and no policy):
//
//   - on-no-key: the policy is on, the call sends no key (it runs as usual);
//   - memory-first / redis-first: every call sends a new key, so each one
//     claims a record, runs and stores its outcome (the memory store at
//     its default bounds evicts the oldest finished records once it holds
//     100,000; the key's baggage context is made inside the loop and
//     counted);
//   - memory-replay / redis-replay: every call sends the same key and gets
//     the stored outcome, replayed; the handler never runs.
//
// The redis cases run against a real redis-server on loopback (one Lua
// script per store call: roundtrips/op is 2 for a first call, claim and
// finish, and 1 for a replay).
func BenchmarkIdempotency(b *testing.B) {
	srv := redistest.Start(b)
	const (
		off = `{"Sundial":{"Kernel":{"Resilience":{"Operations":{"bench.noop":{"TimeoutSeconds":1}}}}}}`
		on  = `{"Sundial":{"Kernel":{"Resilience":{"Operations":{"bench.noop":{"TimeoutSeconds":1,"Idempotency":{}}}}}}}`
	)
	for _, c := range []struct {
		name, doc string
		redis     bool
		key       func(i int) string // nil: no key
	}{
		{"off", off, false, nil},
		{"on-no-key", on, false, nil},
		{"memory-first", on, false, func(i int) string { return "k-" + strconv.Itoa(i) }},
		{"memory-replay", on, false, func(int) string { return "k-same" }},
		{"redis-first", on, true, func(i int) string { return "k-" + strconv.Itoa(i) }},
		{"redis-replay", on, true, func(int) string { return "k-same" }},
	} {
		b.Run(c.name, func(b *testing.B) {
			var (
				trips atomic.Int64
				opts  []kernel.Option
			)
			if c.redis {
				rdb := cluster.NewClient(&redis.Options{Addr: srv.Addr()})
				rdb.AddHook(tripHook{&trips})
				defer rdb.Close()
				opts = append(opts, kernel.WithRedis(rdb))
			}
			run := strconv.FormatInt(time.Now().UnixNano(), 36) + "-" // keys of one run meet no earlier run's
			k := newBenchKernel(b, c.doc, benchHandler, opts...)
			defer k.Close()
			ctx := context.Background()
			b.ReportAllocs()
			trips.Store(0)
			i := 0
			for b.Loop() {
				cctx := ctx
				if c.key != nil {
					cctx, _ = propagation.WithIdempotencyKey(ctx, run+c.key(i))
				}
				i++
				if _, err := kernel.Call[benchIn, benchOut](cctx, k, benchOp, benchIn{}); err != nil {
					b.Fatal(err)
				}
			}
			if c.redis {
				b.ReportMetric(float64(trips.Load())/float64(b.N), "roundtrips/op")
			}
		})
	}
}

// tripHook counts the commands sent (the heartbeat included: one a second).
type tripHook struct{ n *atomic.Int64 }

func (h tripHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h tripHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}
func (h tripHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
