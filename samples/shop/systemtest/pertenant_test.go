package systemtest

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/resilience/cluster/redistest"
	"github.com/sundial-go/sundial/samples/shop/internal/shopcmd"
)

// perTenantOps is orders.create limited to 10 calls per tenant (the
// "tenant" member of the caller's W3C baggage header) per window,
// counted across the replicas. The window is 1e9 s long (its boundaries
// are in 2001 and 2033), so that every count below is exact however long
// a burst takes: nothing assumes a burst fits in wall-clock time.
const perTenantOps = `"orders.create":{"PermitLimit":1000000,"ConcurrencyLimit":1000,"Scope":"cluster","StoreTimeoutMs":2000,
	"PerKey":{"PermitLimit":10,"WindowSeconds":1000000000}}`

// perTenantKey is the Redis key of a tenant's window of orders.create.
func perTenantKey(tenant string) string {
	return "{shop-e2e:orders.create|" + tenant + "}:w:1000000000000000"
}

// TestClusterShopsPerTenantLimit: three shop processes, one per-tenant
// limit of 10 per window, 50 tenants sending 15 orders each, on one Redis
// and on a Redis Cluster of three masters. Per tenant, at most 10 are
// admitted across the three shops and at least 9 — counted from the
// clients' answers, from the shops' handler logs, and from Redis's own
// record of the tenant's window (all of one window id). On the cluster,
// a master is then killed mid-load: every request is answered (201, or
// 503 with Retry-After and Problem Details), and once the shops are
// cluster-wide again the limit is exact for new tenants.
func TestClusterShopsPerTenantLimit(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		srv := redistest.Start(t)
		cfg := `{"Sundial":{"Kernel":{"Redis":{"Address":"` + srv.Addr() + `","KeyPrefix":"shop-e2e"},
			"Resilience":{"Operations":{` + perTenantOps + `}}}}}`
		shops := startShops(t, cfg, 3)
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		defer rdb.Close()
		checkPerTenant(t, shops, rdb, "a")
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.StartCluster(t) // its own: a master is killed
		cfg := `{"Sundial":{"Kernel":{"Redis":{"Addresses":["` + strings.Join(c.Addrs(), `","`) + `"],"KeyPrefix":"shop-e2e"},
			"Resilience":{"Operations":{` + perTenantOps + `}}}}}`
		shops := startShops(t, cfg, 3)
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
		defer rdb.Close()
		checkPerTenant(t, shops, rdb, "a")

		// A master dies under load.
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
		defer client.CloseIdleConnections()
		var sent, answered atomic.Int64
		statuses := sync.Map{}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := range 12 {
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					sent.Add(1)
					a := post(context.Background(), client, shops[(w+i)%3].url+"/orders", `{"name":"widget","amount":1}`,
						"Baggage", "tenant=during-"+strconv.Itoa((w*7+i)%50))
					if !wellAnswered(t, a) {
						continue
					}
					answered.Add(1)
					v, _ := statuses.LoadOrStore(a.status, new(atomic.Int64))
					v.(*atomic.Int64).Add(1)
				}
			})
		}
		for sent.Load() < 100 {
			time.Sleep(time.Millisecond)
		}
		took := c.KillMaster(t, 0)
		waitShopsRecovered(t, shops) // the load goes on until every shop is cluster-wide again
		close(stop)
		wg.Wait()
		var table []string
		statuses.Range(func(k, v any) bool {
			table = append(table, fmt.Sprintf("%v: %d", k, v.(*atomic.Int64).Load()))
			return true
		})
		t.Logf("master killed mid-load: failover in %v; %d requests sent, %d answered (%s)",
			took.Round(time.Millisecond), sent.Load(), answered.Load(), strings.Join(table, ", "))
		if sent.Load() != answered.Load() {
			t.Fatalf("%d requests sent during the failover, %d answered", sent.Load(), answered.Load())
		}
		// Requests in flight at the stop may have degraded a shop again; the
		// exact phase starts once a pass of probes over the slots changes
		// nothing.
		for pass := 0; ; pass++ {
			before := degradedLines(shops)
			waitShopsRecovered(t, shops)
			for n := range 50 {
				for _, s := range shops {
					wellAnswered(t, post(context.Background(), client, s.url+"/orders", `{"name":"widget","amount":1}`,
						"Baggage", "tenant=probe-"+strconv.Itoa(n)))
				}
			}
			if degradedLines(shops) == before {
				break
			}
			if pass == 20 {
				t.Fatal("the shops kept degrading 20 passes after the failover")
			}
		}
		after := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()}) // one that knows the new master
		defer after.Close()
		checkPerTenant(t, shops, after, "after")
	})
}

// startShops starts n shop processes on config.
func startShops(t *testing.T, config string, n int) []*clusterShop {
	t.Helper()
	var shops []*clusterShop
	for range n {
		shops = append(shops, startClusterShop(t, config))
	}
	return shops
}

// waitShopsRecovered waits until no shop's log has a degraded line after
// its last recovered one, sending probe orders (a degraded operation
// tries the store on a call after RetryInterval); 15 s at most.
func waitShopsRecovered(t *testing.T, shops []*clusterShop) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(15 * time.Second)
	for i, s := range shops {
		for n := 0; !recoveredLast(s.stderr.String()); n++ {
			if time.Now().After(deadline) {
				t.Fatalf("shop %d not cluster-wide again 15 s after the failover:\n%s", i, s.stderr)
			}
			wellAnswered(t, post(context.Background(), client, s.url+"/orders", `{"name":"widget","amount":1}`,
				"Baggage", "tenant=probe-"+strconv.Itoa(n%50)))
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// degradedLines counts the shops' "cluster limits degraded" log lines.
func degradedLines(shops []*clusterShop) int {
	n := 0
	for _, s := range shops {
		n += strings.Count(s.stderr.String(), "cluster limits degraded")
	}
	return n
}

// recoveredLast reports whether a shop's log has no degraded line after
// its last recovered line.
func recoveredLast(log string) bool {
	return strings.LastIndex(log, "cluster limits recovered") >= strings.LastIndex(log, "cluster limits degraded")
}

// wellAnswered reports whether a is an order's answer: 201, or 503
// KERNEL_UNAVAILABLE_002 with Retry-After and Problem Details; anything
// else fails the test.
func wellAnswered(t *testing.T, a reply) bool {
	t.Helper()
	switch {
	case a.err != nil:
		t.Errorf("request lost: %v", a.err)
		return false
	case a.status == 201:
	case a.status == 503 && a.problem["code"] == resilience.CodeRateLimited && a.retry != "":
	default:
		t.Errorf("status %d, Retry-After %q, %v", a.status, a.retry, a.problem)
		return false
	}
	return true
}

// checkPerTenant sends 15 orders for each of 50 tenants named
// prefix-<n>, spread over the shops, and checks that 9 or 10 of each are
// admitted — by the answers, by the shops' handler logs, and by Redis's
// record of the tenant's window.
func checkPerTenant(t *testing.T, shops []*clusterShop, rdb redis.UniversalClient, prefix string) {
	t.Helper()
	const tenants, each = 50, 15
	var logged []string
	for _, s := range shops {
		logged = append(logged, s.handler)
	}
	before := handlerRunsPerTenant(t, logged)
	degradedBefore := degradedLines(shops)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	defer client.CloseIdleConnections()
	var admitted [tenants]atomic.Int64
	sem := make(chan struct{}, 24)
	var wg sync.WaitGroup
	for n := range tenants {
		for i := range each {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				a := post(context.Background(), client, shops[(n+i)%len(shops)].url+"/orders", `{"name":"widget","amount":1}`,
					"Baggage", "tenant="+prefix+"-"+strconv.Itoa(n))
				if wellAnswered(t, a) && a.status == 201 {
					admitted[n].Add(1)
				}
			})
		}
	}
	wg.Wait()
	if degradedLines(shops) != degradedBefore {
		t.Fatalf("a shop lost Redis for more than StoreTimeoutMs (2 s) during the burst; the shared count was not in force")
	}
	time.Sleep(100 * time.Millisecond) // the handler logs flush every 20 ms
	runs := handlerRunsPerTenant(t, logged)
	windows := map[string]int{}
	low, high := each, 0
	for n := range tenants {
		tenant := prefix + "-" + strconv.Itoa(n)
		got := int(admitted[n].Load())
		low, high = min(low, got), max(high, got)
		if got > 10 || got < 9 {
			t.Errorf("tenant %s: %d of %d admitted across %d shops, want 9 or 10 (limit 10)", tenant, got, each, len(shops))
		}
		if ran := runs[tenant] - before[tenant]; ran != got {
			t.Errorf("tenant %s: the handlers ran %d times, the clients got %d admissions", tenant, ran, got)
		}
		rec, err := rdb.HMGet(context.Background(), perTenantKey(tenant), "w", "u").Result()
		if err != nil {
			t.Fatal(err)
		}
		windows[fmt.Sprint(rec[0])]++
		if fmt.Sprint(rec[1]) != strconv.Itoa(got) {
			t.Errorf("tenant %s: Redis counts %v in window %v, the clients got %d admissions", tenant, rec[1], rec[0], got)
		}
	}
	if len(windows) != 1 {
		t.Errorf("tenants counted in windows %v, want one window id", windows)
	}
	t.Logf("%d tenants x %d orders on %d shops: %d to %d admitted per tenant (limit 10), in window ids %v of Redis's record",
		tenants, each, len(shops), low, high, windows)
}

// handlerRunsPerTenant counts the orders.create handler runs of each
// tenant in the shops' handler logs.
func handlerRunsPerTenant(t *testing.T, paths []string) map[string]int {
	t.Helper()
	n := map[string]int{}
	for _, r := range readHandlerLogs(t, paths...) {
		if r.op == "orders.create" && r.tenant != "" {
			n[r.tenant]++
		}
	}
	return n
}

// TestShopGRPCPerTenantLimit: over gRPC a per-key limit takes its key
// from the "baggage" metadata: two orders per tenant, then Unavailable
// with KERNEL_UNAVAILABLE_002 for that tenant only; a key with a brace
// is InvalidArgument KERNEL_VALIDATION_008.
func TestShopGRPCPerTenantLimit(t *testing.T) {
	g := startShopGRPC(t, shopcmd.ServeOptions{ConfigFile: writeConfig(t, `{"Sundial":{"Kernel":{"Resilience":{"Operations":{
		"orders.create":{"PermitLimit":1000,"PerKey":{"PermitLimit":2,"WindowSeconds":1000000000}}}}}}}`)})
	order := func(tenant string) *status.Status {
		ctx := metadata.AppendToOutgoingContext(t.Context(), "baggage", "tenant="+tenant)
		_, st := g.call(ctx, t, "shop.v1.Orders", "Create", `{"name":"widget","amount":1}`)
		return st
	}
	for i, tenant := range []string{"acme", "acme", "globex"} {
		if st := order(tenant); st != nil {
			t.Fatalf("order %d of %s: %v, want OK", i+1, tenant, st)
		}
	}
	if st := order("acme"); st.Code() != codes.Unavailable || errorInfoOf(st).GetReason() != resilience.CodeRateLimited {
		t.Fatalf("acme's third order: %v, want Unavailable %s", st, resilience.CodeRateLimited)
	}
	if st := order("globex"); st != nil {
		t.Fatalf("globex's second order: %v, want OK", st)
	}
	if st := order("a%7Bb"); st.Code() != codes.InvalidArgument || errorInfoOf(st).GetReason() != "KERNEL_VALIDATION_008" {
		t.Fatalf("a key with a brace: %v, want InvalidArgument %s", st, "KERNEL_VALIDATION_008")
	}
}
