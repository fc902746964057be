package cluster_test

import (
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/resilience/cluster"
)

// ExampleStore_Window_lease counts an operation's 10,000 permits a second
// across replicas, each taking 200 of them per Redis round trip
// (Policy.LeasePermits) and admitting from them with no round trip. The
// kernel does this for "Scope": "cluster" with "LeasePermits": 200. It is
// compiled, not run: it needs a Redis at 127.0.0.1:6379.
func ExampleStore_Window_lease() {
	rdb := cluster.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	store := cluster.New(rdb, cluster.Config{})
	defer store.Close() // gives back the unused part of the share
	p := resilience.Policy{PermitLimit: 10000, Window: time.Second, Scope: resilience.ScopeCluster, LeasePermits: 200}
	w, err := store.Window("orders.create", p)
	if err != nil {
		log.Fatal(err)
	}
	limits := resilience.NewLimits("orders.create", p, resilience.WithSharedWindow(w))
	_ = limits // run it as the operation's middleware (a pipeline.Middleware)
}
