package cluster

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
)

// acquireScript takes a concurrency lease. KEYS[1] is a sorted set of
// leases scored by their expiry (µs on the server's clock); expired ones
// are dropped first, so a replica killed with calls in flight gives its
// slots back without anyone's help. ARGV: limit, member, lease (µs).
// Returns 1 when the lease was taken, 0 when every slot is held.
var acquireScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  return 0
end
local exp = now + tonumber(ARGV[3])
redis.call('ZADD', KEYS[1], exp, ARGV[2])
local ttl = redis.call('PTTL', KEYS[1])
local want = math.ceil(tonumber(ARGV[3]) / 1000)
if ttl < want then
  redis.call('PEXPIRE', KEYS[1], want)
end
return 1
`)

// Slots is the concurrency limit of one operation shared through the
// store; it implements resilience.SharedSlots. Its waiting queue is local
// to the process: FIFO, bounded by ConcurrencyQueueLimit, its head asking
// the store every PollInterval and at once when a call of this process
// releases a slot.
type Slots struct {
	st                   *opState
	key                  string
	limit, queue, expect int
	seq                  atomic.Uint64

	mu      sync.Mutex
	waiters []*slotWaiter

	local atomic.Pointer[resilience.ConcurrencyLimiter]
	fbN   atomic.Int64
}

type slotWaiter struct {
	head chan struct{} // closed when it becomes the head of the queue
	kick chan struct{} // a slot may have been freed here (buffered, 1)
}

// Slots returns the shared concurrency limit of operation id under policy
// p (ConcurrencyLimit, ConcurrencyQueueLimit, StoreTimeout, OnStoreError,
// ExpectedReplicas).
func (s *Store) Slots(id string, p resilience.Policy) (*Slots, error) {
	if p.ConcurrencyLimit <= 0 || !validID(id) {
		return nil, fmt.Errorf("cluster: slots of %q: want a positive ConcurrencyLimit and a valid ID", id)
	}
	st, err := s.state(id, p)
	if err != nil {
		return nil, err
	}
	return &Slots{st: st, key: s.opKey(id, "c"), limit: p.ConcurrencyLimit,
		queue: max(p.ConcurrencyQueueLimit, 0), expect: p.ExpectedReplicas}, nil
}

// Acquire implements resilience.SharedSlots.
func (c *Slots) Acquire(ctx context.Context, inv *pipeline.Invocation) (func(), error) {
	member := c.st.s.instance + ":" + strconv.FormatUint(c.seq.Add(1), 36)
	ok, rel, err := c.try(ctx, member)
	if err != nil || rel != nil {
		return rel, err
	}
	if ok {
		return c.releaser(member), nil
	}
	// Every slot is held: wait in the local queue.
	c.mu.Lock()
	if len(c.waiters) >= c.queue {
		c.mu.Unlock()
		return nil, resilience.ErrLimited
	}
	w := &slotWaiter{head: make(chan struct{}), kick: make(chan struct{}, 1)}
	c.waiters = append(c.waiters, w)
	if len(c.waiters) == 1 {
		close(w.head)
	}
	c.mu.Unlock()
	defer c.leave(w)

	select {
	case <-w.head:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	t := time.NewTimer(c.st.s.cfg.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-w.kick:
		case <-t.C:
		}
		ok, rel, err := c.try(ctx, member)
		if err != nil || rel != nil {
			return rel, err
		}
		if ok {
			return c.releaser(member), nil
		}
		t.Reset(c.st.s.cfg.PollInterval)
	}
}

// try asks the store for a lease once; when the store is unreachable it
// applies OnStoreError instead (rel or err set).
func (c *Slots) try(ctx context.Context, member string) (ok bool, rel func(), err error) {
	use, probing := c.st.useStore()
	if !use {
		rel, err = c.fallback(ctx)
		return false, rel, err
	}
	lease := c.st.s.cfg.DefaultLease
	if d, has := ctx.Deadline(); has {
		lease = max(time.Until(d), 0)
	}
	lease += c.st.s.cfg.LeaseGrace
	sctx, cancel := c.st.storeCtx(ctx)
	n, serr := acquireScript.Run(sctx, c.st.s.rdb, []string{c.key}, c.limit, member, lease.Microseconds()).Int64()
	cancel()
	if serr != nil {
		if cerr := callerEnded(ctx); cerr != nil {
			return false, nil, cerr
		}
	}
	if !c.st.result(serr, probing) {
		rel, err = c.fallback(ctx)
		return false, rel, err
	}
	return n == 1, nil, nil
}

// releaser returns the release of lease member: the lease is removed in
// the background (bounded by StoreTimeout; when the store is gone it
// expires by itself), then the head of the local queue asks at once.
func (c *Slots) releaser(member string) func() {
	return func() {
		s := c.st.s
		s.bg.Add(1)
		go func() {
			defer s.bg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), c.st.timeout)
			_ = s.rdb.ZRem(ctx, c.key, member).Err()
			cancel()
			c.kickHead()
		}()
	}
}

func (c *Slots) kickHead() {
	c.mu.Lock()
	if len(c.waiters) > 0 {
		select {
		case c.waiters[0].kick <- struct{}{}:
		default:
		}
	}
	c.mu.Unlock()
}

// leave removes w from the queue and makes the next waiter the head.
func (c *Slots) leave(w *slotWaiter) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, q := range c.waiters {
		if q == w {
			c.waiters = append(c.waiters[:i], c.waiters[i+1:]...)
			if i == 0 && len(c.waiters) > 0 {
				close(c.waiters[0].head)
			}
			break
		}
	}
	if len(c.waiters) == 0 {
		c.waiters = nil
	}
}

// QueueDepth returns the number of calls of this process waiting for a slot.
func (c *Slots) QueueDepth() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

// fallback applies OnStoreError while the store is unreachable.
func (c *Slots) fallback(ctx context.Context) (func(), error) {
	markDegraded(ctx)
	switch c.st.mode {
	case Open:
		return func() {}, nil
	case Closed:
		return nil, resilience.ErrLimited
	}
	n := c.st.share(c.limit, c.expect)
	l := c.local.Load()
	if l == nil || c.fbN.Load() != int64(n) {
		l, _ = resilience.NewConcurrencyLimiter(n, c.queue)
		c.local.Store(l)
		c.fbN.Store(int64(n))
	}
	if err := l.Acquire(ctx); err != nil {
		return nil, err
	}
	return l.Release, nil
}
