package httpadapter_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/pipeline"
)

// TestStragglerFloodIsBounded floods an operation without a concurrency
// limit with calls whose handler ignores its context, over 127.0.0.1:
// each is answered 504 at its 100 ms deadline and leaves its handler
// running. Unbounded, all floodCalls handlers would pile up (9,553 such
// calls hold 9,906 goroutines and 896 MB); with the kernel's
// MaxStragglers the stragglers stop at the bound (plus the calls already
// admitted when it was reached), every later call is shed at once with
// 503 KERNEL_UNAVAILABLE_005 and Retry-After: 1, running nothing, while
// another operation still answers; the goroutines are back to their
// baseline once the handlers return.
//
// On a loaded machine a call's deadline can pass before the kernel starts
// its handler, which then never runs: that call is answered 504 and
// leaves no straggler, so the flood's 504s are no longer its stragglers.
// Then the flood is run again, on a new server, with ten times the
// deadline, three tries in all. Every try checks what holds either way;
// only the checks that count the 504s as stragglers wait for a flood
// whose 504s all ran their handler.
func TestStragglerFloodIsBounded(t *testing.T) {
	for try, d := 1, 100*time.Millisecond; ; try, d = try+1, 10*d {
		var allRan bool
		if ok := t.Run(fmt.Sprintf("deadline %v", d), func(t *testing.T) { allRan = stragglerFlood(t, d) }); allRan || !ok {
			return
		}
		if try == 3 {
			t.Fatalf("in each of three floods, calls answered 504 ran no handler: their deadline passed before the kernel started it (the last %v)", d)
		}
		t.Logf("calls answered 504 at the %v deadline ran no handler: the flood once more, with ten times the deadline", d)
	}
}

// stragglerFlood runs TestStragglerFloodIsBounded's flood with the
// deadline d for work.run. It reports whether every call answered 504 ran
// its handler; only then does it check the bounds that count those calls
// as stragglers.
func stragglerFlood(t *testing.T, d time.Duration) (allRan bool) {
	const (
		maxStragglers = 50
		floodCalls    = 2000
		clients       = 20
		// perStraggler bounds the goroutines one held call keeps in this
		// process: its handler, the server's connection goroutine, the
		// test app's context watcher (the clients' are counted apart).
		perStraggler = 3
	)
	app := newTestApp()
	s := startServer(t, app, serverOpts{config: fmt.Sprintf(`{"Sundial":{"Kernel":{"MaxTimeoutSeconds":10,"MaxStragglers":%d,
		"Resilience":{"Operations":{"work.run":{"TimeoutSeconds":%g}}}}}}`, maxStragglers, d.Seconds())})
	// The test app reports each entry and each context's end on buffered
	// channels: drain them while the flood runs.
	stopDrain := make(chan struct{})
	var drain sync.WaitGroup
	drain.Go(func() {
		for {
			select {
			case <-app.started:
			case <-app.ctxDone:
			case <-stopDrain:
				return
			}
		}
	})
	released := false
	defer func() {
		if !released {
			app.unblock()
		}
		close(stopDrain)
		drain.Wait()
	}()

	runtime.GC()
	base := runtime.NumGoroutine()
	var (
		next                         atomic.Int64
		timeouts, shed, other        atomic.Int64
		shedWithoutRetry             atomic.Int64
		peakGoroutines, peakStraggle atomic.Int64
		wg                           sync.WaitGroup
		firstOther                   atomic.Value
		answered504                  sync.Map // the tags of the calls answered 504
		// The 504s that no deadline can have answered: before d had passed
		// since the call was sent, or with a Retry-After (the shed calls'
		// answer has one, a timeout's none).
		wrong504   atomic.Int64
		firstWrong atomic.Value
	)
	watch := func() {
		for n := int64(runtime.NumGoroutine()); n > peakGoroutines.Load(); {
			if peakGoroutines.CompareAndSwap(peakGoroutines.Load(), n) {
				break
			}
		}
		for n := int64(s.k.Status().Stragglers); n > peakStraggle.Load(); {
			if peakStraggle.CompareAndSwap(peakStraggle.Load(), n) {
				break
			}
		}
	}
	start := time.Now()
	for range clients {
		wg.Go(func() {
			tr := &http.Transport{MaxIdleConnsPerHost: 1}
			defer tr.CloseIdleConnections()
			hc := &http.Client{Transport: tr, Timeout: d + 10*time.Second}
			for {
				tag := next.Add(1)
				if tag > floodCalls {
					break
				}
				req, _ := http.NewRequest("POST", s.url+"/work", strings.NewReader(fmt.Sprintf(`{"ignoreCtx":true,"tag":%d}`, tag)))
				req.Header.Set("Content-Type", "application/json")
				sent := time.Now()
				resp, err := hc.Do(req)
				if err != nil {
					other.Add(1)
					firstOther.CompareAndSwap(nil, err.Error())
					continue
				}
				var p struct{ Code string }
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				_ = json.Unmarshal(b, &p)
				switch {
				case resp.StatusCode == 504 && p.Code == pipeline.CodeTimeout:
					timeouts.Add(1)
					answered504.Store(tag, true)
					// The kernel answers TIMEOUT once the call's deadline,
					// d after its arrival, has passed, whether its handler
					// started or not.
					if took, ra := time.Since(sent), resp.Header.Get("Retry-After"); took < d || ra != "" {
						wrong504.Add(1)
						firstWrong.CompareAndSwap(nil, fmt.Sprintf("after %v, Retry-After %q: %s", took, ra, b))
					}
				case resp.StatusCode == 503 && p.Code == kernel.CodeOverloaded:
					shed.Add(1)
					if resp.Header.Get("Retry-After") != "1" {
						shedWithoutRetry.Add(1)
					}
				default:
					other.Add(1)
					firstOther.CompareAndSwap(nil, fmt.Sprintf("%d %s", resp.StatusCode, b))
				}
				watch()
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	watch()
	held := s.k.Status().Stragglers
	ran := app.calls.Load()
	// Only the operation whose handlers straggle is shed: another counts
	// its stragglers up to half of MaxStragglers, and still answers.
	otherOp := s.do(t, "GET", "/items/1", "", nil)
	if otherOp.status != http.StatusOK {
		t.Errorf("GET /items/1 beside the flood = %d %s, want 200: one operation's stragglers shed another", otherOp.status, otherOp.body)
	}

	app.unblock()
	released = true
	if err := s.k.Wait(context.Background()); err != nil {
		t.Fatalf("kernel Wait after the release: %v", err)
	}
	s.client.CloseIdleConnections()
	var after int
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if after = runtime.NumGoroutine(); after <= base || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("straggler flood: %d calls from %d clients in %v, deadline %v, MaxStragglers %d: %d answered 504 at the deadline (handlers ran: %d), %d shed 503 %s, %d other; stragglers peak %d, %d at the end of the flood (items.get beside it: %d); goroutines %d before, peak %d (+%d), %d after the handlers returned",
		floodCalls, clients, took.Round(time.Millisecond), d, maxStragglers, timeouts.Load(), ran, shed.Load(), kernel.CodeOverloaded, other.Load(),
		peakStraggle.Load(), held, otherOp.status, base, peakGoroutines.Load(), peakGoroutines.Load()-int64(base), after)
	if other.Load() != 0 {
		t.Fatalf("%d calls got neither the 504 nor the 503 (first: %v)", other.Load(), firstOther.Load())
	}
	if wrong504.Load() != 0 {
		t.Errorf("%d calls answered 504 TIMEOUT before their %v deadline had passed, or with a Retry-After: no deadline answered them (first: %v)",
			wrong504.Load(), d, firstWrong.Load())
	}
	// A call answered 504 may not have run its handler: under load its
	// deadline can pass before the chain reaches the handler, which then
	// never starts. But every handler that ran is a call answered 504:
	// none of the calls shed or otherwise answered. All chains have
	// returned (Wait), so ran holds every handler that ever started.
	var ranAll int64
	var notTimedOut []int64
	app.ran.Range(func(tag, _ any) bool {
		ranAll++
		if _, ok := answered504.Load(int64(tag.(int))); !ok {
			notTimedOut = append(notTimedOut, int64(tag.(int)))
		}
		return true
	})
	if len(notTimedOut) != 0 || ranAll > timeouts.Load() {
		t.Errorf("%d handlers ran for %d calls answered 504; calls not answered 504 ran theirs: tags %v",
			ranAll, timeouts.Load(), notTimedOut)
	}
	// Whether or not every 504 ran its handler: the shed calls carry
	// Retry-After: 1; the kernel's count of stragglers stays within the
	// bound; at least MaxStragglers calls are answered 504 (the bound is
	// reached only by as many stragglers, each a call answered 504, and
	// until then every call is answered 504); the goroutines stay bounded
	// and come back to their baseline.
	limit := int64(maxStragglers + clients)
	if shedWithoutRetry.Load() != 0 {
		t.Errorf("%d of %d calls shed without Retry-After: 1; want each with it", shedWithoutRetry.Load(), shed.Load())
	}
	if peakStraggle.Load() > limit || timeouts.Load() < maxStragglers {
		t.Errorf("%d stragglers at most, %d calls answered 504; want at most MaxStragglers + the calls admitted when it was reached (%d) stragglers, and at least %d calls answered 504",
			peakStraggle.Load(), timeouts.Load(), limit, maxStragglers)
	}
	// The clients' own goroutines (connection readers and writers) are in
	// this process too: a few per client.
	if grow := int64(perStraggler*(maxStragglers+clients) + 4*clients); peakGoroutines.Load()-int64(base) > grow {
		t.Errorf("goroutines grew by %d, want at most %d", peakGoroutines.Load()-int64(base), grow)
	}
	if after > base {
		t.Errorf("goroutines after the handlers returned = %d, want back to %d", after, base)
	}
	if ranAll < timeouts.Load() {
		// Calls answered 504 that ran nothing held no straggler: the
		// flood went on past them, so its 504s are not its stragglers and
		// the checks below, which count them as such, do not apply.
		t.Logf("%d of the %d calls answered 504 ran no handler", timeouts.Load()-ranAll, timeouts.Load())
		return false
	}
	if shed.Load() == 0 || timeouts.Load() > limit {
		t.Errorf("%d calls shed, %d calls answered 504 (all stragglers); want the flood shed past the bound, and at most MaxStragglers + the calls admitted when it was reached (%d) answered 504",
			shed.Load(), timeouts.Load(), limit)
	}
	return true
}
