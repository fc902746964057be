// Package cluster counts an operation's fixed window and concurrency limit
// across every process that shares one Redis (Policy.Scope "cluster"). It
// uses github.com/redis/go-redis/v9. The chapter docs/cluster.md explains the
// model.
//
// Every store call is one Lua script: one round trip, on the server's clock
// (TIME). The policy's StoreTimeout and the invocation's remaining deadline
// bound it. When the store fails several calls in a row, an operation is
// "degraded". The policy's DegradeAfter says how many, else
// Config.DegradeAfter. A degraded operation does what its OnStoreError says.
// "local" admits this replica's part of what the window had left, at most
// ceil(limit / replicas). "open" admits and "closed" turns away. The
// operation tries the store again after RetryInterval and recovers by itself.
// One failed call alone degrades nothing.
package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/sundial-go/sundial/resilience"
)

// fallbackMode is what a cluster-scoped limit does while its store is
// unreachable (the policy's OnStoreError).
type fallbackMode string

const (
	// modeLocal enforces this replica's share of the limit:
	// ceil(limit / replicas). The default.
	modeLocal fallbackMode = "local"
	// modeOpen admits every call (the limit is off while degraded).
	modeOpen fallbackMode = "open"
	// modeClosed rejects every call while degraded.
	modeClosed fallbackMode = "closed"
)

// parseMode returns the mode named s ("" is modeLocal).
func parseMode(s string) (fallbackMode, error) {
	switch fallbackMode(s) {
	case "", modeLocal:
		return modeLocal, nil
	case modeOpen, modeClosed:
		return fallbackMode(s), nil
	}
	return "", fmt.Errorf("unknown OnStoreError %q (want \"local\", \"open\" or \"closed\")", s)
}

// DefaultKeyPrefix is the KeyPrefix of a Config that sets none.
const DefaultKeyPrefix = "sundial"

// Defaults of Config, and of a policy's StoreTimeout.
const (
	defaultStoreTimeout  = 50 * time.Millisecond
	defaultLeaseGrace    = 2 * time.Second
	defaultLease         = 60 * time.Second
	defaultRetryInterval = time.Second
	defaultPollInterval  = 10 * time.Millisecond
	defaultHeartbeat     = time.Second
	defaultDegradeAfter  = 3
	// maxDegradeAfter bounds DegradeAfter: a failing store gets up to
	// DegradeAfter checks in a row, back to back.
	maxDegradeAfter = 100
)

// Config tunes a Store. Zero values take the defaults given.
type Config struct {
	// KeyPrefix starts every key ("sundial"): keys of operation id are
	// "{<prefix>:<id>}:w:<window length in µs>" and "{<prefix>:<id>}:c",
	// one hash slot per operation.
	KeyPrefix string
	// LeaseGrace is how long after its holder's deadline a concurrency lease
	// expires by itself when nobody renews it. It is at least two heartbeats. A
	// replica's heartbeat renews the leases of its calls that still run; one
	// past its deadline keeps its slot until it returns. The lease must outlast
	// the wait for the next beat. The default is 2 s.
	LeaseGrace time.Duration
	// DefaultLease is the lease of a call without a deadline (60 s).
	DefaultLease time.Duration
	// DegradeAfter is how many store calls in a row must fail before an
	// operation is degraded (3 by default). A policy's DegradeAfter overrides
	// it. A failure counts only when its call was sent after the last counted
	// one came in. Calls that fail together in one stall are one failure. After
	// a failure, a check bounded by StoreTimeout asks the store again at once.
	// So a dead store is found out without waiting for traffic. An answer starts
	// the count over. A value above 100, here or in a policy, counts as 100.
	DegradeAfter int
	// RetryInterval is how long a degraded operation waits before it tries the
	// store again; 1 s by default. One call tries; the others keep the fallback.
	RetryInterval time.Duration
	// PollInterval is how often the head of a local concurrency queue asks the
	// store for a slot; 10 ms by default. A release in this process asks at
	// once.
	PollInterval time.Duration
	// Heartbeat is how often the replica announces itself; a replica not
	// heard of for three heartbeats is no longer counted. The default is
	// 1 s.
	Heartbeat time.Duration
	// Logger receives one line per degraded/recovered transition.
	Logger *slog.Logger
	// OnTransition, when set, is called on each transition (tests, metrics).
	OnTransition func(id string, degraded bool)
}

// Store is the shared state of one process's cluster-scoped limits.
// Create it once per process with New, and Close it at shutdown.
type Store struct {
	rdb      redis.UniversalClient
	cfg      Config
	instance string

	replicas atomic.Int64 // live replicas last counted (>= 1)

	mu      sync.Mutex
	ops     map[string]*opState
	windows map[string]*sharedWindow
	keyed   map[string]*keyedWindow
	slots   map[string]*sharedSlots
	closed  bool // under mu: no more background work (spawn)

	bg   sync.WaitGroup
	stop chan struct{}
}

// New returns a Store on rdb. It starts the replica heartbeat; Close stops
// it. The client should have context timeouts on and no retries (see
// NewClient).
func New(rdb redis.UniversalClient, cfg Config) *Store {
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = DefaultKeyPrefix
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.LeaseGrace, defaultLeaseGrace)
	def(&cfg.DefaultLease, defaultLease)
	def(&cfg.RetryInterval, defaultRetryInterval)
	def(&cfg.PollInterval, defaultPollInterval)
	def(&cfg.Heartbeat, defaultHeartbeat)
	if cfg.DegradeAfter <= 0 {
		cfg.DegradeAfter = defaultDegradeAfter
	}
	cfg.DegradeAfter = min(cfg.DegradeAfter, maxDegradeAfter)
	cfg.LeaseGrace = max(cfg.LeaseGrace, 2*cfg.Heartbeat)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	s := &Store{rdb: rdb, cfg: cfg, instance: hex.EncodeToString(b), ops: make(map[string]*opState),
		windows: make(map[string]*sharedWindow), keyed: make(map[string]*keyedWindow), slots: make(map[string]*sharedSlots), stop: make(chan struct{})}
	s.replicas.Store(1)
	s.bg.Add(1)
	go s.heartbeat()
	return s
}

// Load loads the scripts into the server (they are also loaded on demand:
// go-redis retries a NOSCRIPT with EVAL). Call it at start-up to fail fast
// on a wrong address or credentials.
func (s *Store) Load(ctx context.Context) error {
	for _, sc := range []*redis.Script{windowScript, giveBackScript, acquireScript, cancelScript, renewScript, heartbeatScript} {
		if err := sc.Load(ctx, s.rdb).Err(); err != nil {
			return fmt.Errorf("cluster: load scripts: %w", err)
		}
	}
	return nil
}

// Close stops the heartbeat, gives back the unused permits of window
// leases, removes this replica from the count, and waits for background
// store calls (give-backs, releases), each bounded
// by its timeout. It does not close the client.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.stop)
	s.bg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), defaultStoreTimeout)
	defer cancel()
	s.returnLeases(ctx)
	_ = s.rdb.ZRem(ctx, s.replicaKey(), s.instance).Err()
	return nil
}

// spawn runs f in the background, counted by Close's wait. After Close it
// does not run f and returns false.
func (s *Store) spawn(f func()) bool {
	// Counting under the lock that Close sets closed with keeps a
	// WaitGroup Add from racing with its Wait.
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	s.bg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.bg.Done()
		f()
	}()
	return true
}

// replicaCount returns the number of live replicas last counted (at
// least 1).
func (s *Store) replicaCount() int { return int(s.replicas.Load()) }

// Degraded reports whether operation id is using its OnStoreError fallback.
func (s *Store) Degraded(id string) bool {
	s.mu.Lock()
	st := s.ops[id]
	s.mu.Unlock()
	return st != nil && st.degraded.Load()
}

func (s *Store) replicaKey() string { return "{" + s.cfg.KeyPrefix + "}:replicas" }

func (s *Store) opKey(id, suffix string) string {
	return "{" + s.cfg.KeyPrefix + ":" + id + "}:" + suffix
}

// heartbeatScript announces a replica until now+ttl. It returns the count of
// replicas whose announcement is still valid. The key's expiry is only ever
// lengthened. A replica with a shorter heartbeat must not expire the
// announcements of one with a longer heartbeat.
var heartbeatScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], string.format('%d', now + tonumber(ARGV[2])), ARGV[1])
local want = math.ceil(tonumber(ARGV[2]) / 1000)
if redis.call('PTTL', KEYS[1]) < want then
  redis.call('PEXPIRE', KEYS[1], want)
end
return redis.call('ZCARD', KEYS[1])
`)

func (s *Store) heartbeat() {
	defer s.bg.Done()
	t := time.NewTicker(s.cfg.Heartbeat)
	defer t.Stop()
	for {
		s.beat()
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
	}
}

func (s *Store) beat() {
	ctx, cancel := context.WithTimeout(context.Background(), max(defaultStoreTimeout, s.cfg.Heartbeat/2))
	defer cancel()
	ttl := 3 * s.cfg.Heartbeat.Microseconds()
	n, err := heartbeatScript.Run(ctx, s.rdb, []string{s.replicaKey()}, s.instance, ttl).Int64()
	if err != nil {
		return
	}
	if n > 0 {
		s.replicas.Store(n)
	}
	// The leases of calls that still run are lengthened to outlast the
	// next beats: a call past its deadline (the kernel lets it run on)
	// keeps its slot until it returns; a killed replica's leases lapse
	// within LeaseGrace plus two beats.
	s.mu.Lock()
	slots := make([]*sharedSlots, 0, len(s.slots))
	for _, c := range s.slots {
		slots = append(slots, c)
	}
	s.mu.Unlock()
	for _, c := range slots {
		c.renew(ctx, s.cfg.LeaseGrace+2*s.cfg.Heartbeat)
	}
}

// opState is the degraded state of one operation, shared by its window and
// its slots.
type opState struct {
	s   *Store
	id  string
	cfg atomic.Pointer[opConfig] // replaced by a reload while calls read it

	degraded atomic.Bool
	failures atomic.Int64 // store calls failed in a row, as counted (evidence)
	failedAt atomic.Int64 // unix nanos: when the last counted failure came in
	nextTry  atomic.Int64 // unix nanos: when a degraded op tries the store again
	trying   atomic.Bool  // one call at a time tries a degraded store
	checking atomic.Bool  // a health check runs (check)
}

// opConfig is what an operation's policy says about its store.
type opConfig struct {
	mode         fallbackMode
	timeout      time.Duration
	degradeAfter int
}

func (st *opState) mode() fallbackMode     { return st.cfg.Load().mode }
func (st *opState) timeout() time.Duration { return st.cfg.Load().timeout }
func (st *opState) degradeAfter() int      { return st.cfg.Load().degradeAfter }

// state returns the state of operation id with p's OnStoreError,
// StoreTimeout and DegradeAfter in force; s.mu is held.
func (s *Store) state(id string, p resilience.Policy) (*opState, error) {
	mode, err := parseMode(p.OnStoreError)
	if err != nil {
		return nil, err
	}
	st := s.ops[id]
	if st == nil {
		st = &opState{s: s, id: id}
		s.ops[id] = st
	}
	c := &opConfig{mode: mode, timeout: p.StoreTimeout, degradeAfter: p.DegradeAfter}
	if c.timeout <= 0 {
		c.timeout = defaultStoreTimeout
	}
	if c.degradeAfter <= 0 {
		c.degradeAfter = s.cfg.DegradeAfter
	}
	c.degradeAfter = min(c.degradeAfter, maxDegradeAfter)
	st.cfg.Store(c)
	return st, nil
}

// useStore reports whether a call should ask the store: always when the
// operation is healthy; when degraded, only the one call that tries it
// again after RetryInterval (release with tried).
func (st *opState) useStore() (use, probing bool) {
	if !st.degraded.Load() {
		return true, false
	}
	if time.Now().UnixNano() < st.nextTry.Load() {
		return false, false
	}
	if st.trying.CompareAndSwap(false, true) {
		return true, true
	}
	return false, false
}

// callerLeft is the end of a store call cut short by its caller: its context
// ended or its deadline passed. That says nothing about the store. Yet
// callers whose deadlines are all shorter than StoreTimeout would never let a
// slow store be found out. So a health check bounded by StoreTimeout alone
// decides (check). A probe frees the way for the next one after
// RetryInterval.
func (st *opState) callerLeft(probing bool) {
	if probing {
		st.nextTry.Store(time.Now().Add(st.s.cfg.RetryInterval).UnixNano())
		st.trying.Store(false)
	}
	st.check()
}

// check asks the store in the background, each time bounded by
// StoreTimeout only, and records the result: an answer recovers the
// operation, failures count towards degrading it. It asks again after each
// failure until the operation is degraded or the store answers (at most
// DegradeAfter times). One check at a time per operation.
func (st *opState) check() {
	if !st.checking.CompareAndSwap(false, true) {
		return
	}
	s := st.s
	if !s.spawn(func() {
		defer st.checking.Store(false)
		for range st.degradeAfter() {
			sent := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), st.timeout())
			// A command on the operation's own key: on Redis Cluster it
			// goes to the node that holds the operation (a PING would go
			// anywhere).
			err := s.rdb.PTTL(ctx, s.opKey(st.id, "c")).Err()
			cancel()
			if st.result(err, false, sent) || st.degraded.Load() {
				return
			}
			select {
			case <-s.stop:
				return
			default:
			}
		}
	}) {
		st.checking.Store(false)
	}
}

// background runs f in the background (Store.spawn) with a context bounded
// by the operation's StoreTimeout; after Close f does not run, and it
// returns false.
func (st *opState) background(f func(ctx context.Context)) bool {
	timeout := st.timeout()
	return st.s.spawn(func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		f(ctx)
	})
}

// result records the outcome of a store call sent at sent; it returns
// whether the store answered. A failure degrades the operation once it is
// the DegradeAfter-th in a row (evidence); before that it starts a check.
func (st *opState) result(err error, probing bool, sent time.Time) bool {
	if probing {
		defer st.trying.Store(false)
	}
	if err == nil {
		st.failures.Store(0)
		if st.degraded.CompareAndSwap(true, false) {
			st.s.cfg.Logger.Info("sundial: cluster limits recovered: the store answers again", "operation", st.id)
			if f := st.s.cfg.OnTransition; f != nil {
				f(st.id, false)
			}
		}
		return true
	}
	st.s.reloadSlots()
	if !st.degraded.Load() && !st.evidence(sent) {
		st.check()
		return false
	}
	st.nextTry.Store(time.Now().Add(st.s.cfg.RetryInterval).UnixNano())
	if st.degraded.CompareAndSwap(false, true) {
		st.s.cfg.Logger.Warn("sundial: cluster limits degraded: the store is unreachable or slow",
			"operation", st.id, "onStoreError", string(st.mode()), "error", err.Error())
		if f := st.s.cfg.OnTransition; f != nil {
			f(st.id, true)
		}
	}
	return false
}

// evidence counts the failure of a store call sent at sent, and reports
// whether DegradeAfter failures in a row have now been counted. A call
// sent before the last counted failure came in overlapped it: it failed
// in the same stall, and is not counted again.
func (st *opState) evidence(sent time.Time) bool {
	now := time.Now().UnixNano()
	for {
		last := st.failedAt.Load()
		if sent.UnixNano() < last {
			return false
		}
		if st.failedAt.CompareAndSwap(last, now) {
			break
		}
	}
	return st.failures.Add(1) >= int64(st.degradeAfter())
}

// slotsReloader is a Redis Cluster client (go-redis's ClusterClient).
type slotsReloader interface{ ReloadState(ctx context.Context) }

// reloadSlots has a Redis Cluster client learn the cluster's slots again. It
// does so in the background, at most one reload at a time. A store call
// failed, so its node may be dead and its slots served by a promoted replica.
// The client otherwise learns that only from a MOVED reply (a dead node sends
// none) or after its periodic reload.
func (s *Store) reloadSlots() {
	if r, ok := s.rdb.(slotsReloader); ok {
		r.ReloadState(context.Background())
	}
}

// retryIn is the time until a degraded operation tries the store again.
func (st *opState) retryIn() time.Duration {
	return max(time.Duration(st.nextTry.Load()-time.Now().UnixNano()), time.Millisecond)
}

// storeCtx bounds one store call by the operation's StoreTimeout and the
// caller's context (its deadline and cancellation).
func (st *opState) storeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, st.timeout())
}

// replicas is the replica count the Local fallback divides by: expected
// when positive, else the live count last learnt.
func (st *opState) replicas(expected int) int {
	if expected > 0 {
		return expected
	}
	return max(st.s.replicaCount(), 1)
}

// share is this replica's part of limit while degraded in Local mode.
func (st *opState) share(limit, expected int) int {
	n := st.replicas(expected)
	return max((limit+n-1)/n, 1)
}

// callerEnded returns the caller's context error when ctx has ended or its
// deadline has passed, else nil. A store call bounded by that deadline may
// return before ctx's own timer fires.
func callerEnded(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// NewClient returns a go-redis client set up for limits. Context timeouts are
// on: a call ends at its context's deadline. There are no hidden retries
// (MaxRetries -1). Dial and pool timeouts are short, and the pool is bounded.
// Read and write timeouts are a minute, the largest StoreTimeout. So a
// policy's StoreTimeout bounds its calls, whatever its length.
func NewClient(o *redis.Options) *redis.Client {
	c := *o
	limitSettings(&c.ContextTimeoutEnabled, &c.MaxRetries,
		[]*time.Duration{&c.DialTimeout, &c.PoolTimeout}, &c.ReadTimeout, &c.WriteTimeout)
	return redis.NewClient(&c)
}

// NewClusterClient is [NewClient] for a Redis Cluster, with the same
// settings. A MOVED or ASK redirect (a slot moved, a replica promoted) is
// followed within the call's context. It is followed at most MaxRedirects
// times (go-redis's default, 3). go-redis's own work runs without the
// caller's deadline: the slot map's reload and the command table's lookup.
// Each of its commands is bounded by one second, not the minute-long read
// timeout. So a hung node holds up neither for long. A caller's commands
// keep their own deadline, or none.
func NewClusterClient(o *redis.ClusterOptions) *redis.ClusterClient {
	c := *o
	limitSettings(&c.ContextTimeoutEnabled, &c.MaxRetries,
		[]*time.Duration{&c.DialTimeout, &c.PoolTimeout}, &c.ReadTimeout, &c.WriteTimeout)
	cc := redis.NewClusterClient(&c)
	cc.OnNewNode(func(n *redis.Client) { n.AddHook(ownWorkBound{}) })
	return cc
}

// ownWorkTimeout bounds each command of go-redis's own work on a cluster
// node. A call's store commands carry the call's StoreTimeout instead.
const ownWorkTimeout = time.Second

// ownWorkBound is the hook that bounds go-redis's own work on a cluster
// node: the slot map's reload (CLUSTER, without a deadline) and the
// command table's lookup (COMMAND, under go-redis's own 5 s).
type ownWorkBound struct{}

func (ownWorkBound) DialHook(next redis.DialHook) redis.DialHook { return next }

func (ownWorkBound) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !ownWork(ctx, cmd) {
			return next(ctx, cmd)
		}
		ctx, cancel := context.WithTimeout(ctx, ownWorkTimeout)
		defer cancel()
		return next(ctx, cmd)
	}
}

func (ownWorkBound) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// ownWork reports whether cmd is go-redis's own work: the command table's
// lookup, or a CLUSTER command without a deadline.
func ownWork(ctx context.Context, cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "command":
		return len(cmd.Args()) == 1
	case "cluster":
		_, has := ctx.Deadline()
		return !has
	}
	return false
}

// maxStoreTimeout is the largest StoreTimeout a policy may set.
const maxStoreTimeout = time.Minute

// limitSettings sets a client's options for limits: context timeouts on,
// no hidden retries, one second for each zero short timeout, and
// maxStoreTimeout for each zero I/O timeout. A shorter I/O timeout would cut
// a store call before its StoreTimeout.
func limitSettings(contextTimeouts *bool, maxRetries *int, short []*time.Duration, io ...*time.Duration) {
	*contextTimeouts = true
	*maxRetries = -1
	setTimeouts(time.Second, short...)
	setTimeouts(maxStoreTimeout, io...)
}

// setTimeouts sets each zero timeout to d.
func setTimeouts(d time.Duration, ds ...*time.Duration) {
	for _, p := range ds {
		if *p == 0 {
			*p = d
		}
	}
}

// validID reports whether id can be part of a key. Operation IDs always can;
// the check keeps a hash tag from being closed early.
func validID(id string) bool { return !strings.ContainsAny(id, "{}") }

// spanAttrDegraded marks the span of a call whose cluster limits were
// applied by the OnStoreError fallback (the store was unreachable).
const spanAttrDegraded = "sundial.cluster.degraded"

var degradedAttr = attribute.Bool(spanAttrDegraded, true)

// markDegraded records on ctx's span that the call was served degraded.
func markDegraded(ctx context.Context) {
	if sp := trace.SpanFromContext(ctx); sp.IsRecording() {
		sp.SetAttributes(degradedAttr)
	}
}
