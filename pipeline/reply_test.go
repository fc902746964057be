package pipeline_test

import (
	"testing"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience/idempotency"
)

// TestReplyQuotaFields: a quota is kept typed and sent as the
// RateLimit-Policy and RateLimit fields, rendered when read; whichever of
// SetQuota and a Set of such a field comes last wins, once.
func TestReplyQuotaFields(t *testing.T) {
	q := pipeline.Quota{Limit: 10, Window: 1500 * time.Millisecond, Remaining: 3, Reset: 200 * time.Millisecond}
	var r pipeline.Reply
	r.Set("X-Before", "1")
	r.Set("RateLimit", "stale")
	r.SetQuota(q)
	want := []pipeline.Field{{"X-Before", "1"}, {"ratelimit-policy", `"default";q=10;w=2`}, {"ratelimit", `"default";r=3;t=1`}}
	if got := r.Fields(); !equalFields(got, want) {
		t.Errorf("Fields = %v, want %v", got, want)
	}
	if v, ok := r.Get("RATELIMIT"); !ok || v != `"default";r=3;t=1` {
		t.Errorf(`Get("RATELIMIT") = %q, %v`, v, ok)
	}
	if got, ok := r.Quota(); !ok || got != q {
		t.Errorf("Quota = %+v, %v, want %+v", got, ok, q)
	}
	r.Set("RateLimit", "mine")
	want = []pipeline.Field{{"X-Before", "1"}, {"RateLimit", "mine"}, {"ratelimit-policy", `"default";q=10;w=2`}}
	if got := r.Fields(); !equalFields(got, want) {
		t.Errorf("after Set: Fields = %v, want %v", got, want)
	}
	q.Remaining = -1 // never negative on the wire
	r.SetQuota(q)
	if v, _ := r.Get("ratelimit"); v != `"default";r=0;t=1` {
		t.Errorf("after a second SetQuota: ratelimit = %q", v)
	}
	if n := len(r.Fields()); n != 3 {
		t.Errorf("after a second SetQuota: %d fields, want 3", n)
	}
}

func equalFields(a, b []pipeline.Field) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestReplayMarkCannotBeSet: a middleware that sets the Idempotent-Replayed
// field sends it, but does not mark the reply replayed (Replayed is the
// idempotency middleware's alone, resilience/idempotency's tests show it
// set).
func TestReplayMarkCannotBeSet(t *testing.T) {
	var r pipeline.Reply
	r.Set(idempotency.FieldReplayed, "true")
	if r.Replayed() {
		t.Error("Replayed after Set(FieldReplayed): a middleware spoofed the replay mark")
	}
	if v, ok := r.Get("idempotent-replayed"); !ok || v != "true" {
		t.Errorf("the field = %q, %v; want it sent as set", v, ok)
	}
	if (*pipeline.Reply)(nil).Replayed() {
		t.Error("a nil Reply is replayed")
	}
}

// TestForeignReplayMarkDoesNotSetReplayed: only the mark an invocation was
// made with sets Replayed; another mark, or none, does not.
func TestForeignReplayMarkDoesNotSetReplayed(t *testing.T) {
	var own, foreign pipeline.ReplayMark
	inv := pipeline.NewInvocation(pipeline.Spec{ReplayMark: &own})
	if foreign.Set(inv) || inv.Reply().Replayed() {
		t.Fatal("a foreign mark set Replayed")
	}
	if (*pipeline.ReplayMark)(nil).Set(inv) || inv.Reply().Replayed() {
		t.Fatal("a nil mark set Replayed")
	}
	unmarked := pipeline.NewInvocation(pipeline.Spec{})
	if own.Set(unmarked) || unmarked.Reply().Replayed() {
		t.Fatal("a mark set Replayed on an invocation made without one")
	}
	if !own.Set(inv) || !inv.Reply().Replayed() {
		t.Fatal("the invocation's own mark did not set Replayed")
	}
}
