package idempotency

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisStore is the [Store] shared by replicas: one Redis hash per key
// (fields s = "r" running or "d" done, f fingerprint, t fencing token, o
// outcome), each call one Lua script. A claim is SET-if-absent with an
// expiry (the lease, renewed by its holder while the handler runs), so a
// replica that dies mid-call frees the key after the lease; every later
// write checks the claim's random fencing token, so a holder whose lease
// expired (and whose key another call claimed) cannot overwrite the newer
// record.
type redisStore struct {
	rdb    redis.UniversalClient
	prefix string
	lease  time.Duration
}

// NewRedisStore returns the [Store] that replicas share: one Redis hash
// per key on rdb, claims with a lease and a fencing token (see
// docs/idempotency.md). Its keys start with prefix ("sundial" when empty)
// followed by ":idem:". lease is the running claims' lease (30 s when
// zero).
func NewRedisStore(rdb redis.UniversalClient, prefix string, lease time.Duration) Store {
	if prefix == "" {
		prefix = "sundial"
	}
	if lease <= 0 {
		lease = defaultLease
	}
	return &redisStore{rdb: rdb, prefix: prefix + ":idem:", lease: lease}
}

// Lease implements Store.
func (s *redisStore) Lease() time.Duration { return s.lease }

var claimScript = redis.NewScript(`
local r = redis.call('HMGET', KEYS[1], 's', 'f', 'o')
if r[1] then return {r[1], r[2], r[3] or ''} end
redis.call('HSET', KEYS[1], 's', 'r', 'f', ARGV[1], 't', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 0
`)

// finishScript stores the outcome if the token still holds the key — or if
// nobody does: a holder whose lease lapsed (its renewals failed) while no
// other call claimed the key still has the key's one real outcome, and a
// newer claim that ran and finished would have left its record (a newer
// one that released left nothing, as the key was free for this one).
var finishScript = redis.NewScript(`
local t = redis.call('HGET', KEYS[1], 't')
if t == false then
  redis.call('HSET', KEYS[1], 's', 'd', 'f', ARGV[4], 't', ARGV[1], 'o', ARGV[2])
elseif t ~= ARGV[1] or redis.call('HGET', KEYS[1], 's') ~= 'r' then
  return 0
else
  redis.call('HSET', KEYS[1], 's', 'd', 'o', ARGV[2])
end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
`)

var releaseScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 't') ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1
`)

var renewScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 't') ~= ARGV[1] or redis.call('HGET', KEYS[1], 's') ~= 'r' then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`)

func ms(d time.Duration) int64 {
	if m := d.Milliseconds(); m > 0 {
		return m
	}
	return 1
}

// Claim implements Store.
func (s *redisStore) Claim(ctx context.Context, key, fp string, lease time.Duration) (string, *Record, error) {
	if lease <= 0 {
		lease = s.lease
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	v, err := claimScript.Run(ctx, s.rdb, []string{s.prefix + key}, fp, token, ms(lease)).Result()
	if err != nil {
		return "", nil, err
	}
	if n, ok := v.(int64); ok && n == 0 {
		return token, nil, nil
	}
	arr, ok := v.([]any)
	if !ok || len(arr) != 3 {
		return "", nil, errors.New("idempotency: unexpected reply from the claim script")
	}
	str := func(x any) string { s, _ := x.(string); return s }
	rec := &Record{Fingerprint: str(arr[1]), Done: str(arr[0]) == "d"}
	if rec.Done {
		rec.Outcome = []byte(str(arr[2]))
	}
	return "", rec, nil
}

func fenced(n int64, err error) error {
	if err != nil {
		return err
	}
	if n == 0 {
		return ErrFenced
	}
	return nil
}

// Finish implements Store.
func (s *redisStore) Finish(ctx context.Context, key, token, fp string, outcome []byte, retention time.Duration) error {
	return fenced(finishScript.Run(ctx, s.rdb, []string{s.prefix + key}, token, outcome, ms(retention), fp).Int64())
}

// Release implements Store.
func (s *redisStore) Release(ctx context.Context, key, token string) error {
	return fenced(releaseScript.Run(ctx, s.rdb, []string{s.prefix + key}, token).Int64())
}

// Renew implements Store.
func (s *redisStore) Renew(ctx context.Context, key, token string, lease time.Duration) error {
	if lease <= 0 {
		lease = s.lease
	}
	return fenced(renewScript.Run(ctx, s.rdb, []string{s.prefix + key}, token, ms(lease)).Int64())
}
