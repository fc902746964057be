package kernel

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience/deadline"
)

// newTestGuard returns an armed guard under parent for an invocation with
// the deadline d (zero: none).
func newTestGuard(t *testing.T, parent context.Context, d time.Time) *guard {
	t.Helper()
	g := &guard{
		e: edge{ctx: parent, inv: pipeline.NewInvocation(pipeline.Spec{Deadline: d, DeadlineSource: pipeline.DeadlineOperation}),
			strag: new(atomic.Int64)},
		respond:    func(Outcome) {},
		stragglers: new(atomic.Int64),
	}
	if !g.arm() {
		t.Fatal("arm() = false, want a guard that can end")
	}
	return g
}

// TestGuardIsAContext: the guard ends at its deadline with
// DeadlineExceeded, and contexts derived from it end with it — through
// its AfterFunc, not a goroutine of the context package's — and report
// the deadline it carries.
func TestGuardIsAContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		g := newTestGuard(t, t.Context(), start.Add(time.Second))
		if d, ok := g.Deadline(); !ok || !d.Equal(start.Add(time.Second)) {
			t.Errorf("Deadline() = %v, %v; want start+1s", d, ok)
		}
		child, cancel := context.WithCancel(g)
		defer cancel()
		if g.Err() != nil || child.Err() != nil {
			t.Fatal("ended before the deadline")
		}
		g.mu.Lock()
		registered := len(g.funcs)
		g.mu.Unlock()
		if registered != 1 {
			t.Errorf("%d functions registered by context.WithCancel, want 1 (through AfterFunc)", registered)
		}
		<-child.Done()
		if el := time.Since(start); el != time.Second {
			t.Errorf("child ended after %v, want 1s", el)
		}
		if g.Err() != context.DeadlineExceeded || child.Err() != context.DeadlineExceeded || !errors.Is(context.Cause(child), context.DeadlineExceeded) {
			t.Errorf("guard %v, child %v (cause %v); want DeadlineExceeded for both", g.Err(), child.Err(), context.Cause(child))
		}
		if got := pipelinetest.CodeOf(deadline.Attribute(child)); got != pipeline.CodeTimeout {
			t.Errorf("Attribute(child) = %s, want %s", got, pipeline.CodeTimeout)
		}
		// Derived after the end: ended at once.
		late, cancel2 := context.WithCancel(g)
		defer cancel2()
		if late.Err() == nil {
			t.Error("context derived from an ended guard is live")
		}
		select {
		case <-g.Done():
		default:
			t.Error("Done() of an ended guard is not closed")
		}
		if got := g.cancel(context.Canceled); got {
			t.Error("cancel after the end reported ending it again")
		}
	})
}

// TestGuardFollowsItsParent: a parent that ends first ends the guard with
// the parent's error, and its cause stays readable through the guard.
func TestGuardFollowsItsParent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		parent, cancel := context.WithCancelCause(t.Context())
		g := newTestGuard(t, parent, time.Now().Add(time.Hour))
		why := errors.New("client went away")
		time.AfterFunc(time.Second, func() { cancel(why) })
		<-g.Done()
		if g.Err() != context.Canceled || context.Cause(g) != why {
			t.Errorf("guard Err %v, Cause %v; want Canceled, %v", g.Err(), context.Cause(g), why)
		}
		if got := pipelinetest.CodeOf(deadline.Attribute(g)); got != pipeline.CodeCanceled {
			t.Errorf("attributed %s, want %s", got, pipeline.CodeCanceled)
		}
	})
}

// TestGuardAfterFuncStop: a function stopped before the end never runs;
// one registered after the end runs at once.
func TestGuardAfterFuncStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newTestGuard(t, t.Context(), time.Now().Add(time.Second))
		var ran atomic.Int32
		stop := g.AfterFunc(func() { ran.Add(1) })
		if !stop() || stop() {
			t.Error("stop() = false the first time or true the second")
		}
		g.AfterFunc(func() { ran.Add(10) })
		time.Sleep(2 * time.Second)
		synctest.Wait()
		g.AfterFunc(func() { ran.Add(100) })
		synctest.Wait()
		if got := ran.Load(); got != 110 {
			t.Errorf("ran = %d, want 110 (the stopped function never ran)", got)
		}
	})
}
