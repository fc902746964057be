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
		h.report(ctx, cmd.FullName())
		return next(ctx, cmd)
	}
}
func (h deadlineHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		name := "pipeline"
		if len(cmds) > 0 {
			name += " " + cmds[0].Name()
		}
		h.report(ctx, name)
		return next(ctx, cmds)
	}
}

// report reports the command name, sent under ctx.
func (h deadlineHook) report(ctx context.Context, name string) {
	s := seenCmd{name: name, left: -1}
	if d, ok := ctx.Deadline(); ok {
		s.left = time.Until(d)
	}
	select {
	case h.seen <- s:
	default:
	}
}

// TestOwnWorkIsBounded: go-redis's own commands on a cluster node reach it
// with a deadline at most a second away. They are the slot map's reload,
// which runs without a deadline, and the command table's lookup, which
// runs under go-redis's own 5 s. So a hung node holds up neither for the
// minute-long read timeout. A caller's command keeps its own deadline, or
// none: a blocking command of the caller's may wait longer than a second.
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
	// A caller's commands without a deadline, alone and in a pipeline.
	if err := rdb.Get(context.WithoutCancel(ctx), "own-work").Err(); err != nil {
		t.Fatal(err)
	}
	pipe := rdb.Pipeline()
	pipe.Get(context.WithoutCancel(ctx), "own-work")
	if _, err := pipe.Exec(context.WithoutCancel(ctx)); err != nil {
		t.Fatal(err)
	}
	var slots, lookups, callers, unbounded int
	for slots < 2 || lookups < 1 || callers < 1 || unbounded < 2 {
		var s seenCmd
		select {
		case s = <-seen:
		case <-time.After(time.Minute):
			t.Fatalf("seen %d slot loads, %d lookups, %d calls, %d without a deadline; want 2, 1, 1, 2",
				slots, lookups, callers, unbounded)
		}
		switch {
		case s.name == "hello":
			// A new connection's handshake runs under the context of the
			// command that opened it: the caller's (its deadline, or none)
			// or go-redis's own (bounded as that command is).
		case s.name == "get" || s.name == "pipeline get":
			if s.left >= 0 {
				t.Fatalf("a caller's %s without a deadline reached a node with %v left, want none", s.name, s.left)
			}
			unbounded++
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
