package grpcadapter

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestReceiverServesTheNextCallAndExitsWhenIdle: with the bound on, a
// request message is read on a receiver goroutine, which then waits for
// the next message to read and exits once it has waited receiverIdle.
func TestReceiverServesTheNextCallAndExitsWhenIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := &Adapter{cfg: defaultConfig(), receivers: make(chan *reception)}
		reads := 0
		dec := func(any) error { reads++; return nil }
		if err := a.receive(dec, nil); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the receiver is back waiting for a message
		probe := &reception{dec: dec, done: make(chan error, 1)}
		select {
		case a.receivers <- probe: // the idle receiver takes the next message
		default:
			t.Fatal("no receiver waits for the next message after a call")
		}
		if err := <-probe.done; err != nil || reads != 2 {
			t.Fatalf("the idle receiver read: err %v, %d reads, want nil and 2", err, reads)
		}
		time.Sleep(receiverIdle - time.Nanosecond)
		synctest.Wait()
		select {
		case a.receivers <- probe:
			<-probe.done
		default:
			t.Fatalf("the receiver left before it was idle for %v", receiverIdle)
		}
		time.Sleep(receiverIdle)
		synctest.Wait() // the receiver has exited: the bubble holds no goroutine
		select {
		case a.receivers <- probe:
			t.Fatalf("a receiver still waits after %v idle", receiverIdle)
		default:
		}
	})
}
