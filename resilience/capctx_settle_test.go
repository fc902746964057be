package resilience

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/pipeline"
)

// TestLazyContextSettle: a lazy context settled before its deadline (its
// chain returned) stays live until end without reading the clock again,
// still follows its parent, and ends canceled; one settled after its
// deadline, or never settled, reports the deadline.
func TestLazyContextSettle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		parent, cancel := context.WithCancel(t.Context())
		defer cancel()
		settled := &lazyContext{parent: parent, deadline: time.Now().Add(time.Second)}
		settled.settle()
		followsParent := &lazyContext{parent: parent, deadline: time.Now().Add(time.Minute)}
		followsParent.settle()
		late := &lazyContext{parent: parent, deadline: time.Now().Add(time.Second)}
		time.Sleep(2 * time.Second)
		if err := settled.Err(); err != nil {
			t.Errorf("settled, then past its deadline: Err() = %v, want nil (judged at settle)", err)
		}
		if err := late.Err(); err != context.DeadlineExceeded {
			t.Errorf("never settled, past its deadline: Err() = %v, want DeadlineExceeded", err)
		}
		late.settle()
		if err := late.Err(); err != context.DeadlineExceeded {
			t.Errorf("settled past its deadline: Err() = %v, want DeadlineExceeded", err)
		}
		cancel()
		if err := followsParent.Err(); err != context.Canceled {
			t.Errorf("settled, parent canceled before the deadline: Err() = %v, want Canceled", err)
		}
		ended := &lazyContext{parent: t.Context(), deadline: time.Now().Add(time.Second)}
		ended.settle()
		ended.end()
		if err := ended.Err(); err != context.Canceled {
			t.Errorf("settled, then ended: Err() = %v, want Canceled", err)
		}
		if v := ended.Value(struct{}{}); v != nil {
			t.Errorf("Value of a missing key = %v, want nil", v)
		}
	})
}

// TestLazyContextSettledStaysLive: a settled context is live until end
// even past its deadline, whoever looks — Err, and Done for a goroutine
// the handler left behind — and then ends canceled.
func TestLazyContextSettledStaysLive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &lazyContext{parent: t.Context(), deadline: time.Now().Add(time.Second)}
		c.settle()
		time.Sleep(2 * time.Second)
		done := c.Done()
		select {
		case <-done:
			t.Fatal("Done() closed after settle, before end")
		default:
		}
		if err := c.Err(); err != nil {
			t.Errorf("Err() after Done, before end = %v, want nil", err)
		}
		c.end()
		<-done
		if err := c.Err(); err != context.Canceled {
			t.Errorf("Err() after end = %v, want Canceled", err)
		}
	})
}

// TestInnerInvocationLeavesOuterContextAlone: a middleware invoked from
// inside a handler, for an invocation without a deadline, does not settle
// the outer invocation's context: the outer handler still sees its
// deadline pass.
func TestInnerInvocationLeavesOuterContextAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inner := NewDeadlineMiddleware(WithLimits(NewLimits("inner", Policy{FailureThreshold: 5, BreakDuration: time.Second})))
		_, err := NewDeadlineMiddleware().Invoke(t.Context(), pipeline.NewInvocation(pipeline.Spec{
			Deadline: time.Now().Add(time.Second), DeadlineSource: pipeline.DeadlineKernel,
		}), func(ctx context.Context, _ *pipeline.Invocation) (any, error) {
			if _, err := inner.Invoke(ctx, pipeline.NewInvocation(pipeline.Spec{}), func(context.Context, *pipeline.Invocation) (any, error) {
				return nil, nil
			}); err != nil {
				t.Fatalf("inner Invoke = %v", err)
			}
			time.Sleep(2 * time.Second)
			if err := ctx.Err(); err != context.DeadlineExceeded {
				t.Errorf("outer ctx.Err() past its deadline = %v, want DeadlineExceeded", err)
			}
			return nil, ctx.Err()
		})
		if pipeline.CodeOf(err) != pipeline.CodeTimeout {
			t.Errorf("outer Invoke = %v, want TIMEOUT", err)
		}
	})
}
