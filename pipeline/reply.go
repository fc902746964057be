package pipeline

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Reply is the response side of one invocation. It holds the facts a
// middleware adds to the answer besides the outcome. Every adapter
// carries them in its protocol's form. A field (Set) is an HTTP response
// header and gRPC header metadata (its name lower-cased). It is sent on
// success and failure alike. A note (Note) is a line on the CLI's standard
// error. It comes after a failure's message and before a success's output.
//
// The built-ins use it for the RateLimit-Policy and RateLimit fields, the
// Idempotent-Replayed mark and its CLI note. A middleware reaches it with
// [Invocation.Reply]. Facts added once the adapter has answered (a
// handler still running after an answer given at its deadline) are not
// sent. Reply is safe for concurrent use; its zero value is empty.
type Reply struct {
	n        atomic.Int32 // facts added, read without the lock
	replayed atomic.Bool  // set by the invocation's ReplayMark only
	mu       sync.Mutex
	f        *replyFacts // nil until the first fact: most calls add none
}

// replyFacts are a Reply's facts, allocated on the first one so that an
// invocation without any stays small.
type replyFacts struct {
	fields   []Field
	notes    []string
	quota    Quota
	hasQuota bool // the RateLimit-Policy and RateLimit fields render quota
}

// facts returns the facts, allocating them. r.mu is held.
func (r *Reply) facts() *replyFacts {
	if r.f == nil {
		r.f = new(replyFacts)
	}
	return r.f
}

// has reports whether f has a field name (compared case-insensitively).
func (f *replyFacts) has(name string) bool {
	return slices.ContainsFunc(f.fields, func(x Field) bool { return strings.EqualFold(x.Name, name) })
}

// Field is one response field of a [Reply].
type Field struct{ Name, Value string }

// Set sets the field name to value, replacing a field of the same name
// (compared case-insensitively). A nil Reply ignores it.
func (r *Reply) Set(name, value string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.facts()
	r.n.Add(1)
	for i := range f.fields {
		if strings.EqualFold(f.fields[i].Name, name) {
			f.fields[i].Value = value
			return
		}
	}
	f.fields = append(f.fields, Field{name, value})
}

// Get returns the value of the field name (compared case-insensitively).
func (r *Reply) Get(name string) (string, bool) {
	if r == nil || r.n.Load() == 0 {
		return "", false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return "", false
	}
	for _, f := range r.f.fields {
		if strings.EqualFold(f.Name, name) {
			return f.Value, true
		}
	}
	if r.f.hasQuota {
		switch {
		case strings.EqualFold(name, fieldRateLimitPolicy):
			return renderPolicy(r.f.quota), true
		case strings.EqualFold(name, fieldRateLimit):
			return renderRemaining(r.f.quota), true
		}
	}
	return "", false
}

// Note adds a line for a human reader (the CLI prints it on standard
// error); line has no trailing newline.
func (r *Reply) Note(line string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.facts()
	f.notes = append(f.notes, line)
	r.n.Add(1)
}

// Fields returns a copy of the fields, in the order they were first set,
// then the RateLimit-Policy and RateLimit fields of the quota (SetQuota),
// rendered now: a call pays for the strings only when they are sent.
func (r *Reply) Fields() []Field {
	if r == nil || r.n.Load() == 0 {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil || len(r.f.fields) == 0 && !r.f.hasQuota {
		return nil
	}
	out := make([]Field, len(r.f.fields), len(r.f.fields)+2)
	copy(out, r.f.fields)
	if r.f.hasQuota {
		// A field of the same name set after SetQuota replaced it.
		if !r.f.has(fieldRateLimitPolicy) {
			out = append(out, Field{fieldRateLimitPolicy, renderPolicy(r.f.quota)})
		}
		if !r.f.has(fieldRateLimit) {
			out = append(out, Field{fieldRateLimit, renderRemaining(r.f.quota)})
		}
	}
	return out
}

// Notes returns a copy of the notes, in the order they were added.
func (r *Reply) Notes() []string {
	if r == nil || r.n.Load() == 0 {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.f.notes...)
}

// Replayed reports whether the reply is a stored outcome of an earlier
// call: nothing ran. Only the [ReplayMark] the invocation was made with
// sets it. The breaker and the telemetry trust it.
func (r *Reply) Replayed() bool {
	return r != nil && r.replayed.Load()
}

// ReplayMark is the capability to mark a reply replayed. An invocation
// accepts the one mark its [Spec] names: no other mark sets
// [Reply.Replayed]. The kernel makes one and hands it to the idempotency
// middleware alone. The zero value is ready to use; use it by pointer.
type ReplayMark struct{ _ byte } // not zero-sized: each mark has its own address

// Set marks inv's reply replayed if inv was made with m. It reports
// whether it did.
func (m *ReplayMark) Set(inv *Invocation) bool {
	if m == nil || inv == nil || inv.mark != m {
		return false
	}
	inv.reply.replayed.Store(true)
	return true
}

// SetQuota records what a rate limit told the call about its window (the
// fixed window does, with RateLimitHeaders on); the last call wins. The
// reply carries it as the RateLimit-Policy and RateLimit fields
// (draft-ietf-httpapi-ratelimit-headers-10, experimental), rendered when
// an adapter sends them; fields of those names set before are replaced.
func (r *Reply) SetQuota(q Quota) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.facts()
	f.fields = slices.DeleteFunc(f.fields, func(x Field) bool {
		return strings.EqualFold(x.Name, fieldRateLimitPolicy) || strings.EqualFold(x.Name, fieldRateLimit)
	})
	f.quota, f.hasQuota = q, true
	r.n.Add(1)
}

// Quota returns what SetQuota recorded, and false when nothing was (no
// rate limit, RateLimitHeaders off, or the call never reached the limit).
func (r *Reply) Quota() (Quota, bool) {
	if r == nil || r.n.Load() == 0 {
		return Quota{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil || !r.f.hasQuota {
		return Quota{}, false
	}
	return r.f.quota, true
}
