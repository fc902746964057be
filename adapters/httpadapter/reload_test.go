package httpadapter_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

// admission is one admitted call: its arrival and the end of the window
// it took its permit in (arrival plus the quota's Reset: the limiter's own
// reading, so every call of a window has the same end).
type admission struct {
	arrival, windowEnd time.Time
}

// TestReloadUnderLoad: over loopback HTTP, 8 clients call ping.load
// (PermitLimit 100 per 0.5 s window) while the config file is rewritten
// and reloaded, with no restart: PermitLimit 100 -> 10 in the middle of a
// window, then back to 100. The window of the change admits nothing more
// once 10 permits are used (at most max(used, 10) in all), every later
// window at most 10 until the change back begins; from then on at most
// 100 per window, and more than 10 again. Every request is answered: 200, or 503 with
// KERNEL_UNAVAILABLE_002 — nothing is lost.
func TestReloadUnderLoad(t *testing.T) {
	const window = 500 * time.Millisecond
	path := filepath.Join(t.TempDir(), "config.json")
	writeLimit := func(n int) {
		doc := fmt.Sprintf(`{"Sundial":{"Kernel":{"Resilience":{"Operations":{"ping.load":{"PermitLimit":%d,"WindowSeconds":0.5,"RateLimitHeaders":true}}}}}}`, n)
		if err := os.WriteFile(path+".tmp", []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			t.Fatal(err)
		}
	}
	writeLimit(100)
	base := time.Now()

	var mu sync.Mutex
	var admitted []admission
	record := pipeline.MiddlewareFunc(func(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
		at, _ := pipelinetest.Arrival(inv)
		q, _ := inv.Reply().Quota()
		mu.Lock()
		admitted = append(admitted, admission{at, at.Add(q.Reset)})
		mu.Unlock()
		return next(ctx, inv)
	})
	reg := operations.NewRegistry()
	if err := operations.Register(reg, operations.Descriptor{ID: "ping.load", Method: "GET", Path: "/ping"},
		func(context.Context, struct{}) (string, error) { return "pong", nil }); err != nil {
		t.Fatal(err)
	}
	k, err := kernel.New(kernel.WithRegistry(reg), kernel.WithConfigFile(path), kernel.UseAt(pipeline.StageAuthentication, record))
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	if _, err := httpadapter.Mount(e, k); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: e}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	url := "http://" + ln.Addr().String() + "/ping"

	// The load: 8 clients, one request at a time each, 1 ms apart.
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var sent, ok, limited, other int64
	var cmu sync.Mutex
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	defer client.CloseIdleConnections()
	for range 8 {
		wg.Go(func() {
			for ctx.Err() == nil {
				resp, err := client.Get(url)
				cmu.Lock()
				sent++
				switch {
				case err != nil:
					other++
					t.Errorf("request: %v", err)
				case resp.StatusCode == 200:
					ok++
				case resp.StatusCode == 503 && resp.Header.Get("Retry-After") != "":
					limited++
				default:
					other++
					t.Errorf("status %d", resp.StatusCode)
				}
				cmu.Unlock()
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				time.Sleep(time.Millisecond)
			}
		})
	}

	// Mid-window: some permits used, some left (within 5 s; else whatever
	// the window holds).
	quota := func() pipeline.Quota {
		for _, o := range k.Status().Operations {
			if o.ID == "ping.load" {
				return o.Window
			}
		}
		return pipeline.Quota{}
	}
	time.Sleep(window) // a window or more of load at 100
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		if q := quota(); q.Remaining > 0 && q.Remaining <= 80 {
			break
		}
		time.Sleep(100 * time.Microsecond) // poll
	}
	writeLimit(10)
	if changed, err := k.Reload(); !changed {
		t.Fatal(changed, err)
	}
	lowered := time.Now()
	time.Sleep(4 * window)
	writeLimit(100)
	// The change back takes effect at some instant between raising and
	// raised: a window ending in between may admit up to 100.
	raising := time.Now()
	if changed, err := k.Reload(); !changed {
		t.Fatal(changed, err)
	}
	raised := time.Now()
	t.Logf("the change back took %v", raised.Sub(raising))
	time.Sleep(3 * window)
	stop()
	wg.Wait()

	// Per window: admitted in all, and admitted by calls arriving after
	// the lowering.
	type counts struct{ all, afterLower, afterRaise int }
	byWindow := map[time.Duration]*counts{} // by the window's end, after base (monotonic)
	var ends []time.Time
	for _, a := range admitted {
		c := byWindow[a.windowEnd.Sub(base)]
		if c == nil {
			c = &counts{}
			byWindow[a.windowEnd.Sub(base)] = c
			ends = append(ends, a.windowEnd)
		}
		c.all++
		if a.arrival.After(lowered) {
			c.afterLower++
		}
		if a.arrival.After(raised) {
			c.afterRaise++
		}
	}
	sawRaise := false
	for _, end := range ends {
		c := byWindow[end.Sub(base)]
		start := end.Add(-window)
		switch {
		case !end.After(lowered) || raised.Before(start): // before the change, or after the change back
			if c.all > 100 {
				t.Errorf("window ending %v: %d admitted at PermitLimit 100", end, c.all)
			}
			if raised.Before(start) && c.all > 10 {
				sawRaise = true
			}
		case start.Before(lowered): // the window of the change
			used := c.all - c.afterLower
			if c.afterLower > max(10-used, 0) {
				t.Errorf("window of the change: %d used, then %d more admitted; want at most max(used, 10) = %d in all", used, c.afterLower, max(used, 10))
			}
			t.Logf("window of the change: %d used before, %d after", used, c.afterLower)
		case !raising.Before(end): // windows at PermitLimit 10, ended before the change back began
			if c.all > 10 {
				t.Errorf("window ending %v at PermitLimit 10: %d admitted", end, c.all)
			}
		default: // the windows of the change back: ending after it began, starting before it ended
			if c.all > 100 {
				t.Errorf("window of the change back: %d admitted", c.all)
			}
			t.Logf("window of the change back: %d admitted, %d after it", c.all, c.afterRaise)
		}
	}
	if !sawRaise {
		t.Errorf("no window after the change back admitted more than 10")
	}
	if sent != ok+limited || other != 0 || int64(len(admitted)) != ok {
		t.Errorf("%d sent: %d ok, %d rate limited, %d other; %d admitted: every request must be answered 200 or 503", sent, ok, limited, other, len(admitted))
	}
	t.Logf("%d requests: %d admitted, %d rate limited, over %d windows", sent, ok, limited, len(ends))
}
