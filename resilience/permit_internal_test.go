package resilience

import (
	"reflect"
	"testing"
)

// TestPermitFitsInRegisters: a Permit has at most four fields in at most
// four words. The compiler keeps such a struct in registers. A larger one
// is copied through memory at every TryAcquire, hold and release, which
// made the breaker's path measurably slower.
func TestPermitFitsInRegisters(t *testing.T) {
	typ := reflect.TypeFor[Permit]()
	word := reflect.TypeFor[uintptr]().Size()
	if typ.NumField() > 4 || typ.Size() > 4*word {
		t.Errorf("Permit has %d fields in %d bytes, want at most 4 fields in %d bytes",
			typ.NumField(), typ.Size(), 4*word)
	}
}

// countingReleaser counts the permits given back to it.
type countingReleaser struct{ n int }

func (r *countingReleaser) Release(Outcome) { r.n++ }

// TestPermitRelease: each kind of releaser gets its permit back once: a
// custom Releaser by Release, a built-in by its token.
func TestPermitRelease(t *testing.T) {
	var custom countingReleaser
	p := NewPermit(&custom)
	if !p.held() {
		t.Fatal("NewPermit(r).held() = false")
	}
	p.release(Outcome{Verdict: Success})
	if custom.n != 1 {
		t.Errorf("custom releaser got %d releases, want 1", custom.n)
	}
	if NewPermit(nil).held() || (Permit{}).held() {
		t.Error("a permit without a releaser is held")
	}
	l := NewLimits("op", Policy{FailureThreshold: 1})
	bl := l.cur.Load().breaker
	q, _, err := bl.TryAcquire(nil)
	if err != nil || !q.held() {
		t.Fatalf("breaker TryAcquire = %v, held %v", err, q.held())
	}
	q.release(Outcome{Verdict: Failure, Ran: true})
	if got := l.State().Breaker; got != BreakerOpen {
		t.Errorf("breaker after its permit's failure = %v, want open", got)
	}
}
