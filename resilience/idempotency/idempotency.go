// Package idempotency makes an operation's side effect happen once per
// idempotency key, whatever protocol the calls come over
// (docs/idempotency.md).
//
// The kernel puts the middleware of [New] first in the Handle stage of every
// operation whose policy enables it. The first call with a key claims it in
// a [Store] and runs; a call with the same key while the first runs gets
// 409 KERNEL_CONFLICT_001 with a retry-after; a call with the same key and a
// different input gets 422 KERNEL_UNPROCESSABLE_001; once the first call's
// handler has returned, its outcome is replayed. A deadline that fires
// while the handler runs is never what is stored: the record stays
// "running" until the handler returns, then holds what it returned.
//
// Two stores ship: [NewMemoryStore] (one process, bounded in entries and
// bytes) and [NewRedisStore] (replicas sharing one Redis: claims with a
// fencing token, so a late finisher cannot overwrite a newer record).
package idempotency

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"reflect"
	"sync"
	"time"
)

// Defaults of a [Policy] and of the stores.
const (
	// defaultRetention is how long a finished outcome is kept (24 hours,
	// as the IETF draft's examples suggest).
	defaultRetention = 24 * time.Hour
	// defaultMaxOutcomeBytes bounds one stored outcome (64 KiB).
	defaultMaxOutcomeBytes = 64 << 10
	// defaultLease is how long a running record survives its holder's
	// process in a store that can outlive it (Redis); the holder renews it
	// every defaultLease/3 while its handler runs.
	defaultLease = 30 * time.Second
	// inProgressRetryAfter is the retry-after of a 409 for a key whose call
	// still runs.
	inProgressRetryAfter = time.Second
)

// Policy is one operation's idempotency setting (the resilience JSON's
// Idempotency object).
type Policy struct {
	// Enabled turns the middleware on for the operation.
	Enabled bool
	// Required rejects a call without a key (400 KERNEL_VALIDATION_004);
	// when false, a call without a key runs without any of this.
	Required bool
	// Retention is how long a finished outcome is replayed
	// (24 hours when zero).
	Retention time.Duration
	// MaxOutcomeBytes bounds one stored outcome (64 KiB when
	// zero). A larger one is not kept: a repeat gets 409
	// KERNEL_CONFLICT_002 ("already ran, outcome too large to replay").
	MaxOutcomeBytes int
}

func (p Policy) retention() time.Duration {
	if p.Retention > 0 {
		return p.Retention
	}
	return defaultRetention
}

func (p Policy) maxOutcome() int {
	if p.MaxOutcomeBytes > 0 {
		return p.MaxOutcomeBytes
	}
	return defaultMaxOutcomeBytes
}

// Record is what a store holds under a key that another call claimed.
type Record struct {
	// Fingerprint is the hash of the claiming call's canonical input.
	Fingerprint string
	// Done is false while the claiming call's handler runs.
	Done bool
	// Outcome is the encoded outcome, once Done.
	Outcome []byte
}

// Store keeps idempotency records. Keys are already scoped and hashed by
// the middleware (64 hex digits). Implementations must be safe for
// concurrent use.
type Store interface {
	// Claim claims key for a call whose input hashes to fingerprint. It
	// returns the claim's fencing token, or the record of an earlier claim
	// (and no token) when the key is taken. lease bounds how long a claim
	// survives a holder that vanished (stores that outlive the process).
	Claim(ctx context.Context, key, fingerprint string, lease time.Duration) (token string, existing *Record, err error)
	// Finish stores the outcome under key if token still holds it, kept for
	// retention; fingerprint is the claim's (a store whose leases can lapse
	// uses it to write the record again when nobody holds the key).
	// ErrFenced: another claim holds the key now. ErrTooLarge: the store
	// cannot make room for the outcome; the claim stays running.
	Finish(ctx context.Context, key, token, fingerprint string, outcome []byte, retention time.Duration) error
	// Release frees key if token still holds it.
	Release(ctx context.Context, key, token string) error
	// Renew extends a running claim's lease if token still holds it.
	Renew(ctx context.Context, key, token string, lease time.Duration) error
	// Lease is the lease a claim gets; 0: claims live until Finish or
	// Release (an in-process store, which dies with its holders).
	Lease() time.Duration
}

// ErrFenced is returned by Finish, Release and Renew when the token no
// longer holds the key (its lease expired and another call claimed it).
var ErrFenced = errors.New("idempotency: the claim was lost to a newer one")

// ErrFull is returned by Claim when a bounded store is full of running
// claims and can evict nothing.
var ErrFull = errors.New("idempotency: store full of running claims")

// ErrTooLarge is returned by Finish when a bounded store cannot make room
// for the outcome; the claim stays running, and the caller finishes it
// with a smaller outcome or releases it.
var ErrTooLarge = errors.New("idempotency: the outcome does not fit in the store")

// fingerprint returns the hash of an input's canonical form. The form is
// its JSON encoding as Go produces it from the decoded value. Struct
// fields come in declaration order and map keys sorted. So the same input
// gives the same fingerprint over HTTP, gRPC or the CLI, whatever the key
// order the caller sent.
//
// Exported fields that JSON skips (tagged json:"-") are hashed too, by
// name and value. That includes fields promoted from embedded structs,
// such as AccountRef{Account string `param:"account" json:"-"`}. Such a
// field is typically filled from the URL path or query, not the body.
// Two calls that differ only there are different requests.
func fingerprint(input any) (string, error) {
	b, err := json.Marshal(input)
	if err != nil {
		return "", err
	}
	v := reflect.ValueOf(input)
	for v.Kind() == reflect.Pointer && !v.IsNil() {
		v = v.Elem()
	}
	var hidden []reflect.StructField
	if v.Kind() == reflect.Struct {
		hidden = hiddenFields(v.Type())
	}
	if len(hidden) == 0 {
		sum := sha256.Sum256(b)
		return hex.EncodeToString(sum[:]), nil
	}
	h := sha256.New()
	h.Write(b)
	for _, f := range hidden {
		fb := []byte("null") // promoted through a nil embedded pointer: unset
		if fv, err := v.FieldByIndexErr(f.Index); err == nil {
			var ut *json.UnsupportedTypeError
			switch fb, err = json.Marshal(fv.Interface()); {
			case errors.As(err, &ut):
				// A func, a chan: JSON-skipped because it cannot be encoded,
				// and nothing outside the process sets it.
				fb = []byte("?")
			case err != nil:
				return "", err
			}
		}
		h.Write([]byte{0})
		h.Write([]byte(f.Name))
		h.Write([]byte{0})
		h.Write(fb)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// hiddenByType caches hiddenFields per struct type.
var hiddenByType sync.Map // reflect.Type -> []reflect.StructField

// hiddenFields returns t's exported fields, its own and those promoted
// from embedded structs (reflect.VisibleFields, as the HTTP binder sets
// them), that JSON skips: tagged json:"-", or inside an embedded struct
// tagged json:"-".
func hiddenFields(t reflect.Type) []reflect.StructField {
	if v, ok := hiddenByType.Load(t); ok {
		return v.([]reflect.StructField)
	}
	var out []reflect.StructField
	for _, f := range reflect.VisibleFields(t) {
		if f.Anonymous || !f.IsExported() {
			continue
		}
		skipped := f.Tag.Get("json") == "-"
		for k := 1; k < len(f.Index) && !skipped; k++ {
			skipped = t.FieldByIndex(f.Index[:k]).Tag.Get("json") == "-"
		}
		if skipped {
			out = append(out, f)
		}
	}
	hiddenByType.Store(t, out)
	return out
}

// scopedKey returns the store key of an idempotency key: a hash of the
// operation ID, the caller's scope (principal or tenant; "" when the
// application supplies none) and the key, so keys of different operations
// or callers never meet.
func scopedKey(operation, scope, key string) string {
	h := sha256.New()
	for _, s := range []string{operation, scope, key} {
		var n [4]byte
		n[0], n[1], n[2], n[3] = byte(len(s)>>24), byte(len(s)>>16), byte(len(s)>>8), byte(len(s))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	return hex.EncodeToString(h.Sum(nil))
}
