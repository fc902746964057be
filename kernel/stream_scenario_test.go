package kernel_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
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
		name: "the send stall is 30 seconds unless configured", op: "orders.watch",
		section: `{"TimeoutSeconds":60}`, caller: func(*chanRaw, context.CancelFunc) {},
		kind: pipeline.KindCanceled, code: "KERNEL_CANCELLED_002", at: 30 * time.Second,
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

// waitCounted returns a handler tail that counts its runs in ran and
// waits for its stream to end.
func waitCounted(ran *atomic.Int64) func(context.Context) error {
	return func(ctx context.Context) error {
		ran.Add(1)
		<-ctx.Done()
		return context.Cause(ctx)
	}
}

// TestMaxStreams: an operation's MaxStreams pool is held for a stream's
// life. The stream past it is refused with KERNEL_UNAVAILABLE_003 before
// anything runs; a stream that ends gives its slot back.
func TestMaxStreams(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ran atomic.Int64
		reg := streamRegistry(t, 0, waitCounted(&ran))
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
		if ran.Load() != 2 {
			t.Fatalf("%d handlers ran, want 2", ran.Load())
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
		if ran.Load() != 3 {
			t.Fatalf("%d handlers ran, want 3: the slot was not given back", ran.Load())
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
// Close drains the streams still open.
func TestDrainStreams(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ran atomic.Int64
		reg := streamRegistry(t, 0, waitCounted(&ran))
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
		if ran.Load() != n {
			t.Fatalf("%d handlers ran, want %d", ran.Load(), n)
		}

		// Close drains the streams still open too.
		k2 := streamKernel(t, reg, `{}`)
		go func() {
			outs <- k2.Op("orders.watch").Stream(t.Context(), kernel.StreamCall{Input: &Watch{}, Raw: newChanRaw(t.Context())})
		}()
		synctest.Wait()
		k2.Close()
		assertErr(t, (<-outs).Err, pipeline.KindUnavailable, "KERNEL_UNAVAILABLE_012")
		if ran.Load() != n+1 {
			t.Fatalf("%d handlers ran, want %d", ran.Load(), n+1)
		}
	})
}

// TestStreamEndsJudged: the breaker judges a stream by how it ended. A
// handler that went silent is a failure; a caller that went silent, a
// drain, the caller's throttling and the caller leaving are neutral.
func TestStreamEndsJudged(t *testing.T) {
	waitEnd := func(ctx context.Context) error { <-ctx.Done(); return context.Cause(ctx) }
	for _, tt := range []struct {
		name, op, section string
		caller            func(r *chanRaw)
		drain             bool
		code              string
		opens             bool // the breaker opens after it
	}{
		{name: "silent handler", op: "orders.watch", section: `{"Stream":{"IdleSeconds":1}}`,
			caller: func(r *chanRaw) { r.collect() }, code: "KERNEL_TIMEOUT_003", opens: true},
		{name: "silent caller", op: "orders.import", section: `{"Stream":{"IdleSeconds":1}}`,
			caller: func(*chanRaw) {}, code: "KERNEL_TIMEOUT_003"},
		{name: "hard rate", op: "orders.import", section: `{"Stream":{"MessagesPerSecond":1,"HardRate":true}}`,
			caller: func(r *chanRaw) { feed(r, 5) }, code: "KERNEL_UNAVAILABLE_011"},
		{name: "drained", op: "orders.watch", section: `{}`, drain: true,
			caller: func(r *chanRaw) { r.collect() }, code: "KERNEL_UNAVAILABLE_012"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				section := `{"Operations":{"` + tt.op + `":` + strings.TrimSuffix(tt.section, "}")
				if tt.section != `{}` {
					section += ","
				}
				section += `"FailureThreshold":1}}}`
				k := streamKernel(t, streamRegistry(t, 1, waitEnd), section)
				call := func() kernel.Outcome {
					raw := newChanRaw(t.Context())
					tt.caller(raw)
					c := kernel.StreamCall{Raw: raw}
					if tt.op == "orders.watch" {
						c.Input = &Watch{}
					}
					return k.Op(tt.op).Stream(t.Context(), c)
				}
				if tt.drain {
					go func() { synctest.Wait(); k.DrainStreams() }()
				}
				out := call()
				assertErr(t, out.Err, pipelinetest.KindOf(out.Err), tt.code)
				if tt.drain {
					return // a drained kernel refuses every stream
				}
				next := call()
				if opened := pipelinetest.CodeOf(next.Err) == "KERNEL_UNAVAILABLE_004"; opened != tt.opens {
					t.Fatalf("after %s the next stream's outcome is %v; the breaker opened: %v, want %v",
						tt.code, next.Err, opened, tt.opens)
				}
				synctest.Wait()
			})
		})
	}
}

// TestStreamIsNoLatencySample: a streaming operation's MaxStreams pool
// is never adaptive, even under a root "ConcurrencyLimit": "adaptive",
// and its streams are no samples of the status page's latency.
func TestStreamIsNoLatencySample(t *testing.T) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer mp.Shutdown(context.Background())
	k, err := kernel.New(kernel.WithRegistry(streamRegistry(t, 2, nil)), kernel.WithMeterProvider(mp),
		kernel.WithConfigJSON([]byte(wrap(`{"ConcurrencyLimit":"adaptive"}`))))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	if out := k.Op("orders.get").Invoke(t.Context(), kernel.Unary{Input: &Watch{}}); out.Err != nil {
		t.Fatal(out.Err)
	}
	for range 20 {
		raw := newChanRaw(t.Context())
		stop := raw.collect()
		if out := k.Op("orders.watch").Stream(t.Context(), kernel.StreamCall{Input: &Watch{}, Raw: raw}); out.Err != nil {
			t.Fatal(out.Err)
		}
		stop()
	}
	for _, st := range k.Status().Operations {
		if st.ID == "orders.get" && st.Calls != 1 {
			t.Fatalf("orders.get: %d latency samples, want 1", st.Calls)
		}
		if st.ID != "orders.watch" {
			continue
		}
		if st.AdaptiveLimit != 0 || st.ConcurrencyLimit != 0 || st.Calls != 0 {
			t.Fatalf("orders.watch: adaptive limit %d, limit %d, %d latency samples; want none",
				st.AdaptiveLimit, st.ConcurrencyLimit, st.Calls)
		}
	}
}

// TestStreamConfigReloads: a reload applies the Stream keys to the
// streams opened after it: here a larger MaxStreams and an idle clock.
func TestStreamConfigReloads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		waitEnd := func(ctx context.Context) error { <-ctx.Done(); return context.Cause(ctx) }
		path := filepath.Join(t.TempDir(), "config.json")
		write := func(section string) {
			if err := os.WriteFile(path, []byte(wrap(section)), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		write(`{"Operations":{"orders.watch":{"Stream":{"MaxStreams":1}}}}`)
		k, err := kernel.New(kernel.WithRegistry(streamRegistry(t, 0, waitEnd)), kernel.WithConfigFile(path))
		if err != nil {
			t.Fatal(err)
		}
		defer k.Close()
		op := k.Op("orders.watch")
		ctx, leave := context.WithCancel(t.Context())
		defer leave()
		first := make(chan kernel.Outcome, 1)
		go func() { first <- op.Stream(ctx, kernel.StreamCall{Input: &Watch{}, Raw: newChanRaw(ctx)}) }()
		synctest.Wait()
		out := op.Stream(t.Context(), kernel.StreamCall{Input: &Watch{}, Raw: newChanRaw(t.Context())})
		assertErr(t, out.Err, pipeline.KindUnavailable, "KERNEL_UNAVAILABLE_003")

		write(`{"Operations":{"orders.watch":{"Stream":{"MaxStreams":2,"IdleSeconds":3}}}}`)
		if changed, err := k.Reload(); !changed || err != nil {
			t.Fatalf("Reload = %v, %v", changed, err)
		}
		start := time.Now()
		out = op.Stream(t.Context(), kernel.StreamCall{Input: &Watch{}, Raw: newChanRaw(t.Context())})
		assertErr(t, out.Err, pipeline.KindTimeout, "KERNEL_TIMEOUT_003")
		if took := time.Since(start); took != 3*time.Second {
			t.Fatalf("the second stream ended after %v, want 3s (the reloaded IdleSeconds)", took)
		}
		leave()
		<-first
	})
}
