package stream_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience/stream"
)

// beatRaw is a fakeRaw whose heartbeats the stream's timer drives. Send
// and Heartbeat share a lock, as a transport's writer does.
type beatRaw struct {
	*fakeRaw
	wmu   sync.Mutex
	mu    sync.Mutex
	beats []time.Duration // when each heartbeat was read, from start
	start time.Time
}

func (r *beatRaw) Send(m any) error {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	return r.fakeRaw.Send(m)
}

func (r *beatRaw) Heartbeat() error {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	err := r.fakeRaw.Send(heartbeat{})
	if err == nil {
		r.mu.Lock()
		r.beats = append(r.beats, time.Since(r.start))
		r.mu.Unlock()
	}
	return err
}

func (r *beatRaw) got() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Duration(nil), r.beats...)
}

// TestHeartbeats: the stream's timer sends a heartbeat once nothing was
// sent for Heartbeat. Heartbeats never reset the idle clock, and a
// message sent puts the next heartbeat a period after it.
func TestHeartbeats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		caller, leave := context.WithCancel(t.Context())
		defer leave()
		raw := &beatRaw{fakeRaw: newFakeRaw(caller), start: time.Now()}
		defer close(raw.done)
		go raw.read()
		s := stream.Open(caller, raw, stream.Config{Kind: stream.Server, Heartbeat: time.Second, Idle: 3500 * ms})
		time.Sleep(1500 * ms)
		if err := s.Send(1); err != nil { // at 1.5 s: the next heartbeat is at 2.5 s
			t.Fatal(err)
		}
		err := waitEnd(s)
		res := s.Close(err)
		if res.Reason != stream.EndIdle || time.Since(raw.start) != 5*time.Second {
			t.Fatalf("ended %v after %v, want idle at 5s (the message at 1.5s plus 3.5s)", res.Reason, time.Since(raw.start))
		}
		want := []time.Duration{time.Second, 2500 * ms, 3500 * ms, 4500 * ms}
		if got := raw.got(); !slices.Equal(got, want) {
			t.Fatalf("heartbeats at %v, want %v", got, want)
		}
	})
}

// TestStalledHeartbeat: a heartbeat the caller does not read ends the
// stream at its start plus SendStall, as a blocked Send does, and Close
// waits for it to return.
func TestStalledHeartbeat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		caller, leave := context.WithCancel(t.Context())
		defer leave()
		raw := &beatRaw{fakeRaw: newFakeRaw(caller), start: time.Now()}
		defer close(raw.done)
		s := stream.Open(caller, raw, stream.Config{Kind: stream.Server, Heartbeat: time.Second, SendStall: 2 * time.Second})
		res := s.Close(waitEnd(s))
		if res.Reason != stream.EndSlowConsumer || time.Since(raw.start) != 3*time.Second {
			t.Fatalf("ended %v after %v, want slow_consumer at 3s", res.Reason, time.Since(raw.start))
		}
	})
}

// TestMaxAge: a stream open for MaxAge is drained: UNAVAILABLE,
// CodeDrained, with a retry-after of one second.
func TestMaxAge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		caller, leave := context.WithCancel(t.Context())
		defer leave()
		raw := newFakeRaw(caller)
		defer close(raw.done)
		go raw.read()
		start := time.Now()
		s := stream.Open(caller, raw, stream.Config{Kind: stream.Server, MaxAge: 5 * time.Second})
		res := s.Close(produce(300 * ms)(s))
		if res.Reason != stream.EndDrained || time.Since(start) != 5*time.Second {
			t.Fatalf("ended %v after %v, want drained at 5s", res.Reason, time.Since(start))
		}
		e := pipeline.AsError(res.Err)
		if d, ok := e.RetryAfter(); e.Code() != stream.CodeDrained || !ok || d != time.Second {
			t.Fatalf("outcome %v, retry-after %v", res.Err, d)
		}
	})
}

// TestIdleStreamTimerSleeps: the timer of an idle stream sleeps until its
// nearest clock, whatever SendStall is: 10,000 idle streams wake nothing.
// A Send that blocks brings the timer forward, and the stall ends the
// stream at the Send's start plus SendStall.
func TestIdleStreamTimerSleeps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		caller, leave := context.WithCancel(t.Context())
		defer leave()
		raw := newFakeRaw(caller)
		defer close(raw.done)
		s := stream.Open(caller, raw, stream.Config{Kind: stream.Server, SendStall: 30 * time.Second,
			Deadline: time.Now().Add(time.Hour)})
		for _, idle := range []time.Duration{0, 10 * time.Minute} {
			time.Sleep(idle)
			if at, ok := stream.Armed(s); !ok || at != time.Hour {
				t.Fatalf("after %v idle, the timer fires at %v (armed %v), want at the deadline, 1h", idle, at, ok)
			}
		}
		start := time.Now()
		err := s.Send(1) // nobody reads
		res := s.Close(err)
		if res.Reason != stream.EndSlowConsumer || time.Since(start) != 30*time.Second {
			t.Fatalf("ended %v after %v, want slow_consumer at 30s", res.Reason, time.Since(start))
		}
	})
}

// TestSendStallWithoutOtherClocks: with SendStall the only clock, the
// stream has no timer until a Send blocks; then the stall still ends it.
func TestSendStallWithoutOtherClocks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		caller, leave := context.WithCancel(t.Context())
		defer leave()
		raw := newFakeRaw(caller)
		defer close(raw.done)
		s := stream.Open(caller, raw, stream.Config{Kind: stream.Server, SendStall: 2 * time.Second})
		if at, ok := stream.Armed(s); ok {
			t.Fatalf("an idle stream's timer fires at %v, want none", at)
		}
		stop, stopped := make(chan struct{}), make(chan struct{})
		go func() { // the caller reads until stop
			defer close(stopped)
			for {
				select {
				case <-raw.out:
				case <-stop:
					return
				}
			}
		}()
		time.Sleep(time.Minute)
		if err := s.Send(1); err != nil { // read: the timer looks once, at 2 s
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		if at, ok := stream.Armed(s); ok {
			t.Fatalf("the timer fires at %v after the Send returned, want none", at)
		}
		close(stop)
		<-stopped
		start := time.Now()
		res := s.Close(s.Send(2))
		if res.Reason != stream.EndSlowConsumer || time.Since(start) != 2*time.Second {
			t.Fatalf("ended %v after %v, want slow_consumer at 2s", res.Reason, time.Since(start))
		}
	})
}
