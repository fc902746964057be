package stream_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/resilience/stream"
)

// flood sends as the caller as fast as the stream takes messages.
func flood(r *fakeRaw) {
	for i := 0; r.send(i); i++ {
	}
}

// TestMessagesPerSecondPacesRecv: at 100 messages a second, Recv returns
// the k-th message at exactly k × 10 ms, so 100 in the first second.
func TestMessagesPerSecondPacesRecv(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		raw := newFakeRaw(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { flood(raw) })
		start := time.Now()
		s := stream.Open(context.Background(), raw, stream.Config{Kind: stream.Client, MessagesPerSecond: 100})
		n := 0
		for {
			if _, err := s.Recv(); err != nil {
				t.Fatal(err)
			}
			at := time.Since(start)
			if at >= time.Second {
				break
			}
			if want := time.Duration(n) * 10 * ms; at != want {
				t.Fatalf("message %d at %v, want %v", n, at, want)
			}
			n++
		}
		res := s.Close(nil)
		close(raw.done)
		wg.Wait()
		if n != 100 || res.Reason != stream.EndCompleted || res.Received != 101 {
			t.Fatalf("%d messages in the first second, %+v; want 100, completed, 101 received", n, res)
		}
	})
}

// TestPacedRecvEndsWithTheStream: a Recv waiting for its turn returns the
// stream's outcome when the caller leaves.
func TestPacedRecvEndsWithTheStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		parent, leave := context.WithCancel(context.Background())
		raw := newFakeRaw(parent)
		var wg sync.WaitGroup
		wg.Go(func() { flood(raw) })
		s := stream.Open(parent, raw, stream.Config{Kind: stream.Client, MessagesPerSecond: 1})
		if _, err := s.Recv(); err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(300*ms, leave)
		start := time.Now()
		_, err := s.Recv() // its turn is at 1 s
		if pipelinetest.CodeOf(err) != pipeline.CodeCanceled || time.Since(start) != 300*ms {
			t.Fatalf("Recv = %v after %v, want CANCELLED after 300ms", err, time.Since(start))
		}
		s.Close(err)
		close(raw.done)
		wg.Wait()
	})
}

// TestHardRateEndsTheStream: under HardRate the caller may send one
// second's messages ahead of the rate; the next ends the stream with
// UNAVAILABLE and a retry-after.
func TestHardRateEndsTheStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		raw := newFakeRaw(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { flood(raw) })
		s := stream.Open(context.Background(), raw, stream.Config{Kind: stream.Client, MessagesPerSecond: 100, HardRate: true})
		n := 0
		var err error
		for ; err == nil; n++ {
			_, err = s.Recv()
		}
		res := s.Close(err)
		close(raw.done)
		wg.Wait()
		e := pipeline.AsError(res.Err)
		retry, ok := e.RetryAfter()
		if n != 101 || res.Reason != stream.EndLimit || e.Kind() != pipeline.KindUnavailable ||
			e.Code() != stream.CodeRate || !ok || retry != 10*ms || res.Verdict != resilience.Neutral {
			t.Fatalf("after %d Recv calls: %+v (retry-after %v); want the 101st to end it, %s, retry-after 10ms",
				n, res, retry, stream.CodeRate)
		}
	})
}

// TestDrain: Drain ends an open stream with UNAVAILABLE and its
// retry-after; the handler's context ends and its blocked Send returns.
func TestDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		raw := newFakeRaw(context.Background())
		s := stream.Open(context.Background(), raw, stream.Config{Kind: stream.Server})
		time.AfterFunc(250*ms, func() { s.Drain(3 * time.Second) })
		start := time.Now()
		err := s.Send(1) // nobody reads
		res := s.Close(err)
		close(raw.done)
		e := pipeline.AsError(res.Err)
		retry, _ := e.RetryAfter()
		if time.Since(start) != 250*ms || res.Reason != stream.EndDrained || e.Code() != stream.CodeDrained ||
			e.Kind() != pipeline.KindUnavailable || retry != 3*time.Second || s.Context().Err() == nil {
			t.Fatalf("after %v: %+v (retry-after %v), want drained at 250ms with retry-after 3s", time.Since(start), res, retry)
		}
	})
}

// TestFirstEndDecides: a drain after the idle timeout changes nothing;
// the handler's own error becomes the outcome's cause.
func TestFirstEndDecides(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		raw := newFakeRaw(context.Background())
		s := stream.Open(context.Background(), raw, stream.Config{Kind: stream.Server, Idle: 100 * ms})
		<-s.Context().Done()
		s.Drain(time.Second)
		own := context.Cause(s.Context())
		res := s.Close(errHandler)
		close(raw.done)
		if res.Reason != stream.EndIdle || pipelinetest.CodeOf(res.Err) != stream.CodeIdle ||
			pipelinetest.CodeOf(own) != stream.CodeIdle || !errorsIs(res.Err, errHandler) {
			t.Fatalf("%+v (context cause %v), want idle wrapping the handler's error", res, own)
		}
		if again := s.Close(nil); again.Reason != res.Reason || pipelinetest.CodeOf(again.Err) != stream.CodeIdle {
			t.Fatalf("Close again = %+v", again)
		}
	})
}

// TestDeadlinePassedOnOpen: a stream whose deadline has passed ends on
// open, before the handler sends anything.
func TestDeadlinePassedOnOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		raw := newFakeRaw(context.Background())
		s := stream.Open(context.Background(), raw, stream.Config{Deadline: time.Now(), DeadlineSource: pipeline.DeadlineCaller})
		err := s.Send(1)
		res := s.Close(err)
		close(raw.done)
		if pipelinetest.CodeOf(err) != pipeline.CodeTimeout || res.Reason != stream.EndDeadline || res.Sent != 0 {
			t.Fatalf("Send = %v, %+v; want TIMEOUT and nothing sent", err, res)
		}
	})
}

// TestReasonNames: every reason has the name logs and metrics use.
func TestReasonNames(t *testing.T) {
	want := []string{"none", "completed", "deadline", "idle", "slow_consumer", "caller_left", "drained", "limit", "transport", "unknown"}
	for i, w := range want {
		if got := stream.Reason(i).String(); got != w {
			t.Errorf("Reason(%d) = %q, want %q", i, got, w)
		}
	}
}

// TestConcurrentEnds: a bidi stream's Send and Recv run on two goroutines
// while a drain, the caller and the idle timer race to end it. Exactly one
// end decides, both sides return it, and nothing races (run with -race).
func TestConcurrentEnds(t *testing.T) {
	for i := range 50 {
		parent, leave := context.WithCancel(context.Background())
		raw := newFakeRaw(parent)
		s := stream.Open(parent, raw, stream.Config{Kind: stream.Bidi, Idle: time.Duration(i%5) * time.Microsecond,
			SendStall: time.Duration(i%3) * time.Microsecond, MessagesPerSecond: 1e6})
		var wg sync.WaitGroup
		wg.Go(func() { raw.read() })
		wg.Go(func() { flood(raw) })
		errs := make(chan error, 2)
		wg.Go(func() { errs <- produce(0)(s) })
		wg.Go(func() { errs <- consume(s) })
		switch i % 3 {
		case 0:
			s.Drain(time.Second)
		case 1:
			leave()
		default: // the clocks may end it first
			time.Sleep(time.Duration(i) * time.Microsecond)
			s.Drain(time.Second)
		}
		e1, e2 := <-errs, <-errs
		res := s.Close(e1)
		close(raw.done)
		wg.Wait()
		leave()
		want := pipelinetest.CodeOf(res.Err)
		for _, e := range []error{e1, e2} {
			if pipelinetest.CodeOf(e) != want {
				t.Fatalf("run %d: a side returned %v, the stream ended %v (%v)", i, e, res.Err, res.Reason)
			}
		}
		if res.Reason == stream.EndNone || res.Reason == stream.EndCompleted {
			t.Fatalf("run %d: reason %v", i, res.Reason)
		}
	}
}
