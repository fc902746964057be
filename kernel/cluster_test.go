package kernel_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/resilience/cluster"
	"github.com/sundial-go/sundial/resilience/cluster/redistest"
)

func TestClusterConfigErrorsFailNew(t *testing.T) {
	const root = "Sundial.Kernel.Resilience"
	tests := []struct{ name, config, want string }{
		{"unknown scope", wrap(`{"Scope":"global"}`), root + `.Scope: want "process" or "cluster", got "global"`},
		{"scope of the wrong type", wrap(`{"Operations":{"orders.create":{"Scope":1}}}`), root + `.Operations.orders.create.Scope: want "process" or "cluster", got a number`},
		{"unknown OnStoreError", wrap(`{"Operations":{"orders.create":{"OnStoreError":"fail"}}}`), root + `.Operations.orders.create.OnStoreError: want "local", "open" or "closed", got "fail"`},
		{"store timeout too long", wrap(`{"StoreTimeoutMs":600000}`), root + `.StoreTimeoutMs: must be greater than 0 and at most 60000`},
		{"store timeout zero", wrap(`{"StoreTimeoutMs":0}`), root + `.StoreTimeoutMs: must be greater than 0`},
		{"store timeout below a microsecond", wrap(`{"StoreTimeoutMs":0.0000001}`), root + `.StoreTimeoutMs: must be at least 0.001 (1 µs)`},
		{"degrade after zero", wrap(`{"DegradeAfter":0}`), root + `.DegradeAfter: must be greater than 0, got 0`},
		{"degrade after a fraction", wrap(`{"Operations":{"orders.create":{"DegradeAfter":2.5}}}`), root + `.Operations.orders.create.DegradeAfter: want an integer, got 2.5`},
		{"degrade after too many", wrap(`{"Operations":{"orders.create":{"DegradeAfter":101}}}`), root + `.Operations.orders.create.DegradeAfter: 101 is too large (at most 100)`},
		{"degrade after a string", wrap(`{"DegradeAfter":"3"}`), root + `.DegradeAfter: want an integer, got a string`},
		{"replicas zero", wrap(`{"ExpectedReplicas":0}`), root + `.ExpectedReplicas: must be greater than 0`},
		{"headers not boolean", wrap(`{"RateLimitHeaders":"yes"}`), root + `.RateLimitHeaders: want a boolean, got a string`},
		{"cluster without redis", wrap(`{"Operations":{"orders.create":{"PermitLimit":5,"Scope":"cluster"}}}`),
			`Scope "cluster" needs Redis, and none is configured (set Sundial.Kernel.Redis or use kernel.WithRedis); cluster-scoped operations: orders.create`},
		{"cluster default without redis", wrap(`{"Scope":"cluster","ConcurrencyLimit":2}`),
			`cluster-scoped operations: orders.cancel, orders.create, orders.get`},
		{"redis without address", `{"Sundial":{"Kernel":{"Redis":{"DB":1}}}}`, `Sundial.Kernel.Redis.Address: required`},
		{"redis unknown key", `{"Sundial":{"Kernel":{"Redis":{"Address":"x:1","Password":"p"}}}}`, `Sundial.Kernel.Redis.Password: unknown key`},
		{"redis prefix with braces", `{"Sundial":{"Kernel":{"Redis":{"Address":"x:1","KeyPrefix":"a{b}"}}}}`, `Sundial.Kernel.Redis.KeyPrefix: want a non-empty prefix without braces`},
		{"redis password env unset", `{"Sundial":{"Kernel":{"Redis":{"Address":"x:1","PasswordEnv":"SUNDIAL_TEST_UNSET_PW"}}}}`, `PasswordEnv: environment variable SUNDIAL_TEST_UNSET_PW is not set`},
		{"redis address and addresses", `{"Sundial":{"Kernel":{"Redis":{"Address":"x:1","Addresses":["y:1"]}}}}`, `Sundial.Kernel.Redis.Addresses: set Address or Addresses, not both`},
		{"redis addresses empty", `{"Sundial":{"Kernel":{"Redis":{"Addresses":[]}}}}`, `Sundial.Kernel.Redis.Addresses: want an array of 1 to 64 host:port strings`},
		{"redis addresses not strings", `{"Sundial":{"Kernel":{"Redis":{"Addresses":["x:1",2]}}}}`, `Sundial.Kernel.Redis.Addresses[1]: want a host:port string`},
		{"redis cluster not boolean", `{"Sundial":{"Kernel":{"Redis":{"Address":"x:1","Cluster":"yes"}}}}`, `Sundial.Kernel.Redis.Cluster: want true or false`},
		{"redis cluster with a DB", `{"Sundial":{"Kernel":{"Redis":{"Address":"x:1","Cluster":true,"DB":2}}}}`, `Sundial.Kernel.Redis.DB: a Redis Cluster has database 0 only`},
		{"redis TLS unknown key", `{"Sundial":{"Kernel":{"Redis":{"Address":"x:1","TLS":{"Insecure":true}}}}}`, `Sundial.Kernel.Redis.TLS.Insecure: want a string`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var calls int
			k, err := resKernel(t, tt.config, &calls)
			if err == nil {
				k.Close()
				t.Fatalf("New accepted %s", tt.config)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q\nwant it to contain %q", err, tt.want)
			}
		})
	}
}

// TestClusterPolicyMerges: the cluster keys inherit from the section's
// root like every other key, and process is the default scope.
func TestClusterPolicyMerges(t *testing.T) {
	var calls int
	k, err := resKernel(t, wrap(`{"StoreTimeoutMs":20,"OnStoreError":"closed","RateLimitHeaders":true,"DegradeAfter":7,
		"Operations":{"orders.create":{"PermitLimit":5,"ExpectedReplicas":3}}}`), &calls)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	p := k.PolicyFor("orders.create")
	if p.Scope != resilience.Scope("") || p.StoreTimeout != 20*time.Millisecond || p.OnStoreError != "closed" ||
		!p.RateLimitHeaders || p.ExpectedReplicas != 3 || p.DegradeAfter != 7 {
		t.Fatalf("policy %+v", p)
	}
	if k.ClusterStore() != nil {
		t.Fatal("a store was made with no cluster-scoped operation")
	}
}

// TestClusterScopeAcrossKernels: three kernels (three replicas) sharing one
// Redis admit PermitLimit calls per window between them, through the
// whole pipeline, and publish the quota when RateLimitHeaders is on.
func TestClusterScopeAcrossKernels(t *testing.T) {
	srv := redistest.Start(t)
	config := `{"Sundial":{"Kernel":{"Redis":{"Address":"` + srv.Addr() + `","KeyPrefix":"kt"},
		"Resilience":{"Operations":{"orders.create":{"PermitLimit":6,"WindowSeconds":1000000000,"Scope":"cluster",
		"StoreTimeoutMs":2000,"RateLimitHeaders":true}}}}}}`
	ks := clusterKernels(t, 3, config)
	if ks[0].ClusterStore() == nil || ks[0].Redis() == nil {
		t.Fatal("no store")
	}
	// A window of 1e9 s (its boundaries are in 2001 and 2033): the burst
	// is in one window however long it takes.
	var ok, limited atomic.Int64
	var wg sync.WaitGroup
	for i := range 18 {
		wg.Go(func() {
			out := ks[i%3].Op("orders.create").Invoke(t.Context(), kernel.Unary{Input: new("x")})
			q, has := out.Invocation.Reply().Quota()
			if !has || q.Limit != 6 || q.Window != 1e9*time.Second {
				t.Errorf("quota %+v %v", q, has)
			}
			switch {
			case out.Err == nil:
				ok.Add(1)
			case pipeline.AsError(out.Err).Code() == resilience.CodeRateLimited:
				limited.Add(1)
				if ra, _ := pipeline.AsError(out.Err).RetryAfter(); q.Remaining != 0 || q.Reset <= 0 || ra < q.Reset {
					t.Errorf("rejected with quota %+v, retry-after %v", q, ra)
				}
			default:
				t.Errorf("outcome %v", out.Err)
			}
		})
	}
	wg.Wait()
	if ok.Load() != 6 || limited.Load() != 12 {
		t.Fatalf("admitted %d, rate limited %d of 18 across 3 kernels; want 6 and 12", ok.Load(), limited.Load())
	}
}

// TestWithRedisClient: a client handed in is used and not closed by Close.
func TestWithRedisClient(t *testing.T) {
	srv := redistest.Start(t)
	rdb := cluster.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	var calls int
	k, err := resKernel(t, wrap(`{"Operations":{"orders.create":{"ConcurrencyLimit":1,"Scope":"cluster"}}}`), &calls, kernel.WithRedis(rdb))
	if err != nil {
		t.Fatal(err)
	}
	out := k.Op("orders.create").Invoke(t.Context(), kernel.Unary{Input: new("x")})
	if out.Err != nil {
		t.Fatal(out.Err)
	}
	if err := k.Close(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("Close closed a client it did not make: %v", err)
	}
}

// clusterKernel serves orders.create (answers "ok") under config.
func clusterKernel(config string, opts ...kernel.Option) (*kernel.Kernel, error) {
	reg := operations.NewRegistry()
	if err := operations.Register(reg, operations.Descriptor{ID: "orders.create"}, func(ctx context.Context, in string) (string, error) {
		return "ok", nil
	}); err != nil {
		return nil, err
	}
	return kernel.New(append([]kernel.Option{kernel.WithRegistry(reg), kernel.WithConfigJSON([]byte(config))}, opts...)...)
}

// TestWithRedisTypedNil: a typed-nil client is no client: New fails
// clearly for a cluster-scoped operation instead of crashing later.
func TestWithRedisTypedNil(t *testing.T) {
	var rdb *redis.Client
	_, err := clusterKernel(wrap(`{"Operations":{"orders.create":{"PermitLimit":1,"Scope":"cluster"}}}`), kernel.WithRedis(rdb))
	if err == nil || !strings.Contains(err.Error(), `Scope "cluster" needs Redis`) {
		t.Fatalf("New with a typed-nil client: %v", err)
	}
}
