package idempotency

import (
	"container/list"
	"context"
	"strconv"
	"sync"
	"time"
)

// Bounds of the in-process store.
const (
	// DefaultMaxEntries bounds the records of a MemoryStore.
	DefaultMaxEntries = 100_000
	// DefaultMaxBytes bounds the bytes a MemoryStore accounts for its
	// records (64 MiB).
	DefaultMaxBytes = 64 << 20
	// entryOverhead is what one record costs beyond its key, fingerprint
	// and outcome (map slot, list element, struct), for the byte bound.
	entryOverhead = 256
)

// MemoryConfig bounds a [MemoryStore]. Zero fields take the defaults.
type MemoryConfig struct {
	MaxEntries int
	MaxBytes   int64
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// MemoryStore is the in-process [Store]: bounded in entries and bytes,
// finished records expiring after their retention. When a claim would
// exceed a bound, expired records go first, then the oldest finished ones
// (their keys then run again if retried: see docs/idempotency.md). Running
// claims are never evicted; when nothing can be evicted Claim fails with
// ErrFull.
type MemoryStore struct {
	mu       sync.Mutex
	max      int
	maxBytes int64
	now      func() time.Time
	bytes    int64
	next     uint64
	entries  map[string]*memEntry
	done     *list.List // finished entries, oldest first
}

type memEntry struct {
	key, fp, token string
	outcome        []byte
	expires        time.Time
	elem           *list.Element // in done; nil while running
}

func (e *memEntry) size() int64 {
	return int64(len(e.key) + len(e.fp) + len(e.token) + len(e.outcome) + entryOverhead)
}

// NewMemoryStore returns an in-process store with the bounds of c.
func NewMemoryStore(c MemoryConfig) *MemoryStore {
	s := &MemoryStore{max: c.MaxEntries, maxBytes: c.MaxBytes, now: c.Now, entries: make(map[string]*memEntry), done: list.New()}
	if s.max <= 0 {
		s.max = DefaultMaxEntries
	}
	if s.maxBytes <= 0 {
		s.maxBytes = DefaultMaxBytes
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s
}

// Len returns the number of records held and the bytes accounted for them.
func (s *MemoryStore) Len() (entries int, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries), s.bytes
}

// Lease returns 0: an in-process claim lives until its holder finishes.
func (s *MemoryStore) Lease() time.Duration { return 0 }

func (s *MemoryStore) remove(e *memEntry) {
	delete(s.entries, e.key)
	if e.elem != nil {
		s.done.Remove(e.elem)
		e.elem = nil
	}
	s.bytes -= e.size()
}

// makeRoom evicts expired then oldest finished records until one more
// record of size n fits; false when only running claims are left.
func (s *MemoryStore) makeRoom(now time.Time, n int64) bool {
	for f := s.done.Front(); f != nil; f = s.done.Front() {
		e := f.Value.(*memEntry)
		if now.Before(e.expires) && len(s.entries) < s.max && s.bytes+n <= s.maxBytes {
			return true
		}
		s.remove(e)
	}
	return len(s.entries) < s.max && s.bytes+n <= s.maxBytes
}

// Claim implements Store.
func (s *MemoryStore) Claim(_ context.Context, key, fp string, _ time.Duration) (string, *Record, error) {
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
	e := &memEntry{key: key, fp: fp, token: strconv.FormatUint(s.next, 10)}
	if !s.makeRoom(now, e.size()) {
		return "", nil, ErrFull
	}
	s.entries[key] = e
	s.bytes += e.size()
	return e.token, nil, nil
}

// Finish implements Store.
func (s *MemoryStore) Finish(_ context.Context, key, token string, outcome []byte, retention time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[key]
	if !ok || e.token != token || e.elem != nil {
		return ErrFenced
	}
	s.bytes -= e.size()
	e.outcome = append([]byte(nil), outcome...)
	e.expires = s.now().Add(retention)
	s.bytes += e.size()
	e.elem = s.done.PushBack(e)
	// The outcome may have pushed the bytes over the bound: evict older
	// finished records (this one last).
	for s.bytes > s.maxBytes {
		f := s.done.Front()
		s.remove(f.Value.(*memEntry))
		if f.Value.(*memEntry) == e {
			break
		}
	}
	return nil
}

// Release implements Store.
func (s *MemoryStore) Release(_ context.Context, key, token string) error {
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
func (s *MemoryStore) Renew(_ context.Context, key, token string, _ time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.entries[key]; !ok || e.token != token {
		return ErrFenced
	}
	return nil
}
