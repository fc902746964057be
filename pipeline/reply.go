package pipeline

import (
	"strings"
	"sync"
	"sync/atomic"
)

// Reply is the response side of one invocation: the facts a middleware
// adds to the answer besides the outcome itself, which every adapter
// carries in its protocol's form:
//
//   - a field (Set) is an HTTP response header and gRPC header metadata
//     (its name lower-cased), sent on success and failure alike;
//   - a note (Note) is a line on the CLI's standard error, printed after
//     a failure's message and before a success's output.
//
// The built-ins use it for the RateLimit-Policy and RateLimit fields, the
// Idempotent-Replayed mark and its CLI note. A middleware reaches it with
// [Invocation.Reply]. Facts added once the adapter has answered (a
// handler still running after an answer given at its deadline) are not
// sent. Reply is safe for concurrent use; its zero value is empty.
type Reply struct {
	n  atomic.Int32 // facts added, read without the lock
	mu sync.Mutex
	f  *replyFacts // nil until the first fact: most calls add none
}

// replyFacts are a Reply's facts, allocated on the first one so that an
// invocation without any stays small.
type replyFacts struct {
	fields []Field
	notes  []string
	quota  *Quota
}

// facts returns the facts, allocating them. r.mu is held.
func (r *Reply) facts() *replyFacts {
	if r.f == nil {
		r.f = new(replyFacts)
	}
	return r.f
}

// Field is one response field of a [Reply].
type Field struct{ Name, Value string }

// FieldReplayed is the field the idempotency middleware sets to "true" on
// an outcome replayed for a repeated idempotency key.
const FieldReplayed = "Idempotent-Replayed"

// Set sets the field name to value, replacing a field of the same name
// (compared case-insensitively). A nil Reply ignores it.
func (r *Reply) Set(name, value string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.facts()
	for i := range f.fields {
		if strings.EqualFold(f.fields[i].Name, name) {
			f.fields[i].Value = value
			return
		}
	}
	f.fields = append(f.fields, Field{name, value})
	r.n.Add(1)
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

// Fields returns a copy of the fields, in the order they were first set.
func (r *Reply) Fields() []Field {
	if r == nil || r.n.Load() == 0 {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Field(nil), r.f.fields...)
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

// Replayed reports whether the reply carries the replay mark
// ([FieldReplayed]): the outcome is an earlier call's, and nothing ran.
func (r *Reply) Replayed() bool {
	v, _ := r.Get(FieldReplayed)
	return v == "true"
}

// SetQuota records, typed, what a rate limit told the call about its
// window (the fixed window does, beside the RateLimit fields it sets), for
// middleware that read it; the last call wins. Adapters send the fields,
// not this.
func (r *Reply) SetQuota(q Quota) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.facts().quota = &q
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
	if r.f == nil || r.f.quota == nil {
		return Quota{}, false
	}
	return *r.f.quota, true
}
