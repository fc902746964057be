package idempotency

import (
	"container/heap"
	"container/list"
	"context"
	"strconv"
	"sync"
	"time"
)

// Bounds of the in-process store.
const (
	// defaultMaxEntries bounds the records of a memory store.
	defaultMaxEntries = 100_000
	// defaultMaxBytes bounds the bytes a memory store accounts for its
	// records (64 MiB).
	defaultMaxBytes = 64 << 20
	// entryOverhead is what one record costs beyond its key, fingerprint
	// and outcome (map slot, list element, struct), for the byte bound.
	entryOverhead = 256
)

// MemoryConfig bounds the store of [NewMemoryStore]. Zero fields take
// the defaults.
type MemoryConfig struct {
	// MaxEntries bounds the records held (100,000 when zero).
	MaxEntries int
	// MaxBytes bounds the bytes accounted for them (64 MiB when zero).
	MaxBytes int64
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// memoryStore is the in-process [Store]: bounded in entries and bytes,
// finished records expiring after their retention. When a claim or an
// outcome would exceed a bound, expired records go first (whatever their
// operation's retention, so in order of expiry), then the oldest finished
// ones (their keys then run again if retried: see docs/idempotency.md).
// Running claims are never evicted, nor is the record being finished:
// when nothing can be evicted, Claim fails with ErrFull and Finish with
// ErrTooLarge.
type memoryStore struct {
	mu       sync.Mutex
	max      int
	maxBytes int64
	now      func() time.Time
	bytes    int64
	next     uint64
	entries  map[string]*memEntry
	done     *list.List // finished entries, oldest first
	expiry   expiryHeap // finished entries, soonest expiry first
}

type memEntry struct {
	key, fp, token string
	outcome        []byte
	expires        time.Time
	elem           *list.Element // in done; nil while running
	hidx           int           // index in expiry while finished
}

// expiryHeap orders finished entries by expiry (container/heap).
type expiryHeap []*memEntry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].expires.Before(h[j].expires) }
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].hidx, h[j].hidx = i, j
}
func (h *expiryHeap) Push(x any) {
	e := x.(*memEntry)
	e.hidx = len(*h)
	*h = append(*h, e)
}
func (h *expiryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}

func (e *memEntry) size() int64 {
	return int64(len(e.key) + len(e.fp) + len(e.token) + len(e.outcome) + entryOverhead)
}

// NewMemoryStore returns the in-process [Store], with the bounds of c:
// finished records expire after their retention and, when a bound is
// reached, expired records then the oldest finished ones are evicted.
// Running claims are never evicted; when nothing can be, Claim fails with
// [ErrFull] and Finish with [ErrTooLarge].
func NewMemoryStore(c MemoryConfig) Store {
	return newMemoryStore(c)
}

// newMemoryStore returns the in-process store with the bounds of c.
func newMemoryStore(c MemoryConfig) *memoryStore {
	s := &memoryStore{max: c.MaxEntries, maxBytes: c.MaxBytes, now: c.Now, entries: make(map[string]*memEntry), done: list.New()}
	if s.max <= 0 {
		s.max = defaultMaxEntries
	}
	if s.maxBytes <= 0 {
		s.maxBytes = defaultMaxBytes
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s
}

// len returns the number of records held and the bytes accounted for them.
func (s *memoryStore) len() (entries int, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries), s.bytes
}

// Lease returns 0: an in-process claim lives until its holder finishes.
func (s *memoryStore) Lease() time.Duration { return 0 }

func (s *memoryStore) remove(e *memEntry) {
	delete(s.entries, e.key)
	if e.elem != nil {
		s.done.Remove(e.elem)
		heap.Remove(&s.expiry, e.hidx)
		e.elem = nil
	}
	s.bytes -= e.size()
}

// evict removes finished records until fits reports true: the expired
// ones first, soonest expiry first, then the oldest finished. It returns
// fits' last answer; false means only running claims (and the record
// being finished, which is not in the finished lists yet) are left.
func (s *memoryStore) evict(now time.Time, fits func() bool) bool {
	for !fits() && len(s.expiry) > 0 && !now.Before(s.expiry[0].expires) {
		s.remove(s.expiry[0])
	}
	for f := s.done.Front(); !fits() && f != nil; f = s.done.Front() {
		s.remove(f.Value.(*memEntry))
	}
	return fits()
}

// Claim implements Store.
func (s *memoryStore) Claim(_ context.Context, key, fp string, _ time.Duration) (string, *Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if e, ok := s.entries[key]; ok {
		if e.elem == nil || now.Before(e.expires) {
			return "", &Record{Fingerprint: e.fp, Done: e.elem != nil, Outcome: e.outcome}, nil
		}
		s.remove(e)
	}
	s.next++
	e := &memEntry{key: key, fp: fp, token: strconv.FormatUint(s.next, 10), hidx: -1}
	if !s.evict(now, func() bool { return len(s.entries) < s.max && s.bytes+e.size() <= s.maxBytes }) {
		return "", nil, ErrFull
	}
	s.entries[key] = e
	s.bytes += e.size()
	return e.token, nil, nil
}

// Finish implements Store. It makes room for the outcome by evicting
// other records, never the one it finishes: when the outcome cannot fit
// it returns ErrTooLarge and the claim stays running, for the caller to
// finish with a smaller outcome (or release).
func (s *memoryStore) Finish(_ context.Context, key, token, _ string, outcome []byte, retention time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[key]
	if !ok || e.token != token || e.elem != nil {
		return ErrFenced
	}
	grow := int64(len(outcome) - len(e.outcome))
	now := s.now()
	if !s.evict(now, func() bool { return s.bytes+grow <= s.maxBytes }) {
		return ErrTooLarge
	}
	s.bytes += grow
	e.outcome = append([]byte(nil), outcome...)
	e.expires = now.Add(retention)
	e.elem = s.done.PushBack(e)
	heap.Push(&s.expiry, e)
	return nil
}

// Release implements Store.
func (s *memoryStore) Release(_ context.Context, key, token string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[key]
	if !ok || e.token != token {
		return ErrFenced
	}
	s.remove(e)
	return nil
}

// Renew implements Store; in-process claims need no renewal.
func (s *memoryStore) Renew(_ context.Context, key, token string, _ time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.entries[key]; !ok || e.token != token {
		return ErrFenced
	}
	return nil
}
