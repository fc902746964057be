package cluster_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/resilience/cluster"
	"github.com/sundial-go/sundial/resilience/cluster/redistest"
)

// TestShadowClusterWindow: two replicas share a shadow window of 5; 12
// calls in one window all run, 7 are counted as would-be rejections
// across the two, and the store counted 5 admissions (a shadow pass takes
// no permit). Its queue of 3 does not apply: a reservation would sleep
// for the next window, an hour away.
func TestShadowClusterWindow(t *testing.T) {
	srv := redistest.Start(t)
	p := resilience.Policy{PermitLimit: 5, Window: time.Hour, QueueLimit: 3, Shadow: true,
		Scope: resilience.ScopeCluster, StoreTimeout: 2 * time.Second}
	for attempt := 1; ; attempt++ {
		prefix := "shadow-" + strconv.Itoa(attempt)
		var ls []*resilience.Limits
		var r *replica
		for range 2 {
			r = newReplica(t, srv, cluster.Config{KeyPrefix: prefix})
			w, err := r.store.Window("orders.create", p)
			if err != nil {
				t.Fatal(err)
			}
			ls = append(ls, resilience.NewLimits("orders.create", p, resilience.WithSharedWindow(w)))
		}
		var ran atomic.Int64
		next := func(context.Context, *pipeline.Invocation) (any, error) { ran.Add(1); return nil, nil }
		for i := range 12 {
			if _, err := ls[i%2].Invoke(t.Context(), inv(), next); err != nil {
				t.Fatalf("call %d: %v", i+1, err)
			}
		}
		// The store's own record of the window: its index and permits taken.
		rec, err := r.rdb.HMGet(t.Context(), "{"+prefix+":orders.create}:w:3600000000", "w", "u").Result()
		if err != nil {
			t.Fatal(err)
		}
		now, _ := r.rdb.Time(t.Context()).Result()
		if rec[0] != strconv.FormatInt(now.Unix()/3600, 10) && attempt < 3 {
			continue // the calls crossed a window boundary
		}
		shadowed := ls[0].State().Shadowed.Rate + ls[1].State().Shadowed.Rate
		if ran.Load() != 12 || shadowed != 7 || rec[1] != "5" {
			t.Fatalf("%d ran, %d shadowed, store count %v; want 12, 7, 5", ran.Load(), shadowed, rec[1])
		}
		if rej := ls[0].State().Rejections.Rate + ls[1].State().Rejections.Rate; rej != 0 {
			t.Fatalf("%d counted as rejected, want 0", rej)
		}
		return
	}
}

// TestShadowClusterSlots: a shadow cluster concurrency limit of 1 on two
// replicas lets 3 calls run at once, and counts the 2 it would have
// turned away (its queue of 2 does not apply).
func TestShadowClusterSlots(t *testing.T) {
	srv := redistest.Start(t)
	p := resilience.Policy{ConcurrencyLimit: 1, ConcurrencyQueueLimit: 2, Shadow: true,
		Scope: resilience.ScopeCluster, StoreTimeout: 2 * time.Second}
	var ls []*resilience.Limits
	for range 2 {
		r := newReplica(t, srv, cluster.Config{KeyPrefix: "shadow-slots"})
		s, err := r.store.Slots("reports.export", p)
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, resilience.NewLimits("reports.export", p, resilience.WithSharedSlots(s)))
	}
	entered, release := make(chan struct{}), make(chan struct{})
	next := func(context.Context, *pipeline.Invocation) (any, error) {
		entered <- struct{}{}
		<-release
		return nil, nil
	}
	done := make(chan error, 3)
	for i := range 3 {
		go func() {
			_, err := ls[i%2].Invoke(t.Context(), inv(), next)
			done <- err
		}()
		<-entered // running: the next call finds the slot held
	}
	close(release)
	for range 3 {
		if err := <-done; err != nil {
			t.Fatalf("call: %v", err)
		}
	}
	shadowed := ls[0].State().Shadowed.Concurrency + ls[1].State().Shadowed.Concurrency
	if shadowed != 2 {
		t.Fatalf("%d counted as would-be rejections, want 2", shadowed)
	}
}
