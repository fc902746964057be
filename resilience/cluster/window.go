package cluster

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/resilience/internal/limited"
)

// windowScript admits one call to a fixed window shared by every replica.
//
// KEYS[1] is a hash. Field w is the index of the window the record is at.
// Field u is the permits taken in window w (-1: w was reserved full). Field f
// is the windows after w reserved full. Field o is the reservations in the
// window after those. A window counts as full whatever limit filled it. The
// last one admits reservations while o is below the caller's limit. So
// replicas that disagree on PermitLimit (a rolling reload) never put more
// than the larger limit in a window. A limit changed with reservations queued
// neither empties their windows nor overfills them. Windows are aligned to
// multiples of the length on the server's clock (TIME). The length is part of
// the key, so replicas configured with another length never read these
// indexes. A record ahead of the clock (the server's clock stepped back)
// counts as the current window. A record with fields a (reservations) and l
// (the limit they were filled under) is read as f = floor(a/l), o = the rest.
//
// ARGV: limit, length (µs), queue limit, the caller's remaining time (µs;
// -1 for none). Then the most permits of the current window to take (1
// when absent; more is a lease, lease.go). Last, a charge: a window index
// and a count of calls a replica's local fallback admitted in it
// (fallback.go), added to the current window's count first when that index
// is not before it. Numbers written back are integers (Lua's %.14g would
// round a large index).
//
// It returns {decision, µs, remaining, reset µs, permits taken, window index,
// current index}. Decision 1: admitted now. Decision 2: a permit reserved in
// a later window opening in µs. Decision 0: rejected, the queue is full (µs
// until the first window with room). Decision 3: rejected, the window it
// could reserve opens after the caller's deadline (µs: when). The window
// index is the admitting window's (the current one's when rejected).
var windowScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local limit = tonumber(ARGV[1])
local len = tonumber(ARGV[2])
local qlim = tonumber(ARGV[3])
local left = tonumber(ARGV[4])
local want = tonumber(ARGV[5]) or 1
local cidx = tonumber(ARGV[6]) or 0
local cn = tonumber(ARGV[7]) or 0
local cur = math.floor(now / len)
local st = redis.call('HMGET', KEYS[1], 'w', 'u', 'f', 'o', 'a', 'l')
local w = tonumber(st[1]) or cur
local u = tonumber(st[2]) or 0
local f = tonumber(st[3])
local o = tonumber(st[4]) or 0
if not f then
  local a = tonumber(st[5]) or 0
  local l = tonumber(st[6]) or limit
  f = math.floor(a / l)
  o = a - f * l
end
if w > cur then
  w = cur
end
if w < cur then
  local d = cur - w
  if d <= f then
    u = -1
    f = f - d
  elseif d == f + 1 then
    u = o
    f = 0
    o = 0
  else
    u = 0
    f = 0
    o = 0
  end
  w = cur
end
if cn > 0 and cidx >= cur and u >= 0 then
  u = math.min(u + cn, limit)
end
local reset = (cur + 1) * len - now
local res
if u >= 0 and u < limit then
  local n = math.min(want, limit - u)
  u = u + n
  res = {1, 0, limit - u, reset, n, cur, cur}
else
  local nf, no = f, o + 1
  if o >= limit then
    nf, no = f + 1, 1
  end
  local wait = (cur + nf + 1) * len - now
  if f * limit + o >= qlim then
    res = {0, wait, 0, reset, 0, cur, cur}
  elseif left >= 0 and wait >= left then
    res = {3, wait, 0, reset, 0, cur, cur}
  else
    f, o = nf, no
    res = {2, wait, 0, reset, 1, cur + nf + 1, cur}
  end
end
redis.call('HSET', KEYS[1], 'w', string.format('%d', w), 'u', string.format('%d', u), 'f', string.format('%d', f), 'o', string.format('%d', o))
redis.call('HDEL', KEYS[1], 'a', 'l')
redis.call('PEXPIRE', KEYS[1], math.ceil((f + 3) * len / 1000))
return res
`)

// giveBackScript returns the reserved permit of a caller that left before its
// window opened. ARGV[1] is the window's index, ARGV[2] the length in µs.
// Only a reservation in the last reserved window (w+f+1) can be taken back.
// One in a window counted full stays counted: its window admits one call
// less. Freeing it would free a place where others already sleep. In the
// current window it returns ARGV[3] permits (1 when absent: an unused lease
// returns more). It returns at most those taken.
var giveBackScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local target = tonumber(ARGV[1])
local len = tonumber(ARGV[2])
local st = redis.call('HMGET', KEYS[1], 'w', 'u', 'f', 'o')
local w = tonumber(st[1])
local f = tonumber(st[3])
if not w or not f then return 0 end
local u = tonumber(st[2]) or 0
local o = tonumber(st[4]) or 0
if target == w + f + 1 and o > 0 then
  redis.call('HSET', KEYS[1], 'o', string.format('%d', o - 1))
  return 1
elseif w == target and u > 0 and math.floor(now / len) == w then
  local n = math.min(tonumber(ARGV[3]) or 1, u)
  redis.call('HSET', KEYS[1], 'u', string.format('%d', u - n))
  return n
end
return 0
`)

// sharedWindow is the fixed window of one operation shared through the store.
// It implements resilience.SharedWindow. A Store has one per operation, and a
// reload changes it in place (Store.Window). So its Local fallback keeps
// counting the permits it gave.
type sharedWindow struct {
	st     *opState
	cfg    atomic.Pointer[windowConfig]
	origin time.Time // exhausted counts from it

	align atomic.Pointer[alignment] // the server's windows on this process's clock
	count counted                   // the store's count and the Local fallback (fallback.go)

	lease lease // the permits taken ahead (LeasePermits; lease.go)
}

// windowConfig is one policy's view of a sharedWindow.
type windowConfig struct {
	key                  string
	suffix               string // of a keyedWindow: key+<key>+suffix is one key's
	limit, queue, expect int
	lease                int // LeasePermits: permits taken per round trip (> 1: a lease)
	length               time.Duration
	args                 [3]any // limit, length µs, queue limit

	// exhausted is the monotonic time (since the sharedWindow's origin) until
	// which the window is known to be used up. Its queue is full under these
	// limits too. Rejections cost no round trip until then. It belongs to one
	// config. So an answer to a call made before a reload cannot mark the new
	// limits exhausted.
	exhausted atomic.Int64
}

// newWindowConfig returns the config of a window of limit permits per length,
// with queue places, without its key. A length that is not positive is
// DefaultWindow; it is rounded to whole µs.
func newWindowConfig(limit int, length time.Duration, queue, expect int) *windowConfig {
	if length <= 0 {
		length = resilience.DefaultWindow
	}
	length = max(length.Round(time.Microsecond), time.Microsecond)
	c := &windowConfig{limit: limit, queue: max(queue, 0), expect: expect, length: length}
	c.args = [3]any{c.limit, length.Microseconds(), c.queue}
	return c
}

// lengthKey is the part of a window's key that names its length: replicas
// configured with another length count in another key.
func (c *windowConfig) lengthKey() string {
	return "w:" + strconv.FormatInt(c.length.Microseconds(), 10)
}

// Window returns the shared window of operation id under policy p. It reads
// PermitLimit, Window, QueueLimit, StoreTimeout, DegradeAfter, OnStoreError
// and ExpectedReplicas. Called again for the same id (a reload), it returns
// the same window. Then p is in force for the calls that arrive from then on.
// A new length counts in a key of its own from the first call under it. While
// replicas disagree on it (a rolling reload), each length is counted apart.
func (s *Store) Window(id string, p resilience.Policy) (resilience.SharedWindow, error) {
	if p.PermitLimit <= 0 || !validID(id) {
		return nil, fmt.Errorf("cluster: window of %q: want a positive PermitLimit and a valid ID", id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st, err := s.state(id, p)
	if err != nil {
		return nil, err
	}
	c := newWindowConfig(p.PermitLimit, p.Window, queueOf(p.QueueLimit, p), p.ExpectedReplicas)
	c.key = s.opKey(id, c.lengthKey())
	c.lease = min(max(p.LeasePermits, 1), p.PermitLimit)
	w := s.windows[id]
	if w == nil {
		w = &sharedWindow{st: st, origin: time.Now()}
		s.windows[id] = w
	}
	w.cfg.Store(c)
	return w, nil
}

// Take implements resilience.SharedWindow.
func (w *sharedWindow) Take(ctx context.Context, inv *pipeline.Invocation) (pipeline.Quota, error) {
	q, _, _, err := w.take(ctx, inv)
	return q, err
}

// takeStore admits one call through the store. It takes up to want permits of
// the current window; the others go to the lease. It returns the index of the
// admitting window on the server's clock. local reports that the store did
// not decide. The index is then the Local fallback's reading of the server's
// window, or -1.
func (w *sharedWindow) takeStore(ctx context.Context, c *windowConfig, want int) (q pipeline.Quota, idx int64, local bool, err error) {
	if until := c.exhausted.Load(); until != 0 {
		if left := time.Duration(until) - time.Since(w.origin); left > 0 {
			q, err := c.rejected(left)
			return q, -1, false, err
		}
	}
	q, idx, err = w.run(ctx, c, c.key, want, &w.count)
	switch err {
	case errFallback:
		q, idx, err = w.fallback(ctx, c, &w.count)
		return q, idx, true, err
	case errRefused:
		q, err = w.refuse(c)
		return q, -1, true, err
	}
	return q, idx, false, err
}

// errFallback is run's answer when the store is not asked or did not
// answer: the call goes to the operation's OnStoreError fallback.
var errFallback = errors.New("cluster: use the fallback")

// errRefused is run's answer when the store did not answer a healthy
// operation in time. One failure is no evidence that it is gone (refuse).
var errRefused = errors.New("cluster: the store did not answer")

// refuse answers a call whose store call failed while the operation is not
// degraded. Admitting it could overfill a window the other replicas have
// filled. So it is turned away with "local" and "closed". It is admitted with
// "open" only.
func (w *sharedWindow) refuse(c *windowConfig) (pipeline.Quota, error) {
	if w.st.mode() == modeOpen {
		return w.admitAll(c), nil
	}
	retry := w.st.timeout()
	q := pipeline.Quota{Limit: c.limit, Window: c.length, Reset: retry}
	return q, &limited.Error{RetryAfter: retry, Quota: q}
}

// aligned returns the alignment of the server's window idx, which ends at
// end on this process's clock.
func (w *sharedWindow) aligned(idx int64, end time.Time, length time.Duration) *alignment {
	if a := w.align.Load(); a != nil && a.idx == idx && a.length == length {
		return a
	}
	a := &alignment{idx: idx, end: end, length: length}
	w.align.Store(a)
	return a
}

// run runs the window script on key under c. It admits the call, sleeps until
// its reserved window opens, or rejects it. It returns the index of the
// admitting window on the server's clock. On the operation's own key, it
// takes up to want permits, the others going to the lease. The round trip
// adds the calls cnt's fallback admitted to the store's count. cnt learns the
// store's count (cnt may be nil). It returns errFallback when the operation
// is degraded (or becomes so). It returns errRefused when the store failed a
// healthy operation.
func (w *sharedWindow) run(ctx context.Context, c *windowConfig, key string, want int, cnt *counted) (pipeline.Quota, int64, error) {
	use, probing := w.st.useStore()
	if !use {
		return pipeline.Quota{}, -1, errFallback
	}
	left := int64(-1)
	if d, ok := ctx.Deadline(); ok {
		left = max(time.Until(d).Microseconds(), 0)
	}
	var cidx, cn int64
	if cnt != nil {
		cidx, cn = cnt.charge()
	}
	sent := time.Now()
	sctx, cancel := w.st.storeCtx(ctx)
	res, err := windowScript.Run(sctx, w.st.s.rdb, []string{key}, c.args[0], c.args[1], c.args[2], left, want, cidx, cn).Int64Slice()
	cancel()
	if err == nil && len(res) != 7 {
		err = fmt.Errorf("cluster: window script returned %d values", len(res))
	}
	if err != nil {
		if cerr := callerEnded(ctx); cerr != nil {
			w.st.callerLeft(probing)
			return pipeline.Quota{}, -1, cerr
		}
	}
	if !w.st.result(err, probing, sent) {
		if w.st.degraded.Load() {
			return pipeline.Quota{}, -1, errFallback
		}
		return pipeline.Quota{}, -1, errRefused
	}
	if cnt != nil {
		cnt.charged(cidx, cn)
		cnt.observe(w.aligned(res[6], sent.Add(micros(res[3])), c.length), c.limit-int(res[2]))
	}
	us := micros(res[1])
	q := pipeline.Quota{Limit: c.limit, Window: c.length, Remaining: int(res[2]), Reset: micros(res[3])}
	// The script ran at some instant between sent and now: its window
	// ends no earlier than sent+reset, so what is left of it from now is at
	// least reset-(now-sent). A reserved call wakes at the start of its
	// window plus that same delay at most, and has a window's length less
	// the delay.
	trip := time.Since(sent)
	switch res[0] {
	case 1:
		if res[4] > 1 && key == c.key {
			q.Remaining += w.lease.fill(w, c, int(res[4])-1, res[5], sent.Add(q.Reset), q.Remaining)
		}
		q.Reset = max(q.Reset-trip, time.Nanosecond) // > 0: the window has a known end
		return q, res[5], nil
	case 2:
		err := w.sleep(ctx, c, key, us)
		q.Remaining, q.Reset = 0, max(c.length-trip, time.Nanosecond)
		return q, res[5], err
	case 0:
		if key == c.key { // the operation's own window, not one key's
			c.exhausted.Store(int64(time.Since(w.origin) + us))
		}
	}
	return q, res[5], &limited.Error{RetryAfter: us, Quota: q}
}

// queueOf is a queue limit of p: none in shadow mode, where no call waits.
func queueOf(n int, p resilience.Policy) int {
	if p.Shadow {
		return 0
	}
	return max(n, 0)
}

// micros converts µs from the store to a Duration, saturating at about 146
// years. Otherwise a wait in a window of a billion seconds would overflow
// into the past, and the call would run at once. Half the range leaves room
// for the monotonic time it is added to (exhausted).
func micros(us int64) time.Duration {
	const most = math.MaxInt64 / 2 / int64(time.Microsecond)
	return time.Duration(min(max(us, 0), most)) * time.Microsecond
}

// rejected is the rejection of a call while the window is known to be
// exhausted for left more.
func (c *windowConfig) rejected(left time.Duration) (pipeline.Quota, error) {
	q := pipeline.Quota{Limit: c.limit, Window: c.length, Reset: min(left, c.length)}
	return q, &limited.Error{RetryAfter: left, Quota: q}
}

// sleep waits d for the reserved window to open. When ctx ends first, the
// reservation is given back in the background (bounded by StoreTimeout).
func (w *sharedWindow) sleep(ctx context.Context, c *windowConfig, key string, d time.Duration) error {
	target := time.Now().Add(d)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
	}
	// The window index on the server's clock is unknown here; the script
	// identifies the reservation by index, computed from the time left
	// before it (which both clocks measure alike). After Close nothing is
	// given back: the reservation lapses with its window.
	rdb := w.st.s.rdb
	w.st.background(func(ctx context.Context) {
		now, err := rdb.Time(ctx).Result()
		if err != nil {
			return
		}
		idx := now.Add(time.Until(target)).Add(c.length/2).UnixMicro() / c.length.Microseconds()
		_ = giveBackScript.Run(ctx, rdb, []string{key}, idx, c.length.Microseconds()).Err()
	})
	return ctx.Err()
}

// fallback is the OnStoreError mode of a degraded operation for the
// window cnt counts (nil: none has room, and the call is turned away). It
// returns the label of the admitting window (-1 when none counts it).
func (w *sharedWindow) fallback(ctx context.Context, c *windowConfig, cnt *counted) (pipeline.Quota, int64, error) {
	markDegraded(ctx)
	switch w.st.mode() {
	case modeOpen:
		return w.admitAll(c), -1, nil
	case modeClosed:
		q, err := w.rejectAll(c)
		return q, -1, err
	}
	if cnt == nil {
		q := pipeline.Quota{Limit: c.limit, Window: c.length, Reset: fullSweepInterval}
		return q, -1, &limited.Error{RetryAfter: fullSweepInterval, Quota: q}
	}
	return w.localShare(ctx, c, cnt)
}

// admitAll is OnStoreError "open": the limit is off while degraded.
func (w *sharedWindow) admitAll(c *windowConfig) pipeline.Quota {
	return pipeline.Quota{Limit: c.limit, Window: c.length, Remaining: c.limit}
}

// rejectAll is OnStoreError "closed": every call is turned away until the
// store is tried again.
func (w *sharedWindow) rejectAll(c *windowConfig) (pipeline.Quota, error) {
	retry := w.st.retryIn()
	q := pipeline.Quota{Limit: c.limit, Window: c.length, Reset: retry}
	return q, &limited.Error{RetryAfter: retry, Quota: q}
}

// localShare is OnStoreError "local": this replica's part of what the store
// had left of the window cnt counts. Its windows are aligned to the server's
// (counted.admit). It returns the label of the window that admitted the call
// or turned it away.
func (w *sharedWindow) localShare(ctx context.Context, c *windowConfig, cnt *counted) (pipeline.Quota, int64, error) {
	n := w.st.replicas(c.expect)
	share := max((c.limit+n-1)/n, 1)
	fw, label, retry, err := cnt.admit(ctx, w.align.Load(), c.limit, share, n, c.queue, c.length)
	if err != nil {
		if ctx.Err() != nil {
			return pipeline.Quota{Limit: share, Window: c.length}, label, ctx.Err()
		}
		q := pipeline.Quota{Limit: share, Window: c.length, Reset: retry}
		return q, label, &limited.Error{RetryAfter: retry, Quota: q}
	}
	return fw.Quota(), label, nil
}
