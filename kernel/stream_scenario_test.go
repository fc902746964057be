package kernel_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/pipeline"
)

const ms = time.Millisecond

// beatRaw is a chanRaw with heartbeats, serialised with Send.
type beatRaw struct {
	*chanRaw
	wmu sync.Mutex
}

func (r *beatRaw) Send(m any) error {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	return r.chanRaw.Send(m)
}

func (r *beatRaw) Heartbeat() error {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	if err := r.chanRaw.Send("heartbeat"); err != nil {
		return err
	}
	r.mu.Lock()
	r.beats++
	r.mu.Unlock()
	return nil
}

// feed sends n messages as the caller, as fast as Recv takes them, then
// its last.
func feed(r *chanRaw, n int) {
	go func() {
		for range n {
			select {
			case r.in <- &Line{SKU: "a"}:
			case <-r.aborted:
				return
			}
		}
		close(r.in)
	}()
}

// streamCase is one row of TestStreamScenarios.
type streamCase struct {
	name    string
	section string // the operation's keys
	op      string
	watch   func(ctx context.Context) error // orders.watch's handler after its messages
	caller  func(r *chanRaw, leave context.CancelFunc)
	heart   bool // the transport sends heartbeats
	kind    pipeline.Kind
	code    string // "" for success
	at      time.Duration
	check   func(t *testing.T, r *chanRaw, out kernel.Outcome)
}

// TestStreamScenarios runs each row under testing/synctest through
// Op.Stream, with the configuration keys of the Stream object, and
// asserts the outcome and the exact virtual instant Stream returns.
func TestStreamScenarios(t *testing.T) {
	waitEnd := func(ctx context.Context) error { <-ctx.Done(); return context.Cause(ctx) }
	read := func(r *chanRaw, _ context.CancelFunc) { r.collect() }
	tests := []streamCase{{
		name: "deadline mid-stream is TIMEOUT at the deadline", op: "orders.watch",
		section: `{"TimeoutSeconds":1.5,"Stream":{"IdleSeconds":10}}`, watch: waitEnd, caller: read,
		kind: pipeline.KindTimeout, code: "KERNEL_TIMEOUT_001", at: 1500 * ms,
	}, {
		name: "idle fires at the last message plus IdleSeconds; heartbeats do not reset it", op: "orders.watch",
		section: `{"Stream":{"IdleSeconds":2,"HeartbeatSeconds":0.5}}`, watch: waitEnd, caller: read, heart: true,
		kind: pipeline.KindTimeout, code: "KERNEL_TIMEOUT_003", at: 2 * time.Second,
		check: func(t *testing.T, r *chanRaw, _ kernel.Outcome) {
			if r.beats != 3 { // at 0.5, 1 and 1.5 s; the one due at 2 s finds the stream ended
				t.Errorf("%d heartbeats, want 3", r.beats)
			}
		},
	}, {
		name: "the caller leaving ends the handler's context: CANCELLED", op: "orders.watch",
		section: `{}`, watch: waitEnd,
		caller: func(r *chanRaw, leave context.CancelFunc) {
			r.collect()
			time.AfterFunc(700*ms, leave)
		},
		kind: pipeline.KindCanceled, code: "KERNEL_CANCELLED_001", at: 700 * ms,
	}, {
		name: "a consumer that never reads ends at the send stall", op: "orders.watch",
		section: `{"Stream":{"SendStallSeconds":3}}`, caller: func(*chanRaw, context.CancelFunc) {},
		kind: pipeline.KindCanceled, code: "KERNEL_CANCELLED_002", at: 3 * time.Second,
	}, {
		name: "MessagesPerSecond 100 paces the caller: 100 messages a second", op: "orders.import",
		section: `{"Stream":{"MessagesPerSecond":100}}`,
		caller:  func(r *chanRaw, _ context.CancelFunc) { feed(r, 100) },
		at:      time.Second, // the k-th Recv returns at (k-1) × 10 ms; the 101st, io.EOF, at 1 s
		check: func(t *testing.T, _ *chanRaw, out kernel.Outcome) {
			if out.Output != (Done{Lines: 100}) {
				t.Errorf("output %v, want 100 lines", out.Output)
			}
		},
	}, {
		name: "HardRate ends a caller a second ahead of the rate", op: "orders.import",
		section: `{"Stream":{"MessagesPerSecond":10,"HardRate":true}}`,
		caller:  func(r *chanRaw, _ context.CancelFunc) { feed(r, 50) },
		kind:    pipeline.KindUnavailable, code: "KERNEL_UNAVAILABLE_011",
	}, {
		name: "MaxMessages bounds the caller's messages", op: "orders.import",
		section: `{"Stream":{"MaxMessages":3}}`,
		caller:  func(r *chanRaw, _ context.CancelFunc) { feed(r, 4) },
		kind:    pipeline.KindValidation, code: "KERNEL_VALIDATION_010",
	}, {
		name: "MaxStreamBytes bounds the caller's bytes", op: "orders.import",
		section: `{"Stream":{"MaxStreamBytes":25}}`, // chanRaw counts 10 bytes a message
		caller:  func(r *chanRaw, _ context.CancelFunc) { feed(r, 3) },
		kind:    pipeline.KindValidation, code: "KERNEL_VALIDATION_011",
	}, {
		name: "the maximum age drains the stream with a retry-after", op: "orders.watch",
		section: `{"Stream":{"MaxAgeSeconds":4,"MaxAgeJitter":0}}`, watch: waitEnd, caller: read,
		kind: pipeline.KindUnavailable, code: "KERNEL_UNAVAILABLE_012", at: 4 * time.Second,
		check: func(t *testing.T, _ *chanRaw, out kernel.Outcome) {
			if d, ok := out.Err.(*pipeline.Error).RetryAfter(); !ok || d != time.Second {
				t.Errorf("retry-after %v, %v; want 1s", d, ok)
			}
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				reg := streamRegistry(t, 1, tt.watch)
				k := streamKernel(t, reg, `{"Operations":{"`+tt.op+`":`+tt.section+`}}`)
				caller, leave := context.WithCancel(t.Context())
				defer leave()
				raw := newChanRaw(caller)
				var tr any = raw
				if tt.heart {
					tr = &beatRaw{chanRaw: raw}
				}
				tt.caller(raw, leave)
				start := time.Now()
				call := kernel.StreamCall{Raw: tr.(interface {
					Send(any) error
					Recv() (any, int, error)
					Abort(error)
				})}
				if tt.op == "orders.watch" {
					call.Input = &Watch{}
				}
				out := k.Op(tt.op).Stream(caller, call)
				took := time.Since(start)
				if tt.code == "" {
					if out.Err != nil {
						t.Fatalf("outcome %v", out.Err)
					}
				} else {
					assertErr(t, out.Err, tt.kind, tt.code)
				}
				if tt.at > 0 && took != tt.at {
					t.Errorf("Stream returned after %v, want %v", took, tt.at)
				}
				if tt.check != nil {
					raw.mu.Lock()
					tt.check(t, raw, out)
					raw.mu.Unlock()
				}
				leave()
				synctest.Wait()
			})
		})
	}
}

// TestMaxStreams: an operation's MaxStreams pool is held for a stream's
// life. The stream past it is refused with KERNEL_UNAVAILABLE_003 before
// anything runs; a stream that ends gives its slot back.
func TestMaxStreams(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ran := 0
		var mu sync.Mutex
		reg := streamRegistry(t, 0, func(ctx context.Context) error {
			mu.Lock()
			ran++
			mu.Unlock()
			<-ctx.Done()
			return context.Cause(ctx)
		})
		k := streamKernel(t, reg, `{"ConcurrencyLimit":1,"Operations":{"orders.watch":{"Stream":{"MaxStreams":2}}}}`)
		op := k.Op("orders.watch")
		ctxs := make([]context.CancelFunc, 2)
		outs := make(chan kernel.Outcome, 2)
		for i := range ctxs {
			ctx, leave := context.WithCancel(t.Context())
			ctxs[i] = leave
			go func() { outs <- op.Stream(ctx, kernel.StreamCall{Input: &Watch{}, Raw: newChanRaw(ctx)}) }()
		}
		synctest.Wait()
		out := op.Stream(t.Context(), kernel.StreamCall{Input: &Watch{}, Raw: newChanRaw(t.Context())})
		assertErr(t, out.Err, pipeline.KindUnavailable, "KERNEL_UNAVAILABLE_003")
		if ran != 2 {
			t.Fatalf("%d handlers ran, want 2", ran)
		}
		for _, st := range k.Status().Operations {
			if st.ID == "orders.watch" && (st.Streams != 2 || st.MaxStreams != 2) {
				t.Fatalf("status: %d streams of %d, want 2 of 2", st.Streams, st.MaxStreams)
			}
		}
		ctxs[0]()
		assertErr(t, (<-outs).Err, pipeline.KindCanceled, "KERNEL_CANCELLED_001")
		ctx, leave := context.WithCancel(t.Context())
		go func() { outs <- op.Stream(ctx, kernel.StreamCall{Input: &Watch{}, Raw: newChanRaw(ctx)}) }()
		synctest.Wait()
		if ran != 3 {
			t.Fatalf("%d handlers ran, want 3: the slot was not given back", ran)
		}
		leave()
		ctxs[1]()
		<-outs
		<-outs
	})
}

// TestDrainStreams: DrainStreams gives every open stream its outcome at
// once: UNAVAILABLE, KERNEL_UNAVAILABLE_012, with a retry-after. A stream
// opened after it is refused with the same outcome, and nothing runs.
func TestDrainStreams(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ran := 0
		var mu sync.Mutex
		reg := streamRegistry(t, 0, func(ctx context.Context) error {
			mu.Lock()
			ran++
			mu.Unlock()
			<-ctx.Done()
			return context.Cause(ctx)
		})
		k := streamKernel(t, reg, `{}`)
		const n = 50
		outs := make(chan kernel.Outcome, n)
		for range n {
			go func() {
				outs <- k.Op("orders.watch").Stream(t.Context(), kernel.StreamCall{Input: &Watch{}, Raw: newChanRaw(t.Context())})
			}()
		}
		synctest.Wait()
		start := time.Now()
		k.DrainStreams()
		for range n {
			out := <-outs
			assertErr(t, out.Err, pipeline.KindUnavailable, "KERNEL_UNAVAILABLE_012")
			if d, ok := out.Err.(*pipeline.Error).RetryAfter(); !ok || d != time.Second {
				t.Fatalf("retry-after %v, %v", d, ok)
			}
		}
		if time.Since(start) != 0 {
			t.Fatalf("the streams ended %v after the drain", time.Since(start))
		}
		out := k.Op("orders.watch").Stream(t.Context(), kernel.StreamCall{Input: &Watch{}, Raw: newChanRaw(t.Context())})
		assertErr(t, out.Err, pipeline.KindUnavailable, "KERNEL_UNAVAILABLE_012")
		if ran != n {
			t.Fatalf("%d handlers ran, want %d", ran, n)
		}
	})
}
