package stream_test

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/resilience/stream"
)

// errReset is what fakeRaw returns once aborted or once its caller left:
// a transport's own error, which says nothing of why.
var errReset = errors.New("fake transport: stream reset")

type heartbeat struct{}

// fakeRaw is a transport stream over channels. out is unbuffered: a Send
// waits for the caller to read.
type fakeRaw struct {
	caller  context.Context // the caller's side: Send and Recv fail once it ends
	in      chan any        // the caller's messages; closed: io.EOF
	out     chan any        // what the caller reads
	aborted chan struct{}
	once    sync.Once
	done    chan struct{} // closed when the test ends: caller goroutines return

	mu       sync.Mutex
	cause    error // Abort's cause
	recvFail error // Recv returns it when set
}

func newFakeRaw(caller context.Context) *fakeRaw {
	return &fakeRaw{caller: caller, in: make(chan any, 1), out: make(chan any),
		aborted: make(chan struct{}), done: make(chan struct{})}
}

func (r *fakeRaw) Send(m any) error {
	select {
	case r.out <- m:
		return nil
	case <-r.aborted:
		return errReset
	case <-r.caller.Done():
		return errReset
	}
}

func (r *fakeRaw) Recv() (any, int, error) {
	r.mu.Lock()
	fail := r.recvFail
	r.mu.Unlock()
	if fail != nil {
		return nil, 0, fail
	}
	select {
	case m, ok := <-r.in:
		if !ok {
			return nil, 0, io.EOF
		}
		return m, 10, nil
	case <-r.aborted:
		return nil, 0, errReset
	case <-r.caller.Done():
		return nil, 0, errReset
	}
}

func (r *fakeRaw) Abort(cause error) {
	r.once.Do(func() {
		r.mu.Lock()
		r.cause = cause
		r.mu.Unlock()
		close(r.aborted)
	})
}

// send sends m as the caller, unless the test ended.
func (r *fakeRaw) send(m any) bool {
	select {
	case r.in <- m:
		return true
	case <-r.done:
		return false
	}
}

// read reads as the caller until the test ends.
func (r *fakeRaw) read() {
	for {
		select {
		case <-r.out:
		case <-r.done:
			return
		}
	}
}

// sleep sleeps d unless the test ends first.
func (r *fakeRaw) sleep(d time.Duration) bool {
	select {
	case <-time.After(d):
		return true
	case <-r.done:
		return false
	}
}

// heartbeats sends a heartbeat through the raw stream, as a transport
// does, every period, bypassing the Stream.
func (r *fakeRaw) heartbeats(period time.Duration) {
	for r.sleep(period) {
		select {
		case r.out <- heartbeat{}:
		case <-r.done:
			return
		}
	}
}

const ms = time.Millisecond

// produce sends a message every period until Send fails or the stream's
// context ends.
func produce(period time.Duration) func(*stream.Stream) error {
	return func(s *stream.Stream) error {
		for i := 0; ; i++ {
			if err := s.Send(i); err != nil {
				return err
			}
			select {
			case <-time.After(period):
			case <-s.Context().Done():
				return context.Cause(s.Context())
			}
		}
	}
}

// consume receives until Recv fails; io.EOF ends it with nil.
func consume(s *stream.Stream) error {
	for {
		if _, err := s.Recv(); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
	}
}

// waitEnd waits for the stream's context to end and returns its outcome
// as the handler would.
func waitEnd(s *stream.Stream) error {
	<-s.Context().Done()
	return context.Cause(s.Context())
}

type scenario struct {
	name    string
	cfg     stream.Config
	in      time.Duration // the deadline, from the open; 0: none
	handler func(*stream.Stream) error
	caller  func(r *fakeRaw, leave func())

	reason  stream.Reason
	code    string // "" for success
	verdict resilience.Verdict
	silent  string // CodeIdle's detail
	at      time.Duration
}

func TestScenarios(t *testing.T) {
	reader := func(r *fakeRaw, _ func()) { r.read() }
	tests := []scenario{{
		name: "deadline mid-stream is TIMEOUT at the deadline",
		cfg:  stream.Config{Kind: stream.Server, Idle: time.Second, DeadlineSource: pipeline.DeadlineOperation},
		in:   1000 * ms, handler: produce(30 * ms), caller: reader,
		reason: stream.EndDeadline, code: pipeline.CodeTimeout, verdict: resilience.Failure, at: 1000 * ms,
	}, {
		name: "the caller's deadline is neutral",
		cfg:  stream.Config{Kind: stream.Server, DeadlineSource: pipeline.DeadlineCaller},
		in:   700 * ms, handler: produce(30 * ms), caller: reader,
		reason: stream.EndDeadline, code: pipeline.CodeTimeout, verdict: resilience.Neutral, at: 700 * ms,
	}, {
		name: "server stream: heartbeats do not reset idle; the handler was silent",
		cfg:  stream.Config{Kind: stream.Server, Idle: 500 * ms},
		handler: func(s *stream.Stream) error {
			s.Send(1)
			time.Sleep(200 * ms)
			s.Send(2) // the last message, at 200 ms
			return waitEnd(s)
		},
		caller: func(r *fakeRaw, _ func()) {
			go r.heartbeats(100 * ms)
			r.read()
		},
		reason: stream.EndIdle, code: stream.CodeIdle, verdict: resilience.Failure, silent: "handler", at: 700 * ms,
	}, {
		name:    "client stream: the caller went silent, neutral",
		cfg:     stream.Config{Kind: stream.Client, Idle: 500 * ms},
		handler: consume,
		caller: func(r *fakeRaw, _ func()) {
			r.sleep(100 * ms)
			r.send(1) // the last message, at 100 ms
		},
		reason: stream.EndIdle, code: stream.CodeIdle, verdict: resilience.Neutral, silent: "caller", at: 600 * ms,
	}, {
		name: "client stream: after the caller's last message the handler is expected",
		cfg:  stream.Config{Kind: stream.Client, Idle: 500 * ms},
		handler: func(s *stream.Stream) error {
			if err := consume(s); err != nil {
				return err
			}
			return waitEnd(s) // never replies
		},
		caller: func(r *fakeRaw, _ func()) {
			r.send(1)
			r.sleep(100 * ms)
			close(r.in) // io.EOF at 100 ms; the last message was at 0
		},
		reason: stream.EndIdle, code: stream.CodeIdle, verdict: resilience.Failure, silent: "handler", at: 500 * ms,
	}, {
		name: "bidi: the caller spoke last, the handler did not answer",
		cfg:  stream.Config{Kind: stream.Bidi, Idle: 500 * ms},
		handler: func(s *stream.Stream) error {
			if _, err := s.Recv(); err != nil {
				return err
			}
			return waitEnd(s)
		},
		caller: func(r *fakeRaw, _ func()) {
			r.sleep(200 * ms)
			r.send(1)
		},
		reason: stream.EndIdle, code: stream.CodeIdle, verdict: resilience.Failure, silent: "handler", at: 700 * ms,
	}, {
		name: "bidi: the handler answered, the caller went silent",
		cfg:  stream.Config{Kind: stream.Bidi, Idle: 500 * ms},
		handler: func(s *stream.Stream) error {
			for {
				m, err := s.Recv()
				if err != nil {
					return err
				}
				time.Sleep(50 * ms)
				if err := s.Send(m); err != nil {
					return err
				}
			}
		},
		caller: func(r *fakeRaw, _ func()) {
			go r.read()
			r.sleep(200 * ms)
			r.send(1) // answered at 250 ms
		},
		reason: stream.EndIdle, code: stream.CodeIdle, verdict: resilience.Neutral, silent: "caller", at: 750 * ms,
	}, {
		name:    "bidi: nobody spoke, the caller is expected",
		cfg:     stream.Config{Kind: stream.Bidi, Idle: 400 * ms},
		handler: consume, caller: func(*fakeRaw, func()) {},
		reason: stream.EndIdle, code: stream.CodeIdle, verdict: resilience.Neutral, silent: "caller", at: 400 * ms,
	}, {
		name: "the caller leaves: the context ends, CANCELLED",
		cfg:  stream.Config{Kind: stream.Server, Idle: time.Second, SendStall: time.Second},
		in:   5 * time.Second, handler: waitEnd,
		caller: func(r *fakeRaw, leave func()) {
			r.sleep(300 * ms)
			leave()
		},
		reason: stream.EndCallerLeft, code: pipeline.CodeCanceled, verdict: resilience.Neutral, at: 300 * ms,
	}, {
		name:    "the caller leaves while the handler is in Recv",
		cfg:     stream.Config{Kind: stream.Client},
		handler: consume,
		caller: func(r *fakeRaw, leave func()) {
			r.sleep(300 * ms)
			leave()
		},
		reason: stream.EndCallerLeft, code: pipeline.CodeCanceled, verdict: resilience.Neutral, at: 300 * ms,
	}, {
		name: "a consumer that never reads: the send stall",
		cfg:  stream.Config{Kind: stream.Server, Idle: time.Second, SendStall: 200 * ms},
		handler: func(s *stream.Stream) error {
			time.Sleep(100 * ms)
			return produce(0)(s) // the first Send blocks from 100 ms
		},
		caller: func(*fakeRaw, func()) {},
		reason: stream.EndSlowConsumer, code: stream.CodeSendStall, verdict: resilience.Neutral, at: 300 * ms,
	}, {
		name:    "a consumer that stops reading: the send stall after the last read",
		cfg:     stream.Config{Kind: stream.Server, SendStall: 200 * ms},
		handler: produce(10 * ms),
		caller: func(r *fakeRaw, _ func()) {
			for range 5 {
				<-r.out
			}
		}, // reads 5 messages (the last at 40 ms); the 6th Send blocks from 50 ms
		reason: stream.EndSlowConsumer, code: stream.CodeSendStall, verdict: resilience.Neutral, at: 250 * ms,
	}, {
		name:    "idle before the send stall while a Send is blocked: the caller was silent",
		cfg:     stream.Config{Kind: stream.Server, Idle: 300 * ms, SendStall: time.Second},
		handler: produce(0),
		caller:  func(*fakeRaw, func()) {},
		reason:  stream.EndIdle, code: stream.CodeIdle, verdict: resilience.Neutral, silent: "caller", at: 300 * ms,
	}, {
		name:    "MaxMessages ends the stream at the next message",
		cfg:     stream.Config{Kind: stream.Client, MaxMessages: 3},
		handler: consume,
		caller: func(r *fakeRaw, _ func()) {
			for i := 0; r.sleep(10*ms) && r.send(i); i++ {
			}
		},
		reason: stream.EndLimit, code: stream.CodeTooManyMessages, verdict: resilience.Neutral, at: 40 * ms,
	}, {
		name:    "MaxBytes ends the stream at the message past it",
		cfg:     stream.Config{Kind: stream.Client, MaxBytes: 25}, // 10 bytes a message
		handler: consume,
		caller: func(r *fakeRaw, _ func()) {
			for i := 0; r.sleep(10*ms) && r.send(i); i++ {
			}
		},
		reason: stream.EndLimit, code: stream.CodeTooManyBytes, verdict: resilience.Neutral, at: 30 * ms,
	}, {
		name:    "a transport's error is not the caller's cancel",
		cfg:     stream.Config{Kind: stream.Client},
		handler: consume,
		caller: func(r *fakeRaw, _ func()) {
			r.mu.Lock()
			r.recvFail = context.Canceled // what a transport's read timeout may say
			r.mu.Unlock()
			r.sleep(100 * ms)
			r.send(1) // wakes the blocked Recv, which fails on the next call
		},
		reason: stream.EndTransport, code: stream.CodeTransport, verdict: resilience.Neutral, at: 100 * ms,
	}, {
		name: "the handler completes",
		cfg:  stream.Config{Kind: stream.Server, Idle: time.Second, SendStall: time.Second},
		in:   time.Minute,
		handler: func(s *stream.Stream) error {
			for i := range 3 {
				time.Sleep(100 * ms)
				if err := s.Send(i); err != nil {
					return err
				}
			}
			return nil
		},
		caller: reader,
		reason: stream.EndCompleted, verdict: resilience.Neutral, at: 300 * ms,
	}, {
		name: "messages keep the idle clock from firing",
		cfg:  stream.Config{Kind: stream.Server, Idle: 500 * ms},
		handler: func(s *stream.Stream) error {
			for range 10 {
				time.Sleep(300 * ms)
				if err := s.Send(1); err != nil {
					return err
				}
			}
			return waitEnd(s) // the last at 3 s
		},
		caller: reader,
		reason: stream.EndIdle, code: stream.CodeIdle, verdict: resilience.Failure, silent: "handler", at: 3500 * ms,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { runScenario(t, tt) })
	}
}

func runScenario(t *testing.T, tt scenario) {
	synctest.Test(t, func(t *testing.T) {
		parent, leave := context.WithCancel(context.Background())
		defer leave()
		raw := newFakeRaw(parent)
		start := time.Now()
		cfg := tt.cfg
		if tt.in > 0 {
			cfg.Deadline = start.Add(tt.in)
		}
		s := stream.Open(parent, raw, cfg)
		var ctxEnd time.Duration
		context.AfterFunc(s.Context(), func() { ctxEnd = time.Since(start) })
		var wg sync.WaitGroup
		wg.Go(func() { tt.caller(raw, leave) })
		res := s.Close(tt.handler(s))
		at := time.Since(start)
		close(raw.done)
		wg.Wait()
		synctest.Wait()

		if res.Reason != tt.reason || pipelinetest.CodeOf(res.Err) != tt.code || res.Verdict != tt.verdict || at != tt.at {
			t.Fatalf("ended %v %v (verdict %v) at %v, want %v %q (verdict %v) at %v",
				res.Reason, res.Err, res.Verdict, at, tt.reason, tt.code, tt.verdict, tt.at)
		}
		if tt.reason != stream.EndCompleted && ctxEnd != tt.at {
			t.Fatalf("the stream's context ended at %v, want %v", ctxEnd, tt.at)
		}
		if e := pipeline.AsError(res.Err); tt.silent != "" {
			if v := e.Details()[stream.DetailSilent]; v != tt.silent {
				t.Fatalf("silent = %v, want %s", v, tt.silent)
			}
		}
		if s.Context().Err() == nil {
			t.Fatal("the stream's context did not end")
		}
		if s.Reason() != tt.reason {
			t.Fatalf("Reason() = %v, want %v", s.Reason(), tt.reason)
		}
		// What the caller sees over the transport is the stream's outcome.
		raw.mu.Lock()
		cause := raw.cause
		raw.mu.Unlock()
		if tt.reason != stream.EndCompleted && tt.reason != stream.EndCallerLeft && pipelinetest.CodeOf(cause) != tt.code {
			t.Fatalf("Abort's cause %v, want %s", cause, tt.code)
		}
	})
}

var errHandler = errors.New("handler: gave up")

func errorsIs(err, target error) bool { return errors.Is(err, target) }

// TestRawRefusesMessage: a *pipeline.Error from Raw.Recv, a message the
// transport could not decode, ends the stream as that outcome (EndLimit),
// never as a transport failure.
func TestRawRefusesMessage(t *testing.T) {
	raw := newFakeRaw(context.Background())
	defer close(raw.done)
	bad := pipeline.NewError(pipeline.KindValidation, "TEST_VALIDATION_001", "not JSON")
	raw.recvFail = bad
	s := stream.Open(context.Background(), raw, stream.Config{Kind: stream.Client})
	if _, err := s.Recv(); err != bad {
		t.Fatalf("Recv = %v, want the transport's refusal %v", err, bad)
	}
	r := s.Close(nil)
	if r.Reason != stream.EndLimit || r.Err != bad {
		t.Fatalf("Close = %v, %v; want limit, the refusal", r.Reason, r.Err)
	}
}

// slowAbortRaw is a fakeRaw whose Abort waits for release: the clock that
// ended the stream is then still aborting it when the handler returns.
type slowAbortRaw struct {
	*fakeRaw
	release chan struct{}
}

func (r *slowAbortRaw) Abort(cause error) {
	<-r.release
	r.fakeRaw.Abort(cause)
}

// TestCloseWaitsForTheAbort: a clock ends the stream's context before it
// aborts the transport. A handler that returns in between must not see
// Close return until the abort is done: the adapter writes the outcome
// after Close, and an abort that came later failed that write (the
// caller then got the messages but no outcome).
func TestCloseWaitsForTheAbort(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		raw := &slowAbortRaw{newFakeRaw(context.Background()), make(chan struct{})}
		defer close(raw.done)
		release := sync.OnceFunc(func() { close(raw.release) })
		defer release()
		s := stream.Open(context.Background(), raw, stream.Config{Kind: stream.Server, Idle: time.Second})
		closed := make(chan stream.Result, 1)
		go func() {
			<-s.Context().Done() // the handler: returns once the stream ended
			closed <- s.Close(context.Cause(s.Context()))
		}()
		time.Sleep(time.Second)
		synctest.Wait()
		select {
		case r := <-closed:
			t.Fatalf("Close returned %+v while the transport was being aborted", r)
		default:
		}
		release()
		if r := <-closed; r.Reason != stream.EndIdle {
			t.Fatalf("ended %v, want idle", r.Reason)
		}
	})
}
