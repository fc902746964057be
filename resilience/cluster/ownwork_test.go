package cluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sundial-go/sundial/resilience/cluster"
	"github.com/sundial-go/sundial/resilience/cluster/redistest"
)

// seenCmd is one command as a cluster node's client received it.
type seenCmd struct {
	name string
	left time.Duration // until its context's deadline; -1: none
}

// deadlineHook reports each command a node receives, with its deadline.
type deadlineHook struct{ seen chan<- seenCmd }

func (h deadlineHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h deadlineHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		s := seenCmd{name: cmd.FullName(), left: -1}
		if d, ok := ctx.Deadline(); ok {
			s.left = time.Until(d)
		}
		select {
		case h.seen <- s:
		default:
		}
		return next(ctx, cmd)
	}
}
func (h deadlineHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestOwnWorkIsBounded: go-redis's own commands on a cluster node reach it
// with a deadline at most a second away. They are the slot map's reload,
// which runs without a deadline, and the command table's lookup, which
// runs under go-redis's own 5 s. So a hung node holds up neither for the
// minute-long read timeout. A caller's command keeps its own deadline.
func TestOwnWorkIsBounded(t *testing.T) {
	c := redistest.SharedCluster(t)
	rdb := cluster.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	defer rdb.Close()
	seen := make(chan seenCmd, 1024)
	rdb.OnNewNode(func(n *redis.Client) { n.AddHook(deadlineHook{seen}) })
	ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
	defer cancel()
	if err := rdb.Set(ctx, "own-work", "1", time.Minute).Err(); err != nil {
		t.Fatal(err) // loads the slot map (under ctx) and the command table
	}
	rdb.ReloadState(ctx) // in the background, without ctx
	var slots, lookups, callers int
	for slots < 2 || lookups < 1 || callers < 1 {
		var s seenCmd
		select {
		case s = <-seen:
		case <-time.After(time.Minute):
			t.Fatalf("seen %d slot loads, %d lookups, %d calls; want 2, 1, 1", slots, lookups, callers)
		}
		switch {
		case s.left > 30*time.Minute:
			if s.name == "set" {
				callers++
			}
			if s.name == "cluster slots" {
				slots++ // the first load, bounded by the caller
			}
		case s.left < 0 || s.left > time.Second:
			t.Fatalf("%q reached a node with %v left, want at most 1s", s.name, s.left)
		case s.name == "cluster slots":
			slots++
		case s.name == "command":
			lookups++
		}
	}
}
