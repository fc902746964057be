package resilience_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience"
)

const (
	pSheddable = pipeline.PrioritySheddable
	pDefault   = pipeline.PriorityDefault
	pCritical  = pipeline.PriorityCritical
)

// classInv returns an invocation of the operation of class c, named by
// input.
func classInv(c pipeline.Priority, input any) *pipeline.Invocation {
	return pipeline.NewInvocation(pipeline.Spec{Operation: op(opID), Input: input, Priority: c})
}

// classGate is a handler that records the inputs it ran, in order, and holds
// each call until release is closed.
type classGate struct {
	mu      sync.Mutex
	ran     []any
	release chan struct{}
}

func newClassGate() *classGate { return &classGate{release: make(chan struct{})} }

func (g *classGate) handle(ctx context.Context, inv *pipeline.Invocation) (any, error) {
	g.mu.Lock()
	g.ran = append(g.ran, inv.Input())
	g.mu.Unlock()
	select {
	case <-g.release:
	case <-ctx.Done():
	}
	return nil, nil
}

func (g *classGate) order() []any {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]any(nil), g.ran...)
}

// goClass runs inv through h on a goroutine; its outcome arrives on the
// channel.
func goClass(h pipeline.Handler, inv *pipeline.Invocation) <-chan error {
	ch := make(chan error, 1)
	go func() { _, err := h(context.Background(), inv); ch <- err }()
	return ch
}

// checkShed fails unless err is the shed rejection of a call of class c.
func checkShed(t *testing.T, err error, c pipeline.Priority) {
	t.Helper()
	e := pipeline.AsError(err)
	ra, ok := pipelinetest.RetryAfterSeconds(e)
	if e.Code() != resilience.CodeShed || e.Kind() != pipeline.KindUnavailable || !ok || ra != 1 {
		t.Fatalf("outcome = %v (retry-after %d, %v); want UNAVAILABLE %s with a retry-after of 1 s", err, ra, ok, resilience.CodeShed)
	}
	if p, _ := e.Details()["priority"]; p != c.String() {
		t.Errorf("details.priority = %v, want %q", p, c)
	}
}

// TestQueueOrdersByClass: waiters of a higher class are admitted first,
// oldest first within a class, whatever their order of arrival.
func TestQueueOrdersByClass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newClassGate()
		h, _ := limitStack(t, resilience.Policy{ConcurrencyLimit: 1, ConcurrencyQueueLimit: 5, Priority: pCritical}, g.handle)
		var outs []<-chan error
		for _, c := range []struct {
			p    pipeline.Priority
			name string
		}{{pCritical, "holder"}, {pSheddable, "s1"}, {pDefault, "d1"}, {pSheddable, "s2"}, {pCritical, "c1"}, {pDefault, "d2"}} {
			outs = append(outs, goClass(h, classInv(c.p, c.name)))
			synctest.Wait()
		}
		close(g.release)
		for _, o := range outs {
			if err := <-o; err != nil {
				t.Fatalf("call = %v, want success", err)
			}
		}
		want := []any{"holder", "c1", "d1", "d2", "s1", "s2"}
		if got := g.order(); !equalAny(got, want) {
			t.Errorf("admitted %v, want %v", got, want)
		}
	})
}

func equalAny(a, b []any) bool {
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

// TestFullQueueEvictsTheLowestClass: an arrival that finds the queue full
// takes the place of the newest waiter of the lowest class below its own,
// which gets the shed rejection; an arrival with no lower waiter to evict
// is turned away — shed when below the operation's class, the
// concurrency rejection when at it.
func TestFullQueueEvictsTheLowestClass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newClassGate()
		h, l := limitStack(t, resilience.Policy{ConcurrencyLimit: 1, ConcurrencyQueueLimit: 2, Priority: pCritical}, g.handle)
		holder := goClass(h, classInv(pCritical, "holder"))
		synctest.Wait()
		s1 := goClass(h, classInv(pSheddable, "s1"))
		synctest.Wait()
		s2 := goClass(h, classInv(pSheddable, "s2"))
		synctest.Wait()
		c1 := goClass(h, classInv(pCritical, "c1")) // evicts s2, the newest sheddable
		synctest.Wait()
		checkShed(t, <-s2, pSheddable)
		d1 := goClass(h, classInv(pDefault, "d1")) // evicts s1
		synctest.Wait()
		checkShed(t, <-s1, pSheddable)
		// The queue holds c1 and d1: a sheddable or default arrival has
		// nobody lower to evict; a critical one evicts d1.
		if _, err := h(context.Background(), classInv(pSheddable, "s3")); err == nil {
			t.Fatal("sheddable arrival at a full queue admitted")
		} else {
			checkShed(t, err, pSheddable)
		}
		if _, err := h(context.Background(), classInv(pDefault, "d2")); err == nil {
			t.Fatal("default arrival at a full queue of equals admitted")
		} else {
			checkShed(t, err, pDefault) // below the operation's class
		}
		c2 := goClass(h, classInv(pCritical, "c2"))
		synctest.Wait()
		checkShed(t, <-d1, pDefault)
		if _, err := h(context.Background(), classInv(pCritical, "c3")); pipelinetest.CodeOf(err) != resilience.CodeConcurrencyLimited {
			t.Fatalf("critical arrival at a queue full of critical = %v, want %s", err, resilience.CodeConcurrencyLimited)
		}
		close(g.release)
		for _, o := range []<-chan error{holder, c1, c2} {
			if err := <-o; err != nil {
				t.Fatalf("call = %v, want success", err)
			}
		}
		if got := l.State().Rejections; got.Shed != 5 || got.Concurrency != 1 {
			t.Errorf("Rejections = %+v, want Shed 5, Concurrency 1", got)
		}
		if want := []any{"holder", "c1", "c2"}; !equalAny(g.order(), want) {
			t.Errorf("admitted %v, want %v", g.order(), want)
		}
	})
}

// TestReserveKeptForTheOperationsClass: calls below the operation's class
// may take ConcurrencyLimit less the reserve (rounded down to whole
// slots); calls at it may take every slot. An operation whose calls all
// keep its class loses nothing to the reserve.
func TestReserveKeptForTheOperationsClass(t *testing.T) {
	for _, tt := range []struct {
		name         string
		class        pipeline.Priority
		limit        int
		reserve      float64
		lowered, top int // how many lowered calls, then calls at the class, are admitted
	}{
		{"critical, 10, 0.2", pCritical, 10, 0.2, 8, 2},
		{"critical, 10, 0.25 rounds down", pCritical, 10, 0.25, 8, 2},
		{"critical, 4, 0.1 reserves nothing", pCritical, 4, 0.1, 4, 0},
		{"default, 10, 0.1", pDefault, 10, 0.1, 9, 1},
		{"critical, 10, no reserve", pCritical, 10, 0, 10, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := newClassGate()
				h, _ := limitStack(t, resilience.Policy{ConcurrencyLimit: tt.limit, Priority: tt.class, PriorityReserve: tt.reserve}, g.handle)
				var outs []<-chan error
				admit := func(c pipeline.Priority, n int) {
					for range n {
						outs = append(outs, goClass(h, classInv(c, c.String())))
						synctest.Wait()
					}
				}
				admit(pSheddable, tt.lowered)
				if _, err := h(context.Background(), classInv(pSheddable, "over")); err == nil {
					t.Fatalf("lowered call %d admitted, want %d at most", tt.lowered+1, tt.lowered)
				} else {
					checkShed(t, err, pSheddable)
				}
				admit(tt.class, tt.top)
				_, err := h(context.Background(), classInv(tt.class, "over"))
				if want := resilience.CodeConcurrencyLimited; tt.class == pDefault && pipelinetest.CodeOf(err) != want ||
					tt.class == pCritical && pipelinetest.CodeOf(err) != want {
					t.Fatalf("call at the class past the limit = %v, want %s", err, want)
				}
				close(g.release)
				for _, o := range outs {
					if err := <-o; err != nil {
						t.Fatalf("admitted call = %v", err)
					}
				}
				if n := len(g.order()); n != tt.limit {
					t.Errorf("%d calls ran, want %d", n, tt.limit)
				}
			})
		})
	}
}

// TestDefaultTrafficUnchanged: an operation whose calls keep its class
// admits ConcurrencyLimit calls and rejects the next with
// KERNEL_UNAVAILABLE_003, whatever the reserve — as before classes.
func TestDefaultTrafficUnchanged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newClassGate()
		h, _ := limitStack(t, resilience.Policy{ConcurrencyLimit: 10, PriorityReserve: 0.5}, g.handle)
		var outs []<-chan error
		for range 10 {
			outs = append(outs, goClass(h, newInv(nil)))
			synctest.Wait()
		}
		if _, err := h(context.Background(), newInv(nil)); pipelinetest.CodeOf(err) != resilience.CodeConcurrencyLimited {
			t.Fatalf("11th call = %v, want %s", err, resilience.CodeConcurrencyLimited)
		}
		close(g.release)
		for _, o := range outs {
			if err := <-o; err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestReserveWaitersAdmittedInClassOrder: with lowered calls waiting for
// the unreserved slots, a call of the operation's class takes a free
// reserved slot at once, and a reload dropping the reserve admits the
// waiters.
func TestReserveWaitersAdmittedInClassOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newClassGate()
		p := resilience.Policy{ConcurrencyLimit: 2, ConcurrencyQueueLimit: 2, Priority: pCritical, PriorityReserve: 0.5}
		h, l := limitStack(t, p, g.handle)
		first := goClass(h, classInv(pSheddable, "s1"))
		synctest.Wait()
		waiter := goClass(h, classInv(pSheddable, "s2")) // only the reserved slot is free
		synctest.Wait()
		if st := l.State(); st.InFlight != 1 || st.ConcurrencyQueue != 1 {
			t.Fatalf("InFlight, ConcurrencyQueue = %d, %d; want 1, 1", st.InFlight, st.ConcurrencyQueue)
		}
		c := goClass(h, classInv(pCritical, "c1"))
		synctest.Wait()
		if st := l.State(); st.InFlight != 2 || st.ConcurrencyQueue != 1 {
			t.Fatalf("after a critical arrival InFlight, ConcurrencyQueue = %d, %d; want 2, 1", st.InFlight, st.ConcurrencyQueue)
		}
		p.ConcurrencyLimit = 3
		p.PriorityReserve = 0
		l.Update(p)
		synctest.Wait()
		if st := l.State(); st.InFlight != 3 || st.ConcurrencyQueue != 0 {
			t.Fatalf("after a reload InFlight, ConcurrencyQueue = %d, %d; want 3, 0", st.InFlight, st.ConcurrencyQueue)
		}
		close(g.release)
		for _, o := range []<-chan error{first, waiter, c} {
			if err := <-o; err != nil {
				t.Fatal(err)
			}
		}
		if want := []any{"s1", "c1", "s2"}; !equalAny(g.order(), want) {
			t.Errorf("admitted %v, want %v", g.order(), want)
		}
	})
}

// TestShedIsNeutralToTheBreaker: shed rejections never open the breaker,
// whether the limit or a middleware returns them.
func TestShedIsNeutralToTheBreaker(t *testing.T) {
	err := resilience.Shed(opID, pSheddable, time.Second)
	if v := resilience.VerdictOf(context.Background(), newInv(nil), err); v != resilience.Neutral {
		t.Errorf("VerdictOf(Shed) = %v, want Neutral", v)
	}
	synctest.Test(t, func(t *testing.T) {
		g := newClassGate()
		h, l := limitStack(t, resilience.Policy{ConcurrencyLimit: 1, FailureThreshold: 1, Priority: pCritical}, g.handle)
		holder := goClass(h, classInv(pCritical, "holder"))
		synctest.Wait()
		for range 5 {
			if _, err := h(context.Background(), classInv(pSheddable, "s")); pipelinetest.CodeOf(err) != resilience.CodeShed {
				t.Fatalf("call = %v, want %s", err, resilience.CodeShed)
			}
		}
		close(g.release)
		if err := <-holder; err != nil {
			t.Fatal(err)
		}
		if st := l.State(); st.Breaker != resilience.BreakerClosed {
			t.Errorf("breaker %v after 5 shed calls, want closed", st.Breaker)
		}
	})
}

// TestShedWaiterCancelled: a waiter whose caller leaves gives its place
// back; the class order of the others holds.
func TestShedWaiterCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newClassGate()
		h, l := limitStack(t, resilience.Policy{ConcurrencyLimit: 1, ConcurrencyQueueLimit: 3, Priority: pCritical}, g.handle)
		holder := goClass(h, classInv(pCritical, "holder"))
		synctest.Wait()
		ctx, cancel := context.WithCancel(context.Background())
		left := make(chan error, 1)
		go func() { _, err := h(ctx, classInv(pDefault, "leaves")); left <- err }()
		synctest.Wait()
		s := goClass(h, classInv(pSheddable, "s"))
		synctest.Wait()
		cancel()
		if err := <-left; pipelinetest.KindOf(err) != pipeline.KindCanceled {
			t.Fatalf("cancelled waiter = %v, want CANCELLED", err)
		}
		if st := l.State(); st.ConcurrencyQueue != 1 {
			t.Fatalf("ConcurrencyQueue = %d, want 1", st.ConcurrencyQueue)
		}
		close(g.release)
		for _, o := range []<-chan error{holder, s} {
			if err := <-o; err != nil {
				t.Fatal(err)
			}
		}
	})
}
