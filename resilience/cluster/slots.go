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
	"github.com/sundial-go/sundial/resilience/internal/limiter"
)

// acquireScript takes a concurrency lease. KEYS[1] is a sorted set of leases
// scored by their expiry (µs on the server's clock). Expired ones are dropped
// first. So a replica killed with calls in flight gives its slots back
// without anyone's help. KEYS[2] is the member's tombstone. It is set when
// its caller gave up on this very script (cancelScript). A script that
// arrives after the give-up then takes nothing. ARGV: limit, member, lease
// (µs). The lease must be positive: one that would expire at once, or never,
// is an error. It returns 1 when the lease was taken, 0 when every slot is
// held (or the member was given up).
var acquireScript = redis.NewScript(`
local lease = tonumber(ARGV[3])
if not lease or lease <= 0 then
  return redis.error_reply('sundial: lease must be positive')
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[1], string.format('%d', now + lease), ARGV[2])
local ttl = redis.call('PTTL', KEYS[1])
local want = math.ceil(lease / 1000)
if ttl < want then
  redis.call('PEXPIRE', KEYS[1], want)
end
return 1
`)

// cancelScript gives up lease ARGV[1] whose acquire failed on the client: its
// answer did not come in time. It removes the lease if the script ran. It
// leaves a tombstone in KEYS[2] for ARGV[2] ms, as long as the lease could
// have lived. So a script still on its way takes nothing.
var cancelScript = redis.NewScript(`
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], '1', 'PX', ARGV[2])
return 0
`)

// renewScript lengthens the leases ARGV[2:] of calls that still run to now +
// ARGV[1] µs. It never shortens one, and lengthens the key's expiry with
// them. A lease that lapsed is added back: its call outlived its deadline by
// more than the grace. The call still runs, and counting it is the truth.
var renewScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local ext = tonumber(ARGV[1])
local score = string.format('%d', now + ext)
for i = 2, #ARGV do
  redis.call('ZADD', KEYS[1], 'GT', score, ARGV[i])
end
local want = math.ceil(ext / 1000)
if redis.call('PTTL', KEYS[1]) < want then
  redis.call('PEXPIRE', KEYS[1], want)
end
return 0
`)

// sharedSlots is the concurrency limit of one operation shared through the
// store. It implements resilience.SharedSlots. Its waiting queue is local to
// the process: FIFO, bounded by ConcurrencyQueueLimit. Its head asks the
// store every PollInterval. It asks at once when a call of this process
// releases a slot. A Store has one per operation, and a reload changes it in
// place (Store.Slots). So its queue and its Local fallback keep the calls
// they hold.
type sharedSlots struct {
	st  *opState
	key string
	cfg atomic.Pointer[slotsConfig]
	seq atomic.Uint64

	mu      sync.Mutex
	waiters []*slotWaiter

	fbMu  sync.Mutex // serialises changes of the local fallback's limits
	local atomic.Pointer[fallbackSlots]

	// live holds the leases of this process's calls that still run. The
	// heartbeat renews them (renew). So a call running past its deadline keeps
	// its slot until it returns. renewMu orders a renewal (held) and the removal
	// of a lease it read (shared: removals run side by side). So a released
	// lease is never renewed back into the store.
	liveMu  sync.Mutex
	live    map[string]struct{}
	renewMu sync.RWMutex
}

// maxLease bounds a concurrency lease. A call whose deadline is further away
// holds its slot in the store for at most maxLease plus the grace. Otherwise
// a deadline centuries away would overflow the lease into the past, and the
// slot would not be counted at all.
const maxLease = 24 * time.Hour

// slotsConfig is one policy's view of a sharedSlots.
type slotsConfig struct{ limit, queue, expect int }

// fallbackSlots is the Local fallback of a sharedSlots and its limits.
type fallbackSlots struct {
	cl           *limiter.ConcurrencyLimiter
	limit, queue int
}

type slotWaiter struct {
	head chan struct{} // closed when it becomes the head of the queue
	kick chan struct{} // a slot may have been freed here (buffered, 1)
	out  chan struct{} // closed when a shorter queue turns it away
}

// Slots returns the shared concurrency limit of operation id under policy p.
// It reads ConcurrencyLimit, ConcurrencyQueueLimit, StoreTimeout,
// DegradeAfter, OnStoreError and ExpectedReplicas. Called again for the same
// id (a reload), it returns the same limit with p in force. The leases held
// stay held. With a lower limit, nobody is admitted until fewer are held. A
// shorter queue turns its newest excess waiters away.
func (s *Store) Slots(id string, p resilience.Policy) (resilience.SharedSlots, error) {
	if p.ConcurrencyLimit <= 0 || !validID(id) {
		return nil, fmt.Errorf("cluster: slots of %q: want a positive ConcurrencyLimit and a valid ID", id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st, err := s.state(id, p)
	if err != nil {
		return nil, err
	}
	c := s.slots[id]
	if c == nil {
		c = &sharedSlots{st: st, key: s.opKey(id, "c"), live: make(map[string]struct{})}
		s.slots[id] = c
	}
	cfg := &slotsConfig{limit: p.ConcurrencyLimit, queue: queueOf(p.ConcurrencyQueueLimit, p), expect: p.ExpectedReplicas}
	c.cfg.Store(cfg)
	c.mu.Lock()
	for len(c.waiters) > cfg.queue {
		w := c.waiters[len(c.waiters)-1]
		c.waiters = c.waiters[:len(c.waiters)-1]
		close(w.out)
	}
	c.mu.Unlock()
	c.kickHead() // a higher limit may admit the head at once
	return c, nil
}

// Acquire implements resilience.SharedSlots.
func (c *sharedSlots) Acquire(ctx context.Context, inv *pipeline.Invocation) (func(), error) {
	member := c.st.s.instance + ":" + strconv.FormatUint(c.seq.Add(1), 36)
	// First come, first served: while calls of this process wait, a new
	// one queues behind them instead of asking the store first (it would
	// take a slot freed for the head).
	c.mu.Lock()
	queued := len(c.waiters) > 0
	c.mu.Unlock()
	if !queued {
		if rel, done, err := c.attempt(ctx, member); done {
			return rel, err
		}
	}
	// Every slot is held, or others wait: wait in the local queue.
	w, first, err := c.enqueue()
	if err != nil {
		return nil, err
	}
	defer c.leave(w)
	// A call that asked just now waits for the next poll or release; one
	// that became the head behind others asks at once.
	return c.wait(ctx, w, member, queued || !first)
}

// attempt asks for a lease once (try). done reports an answer: the lease's
// release, the fallback's, or an error. Otherwise every slot is held.
func (c *sharedSlots) attempt(ctx context.Context, member string) (rel func(), done bool, err error) {
	ok, rel, err := c.try(ctx, member)
	if err != nil || rel != nil {
		return rel, true, err
	}
	if ok {
		return c.releaser(member), true, nil
	}
	return nil, false, nil
}

// enqueue adds a waiter at the end of the local queue; first reports that
// it is the head already. It fails with ErrLimited when the queue is full.
func (c *sharedSlots) enqueue() (w *slotWaiter, first bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.waiters) >= c.cfg.Load().queue {
		return nil, false, resilience.ErrLimited
	}
	w = &slotWaiter{head: make(chan struct{}), kick: make(chan struct{}, 1), out: make(chan struct{})}
	c.waiters = append(c.waiters, w)
	first = len(c.waiters) == 1
	if first {
		close(w.head)
	}
	return w, first, nil
}

// wait waits until w heads the queue. Then it asks for a lease at every poll
// and every release in this process until it gets one (ask: at once, too). It
// gives up when a shorter queue turns w away or ctx ends.
func (c *sharedSlots) wait(ctx context.Context, w *slotWaiter, member string, ask bool) (func(), error) {
	select {
	case <-w.head:
	case <-w.out:
		return nil, resilience.ErrLimited
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	t := time.NewTimer(c.st.s.cfg.PollInterval)
	defer t.Stop()
	for {
		if !ask {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-w.out:
				return nil, resilience.ErrLimited
			case <-w.kick:
			case <-t.C:
			}
		}
		ask = false
		if rel, done, err := c.attempt(ctx, member); done {
			return rel, err
		}
		t.Reset(c.st.s.cfg.PollInterval)
	}
}

// try asks the store for a lease once; when the store is unreachable it
// applies OnStoreError instead (rel or err set).
func (c *sharedSlots) try(ctx context.Context, member string) (ok bool, rel func(), err error) {
	use, probing := c.st.useStore()
	if !use {
		rel, err = c.fallback(ctx)
		return false, rel, err
	}
	cfg := c.cfg.Load()
	lease := c.st.s.cfg.DefaultLease
	if d, has := ctx.Deadline(); has {
		lease = max(time.Until(d), 0)
	}
	lease = min(lease, maxLease) + c.st.s.cfg.LeaseGrace
	// Calls the Local fallback admitted while the store was unreachable
	// still run after it answers again, and the store never saw them.
	limit := cfg.limit
	if l := c.local.Load(); l != nil {
		limit = max(limit-l.cl.InFlight(), 0)
	}
	sent := time.Now()
	sctx, cancel := c.st.storeCtx(ctx)
	n, serr := acquireScript.Run(sctx, c.st.s.rdb, []string{c.key, c.tombstone(member)}, limit, member, max(lease.Microseconds(), 1)).Int64()
	cancel()
	if serr == nil && n == 1 && c.cfg.Load() != cfg {
		// A reload changed the limits while the store was asked: the lease
		// was granted under the old ones. Give it back, and ask again at
		// once under the new ones (once per reload).
		rctx, rcancel := c.st.storeCtx(ctx)
		serr = c.st.s.rdb.ZRem(rctx, c.key, member).Err()
		rcancel()
		if serr == nil {
			c.st.result(nil, probing, sent) // the store answered (a probe's way is free)
			return c.try(ctx, member)
		}
	}
	if serr == nil && n == 1 {
		c.liveMu.Lock()
		c.live[member] = struct{}{}
		c.liveMu.Unlock()
	}
	if serr != nil {
		// The script may have run with a reply that came too late to be
		// read, or may still be on its way (the client gave up): a lease
		// nobody holds would count against every replica until it expired.
		c.cancel(member, lease)
		if cerr := callerEnded(ctx); cerr != nil {
			c.st.callerLeft(probing)
			return false, nil, cerr
		}
	}
	if !c.st.result(serr, probing, sent) {
		if !c.st.degraded.Load() {
			// One failure is no evidence that the store is gone: no slot
			// this time (the call waits in the queue, or is turned away),
			// unless OnStoreError is "open".
			if c.st.mode() == modeOpen {
				return false, func() {}, nil
			}
			return false, nil, nil
		}
		rel, err = c.fallback(ctx)
		return false, rel, err
	}
	return n == 1, nil, nil
}

// remove takes lease member out of the live leases. In the background
// (bounded by StoreTimeout), it takes it out of the store. Then it lets the
// head of the local queue ask at once. After Close nothing is sent: the lease
// expires by itself.
func (c *sharedSlots) remove(member string) {
	c.liveMu.Lock()
	delete(c.live, member)
	c.liveMu.Unlock()
	s := c.st.s
	timeout := c.st.timeout()
	// Not st.background: the wait for a renewal must not eat into the
	// removal's StoreTimeout.
	if !s.spawn(func() {
		c.renewMu.RLock() // a renewal that read member is over
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		_ = s.rdb.ZRem(ctx, c.key, member).Err()
		cancel()
		c.renewMu.RUnlock()
		c.kickHead()
	}) {
		c.kickHead()
	}
}

// tombstone is the key that marks lease member given up.
func (c *sharedSlots) tombstone(member string) string { return c.key + ":x:" + member }

// cancel gives up lease member, whose acquire failed on the client, in the
// background. Until the give-up lands, a lease the script took holds a
// slot nobody uses. Each try is bounded by StoreTimeout (retryUntil).
func (c *sharedSlots) cancel(member string, lease time.Duration) {
	s := c.st.s
	end := time.Now().Add(lease)
	s.spawn(func() {
		defer c.kickHead()
		timeout := c.st.timeout()
		retryUntil(s.stop, end, timeout, max(s.cfg.RetryInterval, timeout), func() error {
			ctx, cancel := context.WithTimeout(context.Background(), c.st.timeout())
			defer cancel()
			return cancelScript.Run(ctx, s.rdb, []string{c.key, c.tombstone(member)}, member,
				max(lease.Milliseconds(), 1)).Err()
		})
	})
}

// retryUntil calls try until it succeeds. A failed try is made again after
// wait, which doubles up to most. It gives up when the next try would
// start at or after end, and at once when stop closes.
func retryUntil(stop <-chan struct{}, end time.Time, wait, most time.Duration, try func() error) {
	for try() != nil && time.Now().Add(wait).Before(end) {
		t := time.NewTimer(wait)
		select {
		case <-stop:
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, most)
	}
}

// renew lengthens the leases of this process's calls that still run to
// now+ext (the heartbeat calls it).
func (c *sharedSlots) renew(ctx context.Context, ext time.Duration) {
	c.renewMu.Lock()
	defer c.renewMu.Unlock()
	c.liveMu.Lock()
	if len(c.live) == 0 {
		c.liveMu.Unlock()
		return
	}
	args := make([]any, 0, len(c.live)+1)
	args = append(args, ext.Microseconds())
	for m := range c.live {
		args = append(args, m)
	}
	c.liveMu.Unlock()
	_ = renewScript.Run(ctx, c.st.s.rdb, []string{c.key}, args...).Err()
}

// releaser returns the release of lease member (remove; when the store is
// gone the lease expires by itself).
func (c *sharedSlots) releaser(member string) func() {
	return func() { c.remove(member) }
}

func (c *sharedSlots) kickHead() {
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
func (c *sharedSlots) leave(w *slotWaiter) {
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
func (c *sharedSlots) QueueDepth() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

// fallback delegates the call to the policy OnStoreError names while the
// store is unreachable (slotsFallbacks).
func (c *sharedSlots) fallback(ctx context.Context) (func(), error) {
	markDegraded(ctx)
	return slotsFallbacks[c.st.mode()](c, ctx)
}

// slotsFallbacks are what a degraded sharedSlots delegates to, by mode.
// "open" admits, "closed" turns away, "local" takes a slot of this replica's
// share.
var slotsFallbacks = map[fallbackMode]func(*sharedSlots, context.Context) (func(), error){
	modeLocal:  (*sharedSlots).localShare,
	modeOpen:   func(*sharedSlots, context.Context) (func(), error) { return func() {}, nil },
	modeClosed: func(*sharedSlots, context.Context) (func(), error) { return nil, resilience.ErrLimited },
}

// localShare takes a slot of this replica's share of the limit. Once the
// store answers again, this call counts against the limit asked of it
// (try) until it returns; its return may admit the head.
func (c *sharedSlots) localShare(ctx context.Context) (func(), error) {
	l := c.localSlots(c.cfg.Load())
	if err := l.Acquire(ctx); err != nil {
		return nil, err
	}
	return func() { l.Release(); c.kickHead() }, nil
}

// localSlots returns the Local fallback with this replica's share of cfg's
// limit. It is always the same limiter, its limits changed in place. So the
// calls it admitted stay counted when the share or the policy changes.
func (c *sharedSlots) localSlots(cfg *slotsConfig) *limiter.ConcurrencyLimiter {
	n := c.st.share(cfg.limit, cfg.expect)
	if l := c.local.Load(); l != nil && l.limit == n && l.queue == cfg.queue {
		return l.cl
	}
	c.fbMu.Lock()
	defer c.fbMu.Unlock()
	l := c.local.Load()
	switch {
	case l == nil:
		l = &fallbackSlots{cl: limiter.NewSlots(n, cfg.queue), limit: n, queue: cfg.queue}
	case l.limit != n || l.queue != cfg.queue:
		l.cl.SetLimitsUnchecked(n, cfg.queue) // share is at least 1, queueOf never negative
		l = &fallbackSlots{cl: l.cl, limit: n, queue: cfg.queue}
	}
	c.local.Store(l)
	return l.cl
}
