package deadlinectx

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// TestLazyContextSettle: a lazy context settled before its deadline (its
// chain returned) stays live until end without reading the clock again,
// still follows its parent, and ends canceled; one settled after its
// deadline, or never settled, reports the deadline.
func TestLazyContextSettle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		parent, cancel := context.WithCancel(t.Context())
		defer cancel()
		settled := &Lazy{parent: parent, deadline: time.Now().Add(time.Second)}
		settled.Settle()
		followsParent := &Lazy{parent: parent, deadline: time.Now().Add(time.Minute)}
		followsParent.Settle()
		late := &Lazy{parent: parent, deadline: time.Now().Add(time.Second)}
		time.Sleep(2 * time.Second)
		if err := settled.Err(); err != nil {
			t.Errorf("settled, then past its deadline: Err() = %v, want nil (judged at settle)", err)
		}
		if err := late.Err(); err != context.DeadlineExceeded {
			t.Errorf("never settled, past its deadline: Err() = %v, want DeadlineExceeded", err)
		}
		late.Settle()
		if err := late.Err(); err != context.DeadlineExceeded {
			t.Errorf("settled past its deadline: Err() = %v, want DeadlineExceeded", err)
		}
		cancel()
		if err := followsParent.Err(); err != context.Canceled {
			t.Errorf("settled, parent canceled before the deadline: Err() = %v, want Canceled", err)
		}
		ended := &Lazy{parent: t.Context(), deadline: time.Now().Add(time.Second)}
		ended.Settle()
		ended.End()
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
		c := &Lazy{parent: t.Context(), deadline: time.Now().Add(time.Second)}
		c.Settle()
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
		c.End()
		<-done
		if err := c.Err(); err != context.Canceled {
			t.Errorf("Err() after end = %v, want Canceled", err)
		}
	})
}
