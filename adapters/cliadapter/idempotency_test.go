package cliadapter

import (
	"bytes"
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/spf13/cobra"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/resilience/idempotency"
)

// leaseStore is an in-process store that says its records outlive the
// process (a lease, as Redis's): what the CLI sees with Redis, in a
// synctest bubble.
type leaseStore struct{ idempotency.Store }

func (leaseStore) Lease() time.Duration { return 30 * time.Second }

// stubbornKeyed turns idempotency keys on for test.stubborn.
const stubbornKeyed = `{"Sundial":{"Kernel":{"Resilience":{"Operations":{"test.stubborn":{"Idempotency":{}}}}}}}`

// timedWriter keeps what is written and when the first write came.
type timedWriter struct {
	mu    sync.Mutex
	start time.Time
	first time.Duration
	b     bytes.Buffer
}

func (w *timedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.b.Len() == 0 {
		w.first = time.Since(w.start)
	}
	return w.b.Write(p)
}

func (w *timedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// runTimed runs `app args...` and returns the exit code, stdout, stderr,
// when stderr was first written and when the command returned.
func runTimed(t *testing.T, kf kernelFunc, opts []Option, args ...string) (code int, stdout string, stderr *timedWriter, ended time.Duration) {
	t.Helper()
	root := &cobra.Command{Use: "app"}
	if err := AddCommands(root, testRegistry(t), kf, append([]Option{WithSignals()}, opts...)...); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	stderr = &timedWriter{start: time.Now()}
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(stderr)
	code = Execute(context.Background(), root)
	return code, out.String(), stderr, time.Since(stderr.start)
}

// TestTimeoutWaitsForTheKeyedCall: with records that outlive the process,
// a TIMEOUT is reported at the deadline (0.3 s) with the generated key and
// the rerun line, and the command then waits for the handler, which
// ignores its context and works 1.5 s, so that its outcome is stored under
// the key: it returns, exit 7, at 1.5 s. A rerun with the key gets the
// outcome, marked as a replay, at once. Clock: synctest.
func TestTimeoutWaitsForTheKeyedCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := leaseStore{idempotency.NewMemoryStore(idempotency.MemoryConfig{})}
		kf, wait := tracked(kernelOn(testRegistry(t), kernel.WithConfigJSON([]byte(stubbornKeyed)), kernel.WithIdempotencyStore(store)))
		defer wait(t)
		code, _, stderr, ended := runTimed(t, kf, nil, "test", "stubborn", "--delay-ms", "1500", "--timeout", "0.3")
		p := problemOf(t, stderr.String())
		key, _ := p.Details["idempotencyKey"].(string)
		if code != exitTimeout || key == "" {
			t.Fatalf("first run: exit %d, stderr %q; want 7 with details.idempotencyKey", code, stderr)
		}
		if stderr.first < 300*time.Millisecond || stderr.first > 300*time.Millisecond+settleBound {
			t.Errorf("the failure was written at %v, want at the 0.3 s deadline", stderr.first)
		}
		if ended < 1500*time.Millisecond || ended > 1500*time.Millisecond+50*time.Millisecond {
			t.Errorf("the command returned at %v, want when the 1.5 s handler returned", ended)
		}
		for _, want := range []string{"rerun with --idempotency-key " + key + " ", "waiting for the running call to finish"} {
			if !strings.Contains(stderr.String(), want) {
				t.Errorf("stderr %q lacks %q", stderr, want)
			}
		}
		code, out, stderr2, ended := runTimed(t, kf, nil, "test", "stubborn", "--delay-ms", "1500", "--idempotency-key", key)
		if code != 0 || !strings.Contains(out, `"delayMs": 1500`) || ended != 0 ||
			!strings.Contains(stderr2.String(), "replayed: the stored outcome of an earlier call with idempotency key "+key) {
			t.Errorf("rerun: exit %d after %v, stdout %q, stderr %q; want the replay at once", code, ended, out, stderr2)
		}
	})
}

// TestSignalStopsWaiting: the wait after a keyed TIMEOUT ends at the first
// signal (exit 7, "stopped waiting"); after a CANCELLED (a signal already)
// the second signal exits at once.
func TestSignalStopsWaiting(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		sends []time.Duration
		code  int
		ended time.Duration
		exits []int
	}{
		{name: "TIMEOUT, then a signal", args: []string{"--timeout", "0.3"}, sends: []time.Duration{800 * time.Millisecond},
			code: exitTimeout, ended: 800 * time.Millisecond},
		{name: "CANCELLED, then a second signal", sends: []time.Duration{100 * time.Millisecond, 500 * time.Millisecond},
			code: exitCanceled, ended: 1500 * time.Millisecond, exits: []int{exitCanceled}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := leaseStore{idempotency.NewMemoryStore(idempotency.MemoryConfig{})}
				kf, wait := tracked(kernelOn(testRegistry(t), kernel.WithConfigJSON([]byte(stubbornKeyed)), kernel.WithIdempotencyStore(store)))
				defer wait(t)
				s := signals{ch: make(chan os.Signal, 2)}
				for _, at := range tc.sends {
					s.at(at, os.Interrupt)
				}
				var mu sync.Mutex
				var exits []int
				exit := func(code int) { mu.Lock(); exits = append(exits, code); mu.Unlock() }
				args := append([]string{"test", "stubborn", "--delay-ms", "1500"}, tc.args...)
				code, _, stderr, ended := runTimed(t, kf, []Option{withSignalChannel(s.ch), withExit(exit)}, args...)
				if code != tc.code || ended < tc.ended || ended > tc.ended+50*time.Millisecond {
					t.Errorf("exit %d at %v, want %d at %v; stderr %q", code, ended, tc.code, tc.ended, stderr)
				}
				synctest.Wait()
				mu.Lock()
				defer mu.Unlock()
				if !equalJSON(exits, tc.exits) {
					t.Errorf("exit called with %v, want %v", exits, tc.exits)
				}
				if again := strings.Contains(stderr.String(), "interrupt again, exiting at once"); again != (tc.exits != nil) {
					t.Errorf("stderr %q: the second-signal line %v, want %v", stderr, again, tc.exits != nil)
				}
				if stopped := strings.Contains(stderr.String(), "stopped waiting"); stopped != (tc.exits == nil) {
					t.Errorf("stderr %q: 'stopped waiting' %v, want %v", stderr, stopped, tc.exits == nil)
				}
			})
		})
	}
}

// TestInProcessKeys: with the in-process store (records die with the
// command) no key is generated, and a TIMEOUT makes no rerun promise; a
// key the caller gives is reported with a note that a rerun runs the
// operation again, and the command does not wait for the handler. On an
// operation that does not take keys, a malformed key is ignored.
func TestInProcessKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kf, wait := tracked(testKernel(t, stubbornKeyed))
		defer wait(t)
		code, _, stderr, ended := runTimed(t, kf, nil, "test", "stubborn", "--delay-ms", "1500", "--timeout", "0.3")
		if p := problemOf(t, stderr.String()); code != exitTimeout || p.Details["idempotencyKey"] != nil ||
			strings.Contains(stderr.String(), "rerun") || strings.Contains(stderr.String(), "waiting") || ended > 300*time.Millisecond+settleBound {
			t.Errorf("no key, in-process: exit %d at %v, stderr %q; want 7 at 0.3 s, no key, no rerun line, no wait", code, ended, stderr)
		}
		code, _, stderr, ended = runTimed(t, kf, nil, "test", "stubborn", "--delay-ms", "1500", "--timeout", "0.3", "--idempotency-key", "k-1")
		if p := problemOf(t, stderr.String()); code != exitTimeout || p.Details["idempotencyKey"] != "k-1" ||
			!strings.Contains(stderr.String(), "note: this command keeps idempotency records in its own process only") ||
			strings.Contains(stderr.String(), "to get this call's outcome") || ended > 300*time.Millisecond+settleBound {
			t.Errorf("caller's key, in-process: exit %d at %v, stderr %q; want 7 at 0.3 s with the key and the note", code, ended, stderr)
		}
		code, out, stderr, _ := runTimed(t, kf, nil, "test", "echo", "--name", "a", "--idempotency-key", "bad\x01key")
		if code != 0 || !strings.Contains(out, `"name": "a"`) {
			t.Errorf("malformed key on an operation without keys: exit %d, stdout %q, stderr %q; want it ignored", code, out, stderr)
		}
		code, _, stderr, _ = runTimed(t, kf, nil, "test", "stubborn", "--idempotency-key", "bad\x01key")
		if code != exitValidation || !strings.Contains(stderr.String(), "KERNEL_VALIDATION_005") {
			t.Errorf("malformed key on an operation with keys: exit %d, stderr %q; want 2 KERNEL_VALIDATION_005", code, stderr)
		}
	})
}
