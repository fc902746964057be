package resilience

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience/internal/limitkey"
)

// PerKey is a rate limit counted per key, such as a tenant or an API key,
// on top of the operation's own limits (Policy.PerKey). Each key gets its
// own fixed window of PermitLimit calls per Window. Up to QueueLimit calls
// of that key wait for a later window, as in the operation's window. With
// Policy.Scope cluster the windows are counted across the replicas
// sharing a store ([WithSharedKeyedWindow]). Else they are counted in
// this process ([KeyedFixedWindow]). The zero value is no per-key limit.
type PerKey struct {
	// PermitLimit is the number of calls admitted per Window for each
	// key; 0 means no per-key limit.
	PermitLimit int
	// Window is the length of each key's fixed window (default 1 s).
	Window time.Duration
	// QueueLimit is how many calls of one key may wait for a later window
	// (default 0: reject at once).
	QueueLimit int
	// Baggage names the baggage member that carries the call's key
	// (default "tenant"): the W3C "baggage" header over HTTP, the
	// "baggage" metadata over gRPC. Calls without it share the empty key.
	// A key longer than 128 bytes, or holding a control character or a
	// brace, is rejected with 400 KERNEL_VALIDATION_008.
	Baggage string
}

// defaultKeyBaggage is the baggage member a PerKey limit reads its key
// from when PerKey.Baggage is empty (the policy key's stated default).
const defaultKeyBaggage = "tenant"

// SharedKeyedWindow is a per-key fixed window whose permits are counted
// outside this process (package resilience/cluster implements it on
// Redis). Wait has the contract of [KeyedFixedWindow.Wait]. It returns
// nil when the call of key is admitted, after waiting for a reserved
// window if need be. It returns [ErrLimited] with the time to retry after
// when the call is turned away, and ctx's error when ctx ends first.
type SharedKeyedWindow interface {
	Wait(ctx context.Context, key string) (retryAfter time.Duration, err error)
}

// WithSharedKeyedWindow counts the operation's per-key limit (PerKey) in w
// instead of in this process (Policy.Scope cluster). A nil w is a no-op.
func WithSharedKeyedWindow(w SharedKeyedWindow) Option {
	return optionFunc(func(o *options) {
		if w != nil {
			o.keyed = w
		}
	})
}

// keyedLimit is the [Limit] of a policy's PerKey: the call's key from its
// baggage, checked, then the key's window.
type keyedLimit struct {
	id      string
	policy  PerKey
	baggage string
	local   *KeyedFixedWindow // process scope
	shared  SharedKeyedWindow // cluster scope
	l       *Limits
}

// keyedOf returns the per-key limit of p: the one of old when its policy
// and scope are unchanged (its windows keep their counts), else a new one.
func (l *Limits) keyedOf(old *chain, p Policy, o options) *keyedLimit {
	k := &keyedLimit{id: l.id, policy: p.PerKey, baggage: p.PerKey.Baggage, shared: o.keyed, l: l}
	if k.baggage == "" {
		k.baggage = defaultKeyBaggage
	}
	if k.shared != nil {
		return k
	}
	if old.keyed != nil && old.keyed.local != nil && old.keyed.policy == p.PerKey {
		return old.keyed
	}
	length := p.PerKey.Window
	if length <= 0 {
		length = DefaultWindow
	}
	local, err := NewKeyedFixedWindow(p.PerKey.PermitLimit, length, max(p.PerKey.QueueLimit, 0))
	if err != nil {
		return nil // refused values never pass the configuration
	}
	k.local = local
	return k
}

// codeLimitKeyMalformed is the code of a per-key limit's key that is too
// long or holds a control character or a brace.
const codeLimitKeyMalformed = "KERNEL_VALIDATION_008"

// Acquire implements [Limit].
func (k *keyedLimit) Acquire(ctx context.Context, inv *pipeline.Invocation) (Permit, error) {
	key, _ := inv.Baggage(k.baggage)
	if err := limitkey.Check(key); err != nil {
		return Permit{}, pipeline.NewError(pipeline.KindValidation, codeLimitKeyMalformed,
			fmt.Sprintf("The baggage member %q is not a valid limit key: %v.", k.baggage, err))
	}
	var retry time.Duration
	var err error
	if k.shared != nil {
		retry, err = k.shared.Wait(ctx, key)
	} else {
		retry, err = k.local.Wait(ctx, key)
	}
	switch {
	case err == nil:
		return Permit{}, nil
	case errors.Is(err, ErrLimited):
		return Permit{}, k.l.rateLimited.get(retry)
	}
	if e := callerEnd(ctx, err); e != nil {
		return Permit{}, e
	}
	return Permit{}, k.l.rateLimited.get(retry)
}
