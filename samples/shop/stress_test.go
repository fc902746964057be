//go:build stress

package main

// The shop under load (make stress): 20,000 requests from 200 concurrent
// clients over 127.0.0.1, against `shop serve` running in this process,
// with reports.export rate- and concurrency-limited and orders.get free.
// It stops by itself, and prints its figures.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/pipeline"
)

// The load and the limits under test.
const (
	stressClients  = 200
	stressRequests = 20_000 // in all; half to each operation
	// stressPace is the interval between two requests of one client: 200
	// clients at 300 ms offer about 670 requests per second, which two
	// cores serve without queueing, so the free operation's latency shows
	// what the limited one's overload costs it.
	stressPace = 300 * time.Millisecond

	limitedPermits     = 100 // reports.export: calls per window
	limitedWindow      = time.Second
	limitedConcurrency = 4 // reports.export: calls at once
	limitedDelayMs     = 10

	// The unloaded baseline: the free operation called by one client
	// alone, one call every baselinePace — each call meets an idle
	// connection and an idle server, as each call of the load does, but
	// never another call.
	baselineSamples = 2000
	baselinePace    = 4 * time.Millisecond
)

// stressConfig limits reports.export and nothing else: the shop's default
// of 1,000 calls per second for every operation is raised out of reach,
// so orders.get is unlimited for this run.
var stressConfig = fmt.Sprintf(`{"Sundial":{"Kernel":{"Resilience":{
	"PermitLimit": 100000000,
	"Operations": {
		"reports.export": {"PermitLimit": %d, "WindowSeconds": %g, "QueueLimit": 0, "ConcurrencyLimit": %d, "ConcurrencyQueueLimit": 0}
	}
}}}}`, limitedPermits, limitedWindow.Seconds(), limitedConcurrency)

// admissions records when reports.export calls got past the limits, and
// how many ran at once. It sits at the end of the Resilience stage, right
// inside the limits, so it sees exactly the admitted calls.
type admissions struct {
	t0       time.Time
	mu       sync.Mutex // guards at
	at       []time.Duration
	inFlight atomic.Int64
	maxIn    atomic.Int64
}

func (a *admissions) Invoke(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
	if inv.OperationID() != "reports.export" {
		return next(ctx, inv)
	}
	now := time.Since(a.t0)
	a.mu.Lock()
	a.at = append(a.at, now)
	a.mu.Unlock()
	n := a.inFlight.Add(1)
	for m := a.maxIn.Load(); n > m && !a.maxIn.CompareAndSwap(m, n); m = a.maxIn.Load() {
	}
	defer a.inFlight.Add(-1)
	return next(ctx, inv)
}

// maxPerWindow returns the largest number of admissions in one window,
// for the alignment of windows (limiter creation between lo and hi) that
// makes it smallest, and that alignment. The limiter's windows start when
// kernel.New creates it, which the test only brackets; the count only
// changes where a window boundary crosses an admission, so those are the
// alignments to try.
func maxPerWindow(at []time.Duration, lo, hi, w time.Duration) (best int, origin time.Duration) {
	var per []int
	count := func(o time.Duration) int {
		clear(per)
		m := 0
		for _, t := range at {
			k := 0 // an admission before o cannot be: it counts in the first window
			if t >= o {
				k = int((t - o) / w)
			}
			for k >= len(per) {
				per = append(per, 0)
			}
			per[k]++
			m = max(m, per[k])
		}
		return m
	}
	cands := []time.Duration{lo, hi}
	for _, t := range at {
		for o := t - (t-lo)/w*w; o <= hi; o += w {
			cands = append(cands, o, o+1)
		}
	}
	slices.Sort(cands)
	best = -1
	for _, o := range slices.Compact(cands) {
		if o < lo || o > hi {
			continue
		}
		if c := count(o); best < 0 || c < best {
			best, origin = c, o
		}
	}
	return best, origin
}

// outcome is what one client learnt from one call.
type outcome struct {
	free    bool
	status  int
	code    string
	latency time.Duration
	lag     time.Duration // how late the request left, against its schedule
	err     string        // transport error or malformed response
}

// checkResponse returns "" when resp is well-formed: a 2xx JSON body, or
// Problem Details whose status, type and title agree with the response.
func checkResponse(resp *http.Response, body []byte) (code, problem string) {
	ct := resp.Header.Get("Content-Type")
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if !strings.HasPrefix(ct, "application/json") || !json.Valid(body) {
			return "", fmt.Sprintf("%d with Content-Type %q and body %.100q", resp.StatusCode, ct, body)
		}
		return "", ""
	}
	if ct != httpadapter.ContentTypeProblem {
		return "", fmt.Sprintf("%d with Content-Type %q, want Problem Details: %.100q", resp.StatusCode, ct, body)
	}
	var p map[string]any
	if err := json.Unmarshal(body, &p); err != nil {
		return "", fmt.Sprintf("%d: Problem Details do not decode: %v", resp.StatusCode, err)
	}
	code, _ = p["code"].(string)
	title, _ := p["title"].(string)
	kind, ok := pipeline.ParseKind(title)
	switch {
	case len(p) != 8:
		return code, fmt.Sprintf("%d: Problem Details with %d members, want 8: %s", resp.StatusCode, len(p), body)
	case p["status"] != float64(resp.StatusCode):
		return code, fmt.Sprintf("%d: Problem Details status %v", resp.StatusCode, p["status"])
	case code == "" || p["type"] != "urn:sundial:error:"+code:
		return code, fmt.Sprintf("%d: type %v and code %q disagree", resp.StatusCode, p["type"], code)
	case !ok || httpadapter.StatusFor(kind) != resp.StatusCode:
		return code, fmt.Sprintf("%d: title %q is not the kind of that status", resp.StatusCode, title)
	}
	return code, ""
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func TestStressShop(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "stress.json")
	if err := os.WriteFile(cfg, []byte(stressConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	adm := &admissions{t0: time.Now()}
	lo := time.Since(adm.t0)
	addr := make(chan string, 1)
	var hi time.Duration
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- serve(ctx, serveOptions{
			configFile: cfg, httpAddr: "127.0.0.1:0", grpcAddr: "127.0.0.1:0",
			logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), // the real access log, written nowhere
			kernelOpts: []kernel.Option{
				kernel.UseAt(pipeline.StageResilience, adm),
			},
			ready: func(a string) { hi = time.Since(adm.t0); addr <- a },
		})
	}()
	var url string
	select {
	case a := <-addr:
		url = "http://" + a
	case err := <-served:
		t.Fatalf("serve() = %v before listening", err)
	}
	defer func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("serve() after shutdown = %v, want nil", err)
		}
	}()

	// The order orders.get will read (orders.create: 2 per minute).
	setup := &http.Client{Transport: &http.Transport{}}
	resp, err := setup.Post(url+"/orders", "application/json", strings.NewReader(`{"name":"widget","amount":1}`))
	if err != nil || resp.StatusCode != 201 {
		t.Fatalf("POST /orders = %v, %v; want 201", resp, err)
	}
	resp.Body.Close()

	loadBefore := loadAverage()
	watch := startSampler()
	defer watch.stop()

	// Unloaded: one client, one call at a time, paced as the clients of
	// the load are (the figure the test holds the load to), and for
	// comparison back to back, which keeps the connection, the server
	// goroutine and the CPU hot.
	unloaded := func(pace time.Duration) []time.Duration {
		var lat []time.Duration
		next := time.Now()
		for i := range 200 + baselineSamples {
			time.Sleep(time.Until(next))
			next = next.Add(pace)
			start := time.Now()
			resp, err := setup.Get(url + "/orders/ord-1")
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("GET /orders/ord-1 = %d, want 200", resp.StatusCode)
			}
			if i >= 200 { // after a warm-up
				lat = append(lat, time.Since(start))
			}
		}
		return lat
	}
	hot := unloaded(0)
	baseline := unloaded(baselinePace)
	setup.CloseIdleConnections()
	baseP99 := percentile(baseline, 0.99)

	runtime.GC()
	goroutinesBase := waitGoroutines(0, 0)

	// The load: every client sends its share on its own connection, one
	// request per stressPace from a random offset, alternating the two
	// operations.
	loadCtx, cancelLoad := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancelLoad()
	watch.setPhase(1)
	perClient := stressRequests / stressClients
	results := make([][]outcome, stressClients)
	clients := make([]*http.Client, stressClients)
	var wg sync.WaitGroup
	loadStart := time.Now()
	for c := range stressClients {
		clients[c] = &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
		wg.Go(func() {
			results[c] = runClient(loadCtx, clients[c], url, c, perClient, loadStart.Add(rand.N(stressPace)))
		})
	}
	wg.Wait()
	loadTook := time.Since(loadStart)
	for _, c := range clients {
		c.CloseIdleConnections()
	}
	goroutinesAfter := waitGoroutines(goroutinesBase, 5*time.Second) // the sampler counts on both sides
	watch.stop()

	// Tally.
	type tally struct {
		sent, c2xx, c4xx, c5xx, lost int
		codes                        map[string]int
		lat, lag                     []time.Duration
	}
	free, limited := &tally{codes: map[string]int{}}, &tally{codes: map[string]int{}}
	var malformed []string
	for _, rs := range results {
		for _, o := range rs {
			tl := limited
			if o.free {
				tl = free
			}
			tl.sent++
			tl.lag = append(tl.lag, o.lag)
			if o.status != 0 {
				tl.lat = append(tl.lat, o.latency)
			}
			switch {
			case o.err != "" && o.status == 0:
				tl.lost++
			case o.status < 300:
				tl.c2xx++
			case o.status < 500:
				tl.c4xx++
			default:
				tl.c5xx++
			}
			if o.code != "" {
				tl.codes[o.code]++
			}
			if o.err != "" && len(malformed) < 10 {
				malformed = append(malformed, o.err)
			}
		}
	}
	adm.mu.Lock()
	at := slices.Clone(adm.at)
	adm.mu.Unlock()
	perWindow, origin := maxPerWindow(at, lo, hi, limitedWindow)
	windows := int((time.Since(adm.t0)-origin)/limitedWindow) + 1
	loadP99 := percentile(free.lat, 0.99)
	// Calls that got past the rate limit: those the concurrency limit
	// then turned away, and those that ran. The load spans at most
	// loadTook/window + 2 windows.
	passedRate := limited.c2xx + limited.codes[pipeline.CodeConcurrencyLimited]
	loadWindows := int(loadTook/limitedWindow) + 2

	// The figures.
	var tab bytes.Buffer
	tw := tabwriter.NewWriter(&tab, 0, 0, 2, ' ', tabwriter.AlignRight)
	row := func(cells ...any) {
		for _, c := range cells {
			fmt.Fprintf(tw, "%v\t", c)
		}
		fmt.Fprintln(tw)
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }
	fmt.Fprintf(&tab, "shop under load: %d requests from %d clients on 127.0.0.1 in %v (%.0f req/s offered, GOMAXPROCS %d)\n",
		free.sent+limited.sent, stressClients, loadTook.Round(time.Millisecond), float64(free.sent+limited.sent)/loadTook.Seconds(), runtime.GOMAXPROCS(0))
	row("", "orders.get (free)", "reports.export (limited)")
	row("sent", free.sent, limited.sent)
	row("2xx", free.c2xx, limited.c2xx)
	row("4xx", free.c4xx, limited.c4xx)
	row("5xx", free.c5xx, limited.c5xx)
	row("lost (no response)", free.lost, limited.lost)
	row("503 "+pipeline.CodeRateLimited, free.codes[pipeline.CodeRateLimited], limited.codes[pipeline.CodeRateLimited])
	row("503 "+pipeline.CodeConcurrencyLimited, free.codes[pipeline.CodeConcurrencyLimited], limited.codes[pipeline.CodeConcurrencyLimited])
	row("latency p50", ms(percentile(free.lat, 0.5)), ms(percentile(limited.lat, 0.5)))
	row("latency p99", ms(loadP99), ms(percentile(limited.lat, 0.99)))
	row("latency max", ms(percentile(free.lat, 1)), ms(percentile(limited.lat, 1)))
	row(fmt.Sprintf("unloaded p50 / p99 (1 client, every %v)", baselinePace), ms(percentile(baseline, 0.5))+" / "+ms(baseP99), "-")
	row("unloaded back to back p50 / p99 (for comparison)", ms(percentile(hot, 0.5))+" / "+ms(percentile(hot, 0.99)), "-")
	row("p99 loaded / unloaded", fmt.Sprintf("%.2fx (limit 2x)", float64(loadP99)/float64(baseP99)), "-")
	row("send lag p99 / max", ms(percentile(free.lag, 0.99))+" / "+ms(percentile(free.lag, 1)), ms(percentile(limited.lag, 0.99))+" / "+ms(percentile(limited.lag, 1)))
	row("past the rate limit (2xx + _003)", "-", fmt.Sprintf("%d (limit %d x %d windows = %d)", passedRate, limitedPermits, loadWindows, limitedPermits*loadWindows))
	row("admitted (handler ran)", "-", len(at))
	row("max admitted per window", "-", fmt.Sprintf("%d (limit %d per %v, %d windows)", perWindow, limitedPermits, limitedWindow, windows))
	row("max running at once", "-", fmt.Sprintf("%d (limit %d)", adm.maxIn.Load(), limitedConcurrency))
	row("goroutines before / peak / after", fmt.Sprintf("%d / %d / %d", goroutinesBase, watch.peak[1], goroutinesAfter), "")
	row("10 ms ticker late by, at most (unloaded / load)", ms(watch.late[0])+" / "+ms(watch.late[1]), "")
	row("load average before / after", loadBefore, loadAverage())
	tw.Flush()
	t.Log("\n" + tab.String())

	// The assertions.
	for _, m := range malformed {
		t.Errorf("malformed or lost: %s", m)
	}
	if n := free.sent + limited.sent; n != stressRequests {
		t.Errorf("sent %d requests, want %d (the load was cut short)", n, stressRequests)
	}
	for _, tl := range []*tally{free, limited} {
		if tl.sent != tl.c2xx+tl.c4xx+tl.c5xx {
			t.Errorf("sent %d != 2xx %d + 4xx %d + 5xx %d: %d lost", tl.sent, tl.c2xx, tl.c4xx, tl.c5xx, tl.lost)
		}
	}
	if free.c2xx != free.sent {
		t.Errorf("orders.get (unlimited): %d of %d succeeded, codes %v; want all", free.c2xx, free.sent, free.codes)
	}
	if limited.c2xx != len(at) {
		t.Errorf("reports.export: %d 2xx responses but %d admissions: a call was lost between the limits and the response", limited.c2xx, len(at))
	}
	if got := limited.codes[pipeline.CodeRateLimited] + limited.codes[pipeline.CodeConcurrencyLimited]; limited.c2xx+got != limited.sent {
		t.Errorf("reports.export: %d 2xx + %d rejections != %d sent; codes %v", limited.c2xx, got, limited.sent, limited.codes)
	}
	if limited.codes[pipeline.CodeRateLimited] == 0 || limited.codes[pipeline.CodeConcurrencyLimited] == 0 {
		t.Errorf("reports.export: rejections %v, want both limits to have turned calls away (the load is too light to test them)", limited.codes)
	}
	if passedRate > limitedPermits*loadWindows {
		t.Errorf("reports.export: %d calls passed the rate limit over %d windows, want at most %d", passedRate, loadWindows, limitedPermits*loadWindows)
	}
	if perWindow > limitedPermits {
		t.Errorf("reports.export admitted %d calls in one window, want at most %d", perWindow, limitedPermits)
	}
	if n := adm.maxIn.Load(); n > limitedConcurrency {
		t.Errorf("reports.export ran %d calls at once, want at most %d", n, limitedConcurrency)
	}
	if loadP99 > 2*baseP99 {
		t.Errorf("orders.get p99 under load %v, want at most 2x its unloaded p99 %v", loadP99, baseP99)
	}
	if goroutinesAfter > goroutinesBase {
		t.Errorf("goroutines: %d after the load, want back to the %d before it", goroutinesAfter, goroutinesBase)
	}
}

// runClient sends n requests, one per stressPace from first, alternating
// orders.get and reports.export, and reports each outcome.
func runClient(ctx context.Context, hc *http.Client, url string, c, n int, first time.Time) []outcome {
	out := make([]outcome, 0, n)
	exportBody := fmt.Sprintf(`{"delayMs":%d}`, limitedDelayMs)
	for i := range n {
		at := first.Add(time.Duration(i) * stressPace)
		if d := time.Until(at); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return out
			}
		}
		o := outcome{free: (i+c)%2 == 0}
		var req *http.Request
		if o.free {
			req, _ = http.NewRequestWithContext(ctx, "GET", url+"/orders/ord-1", nil)
		} else {
			req, _ = http.NewRequestWithContext(ctx, "POST", url+"/reports/export", strings.NewReader(exportBody))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set(httpadapter.DefaultRelativeDeadlineHeader, "2000")
		}
		start := time.Now()
		o.lag = start.Sub(at)
		resp, err := hc.Do(req)
		if err != nil {
			o.err = err.Error()
			out = append(out, o)
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		o.latency = time.Since(start)
		o.status = resp.StatusCode
		if err != nil {
			o.err = fmt.Sprintf("%d: reading the body: %v", resp.StatusCode, err)
		} else {
			var problem string
			o.code, problem = checkResponse(resp, body)
			if problem != "" {
				o.err = problem
			}
		}
		out = append(out, o)
	}
	return out
}

// waitGoroutines returns the number of goroutines once it is at most want,
// or after timeout; want 0 takes one reading after a short settle.
func waitGoroutines(want int, timeout time.Duration) int {
	if want == 0 {
		time.Sleep(100 * time.Millisecond)
		return runtime.NumGoroutine()
	}
	end := time.Now().Add(timeout)
	for {
		n := runtime.NumGoroutine()
		if n <= want || time.Now().After(end) {
			return n
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sampler watches the process while the test runs: its goroutine count,
// and how late a 10 ms ticker fires. A tick late by tens of milliseconds
// means the process got no CPU — on a shared machine, because other
// processes had it — and the latency figures of that phase carry it.
type sampler struct {
	quit, done chan struct{}
	once       sync.Once
	mu         sync.Mutex // guards phase, peak and late
	phase      int        // 0: unloaded, 1: under load
	peak       [2]int
	late       [2]time.Duration
}

func startSampler() *sampler {
	s := &sampler{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		const every = 10 * time.Millisecond
		tk := time.NewTicker(every)
		defer tk.Stop()
		prev := time.Now()
		for {
			select {
			case <-s.quit:
				return
			case now := <-tk.C:
				late := now.Sub(prev) - every
				prev = now
				n := runtime.NumGoroutine()
				s.mu.Lock()
				s.peak[s.phase] = max(s.peak[s.phase], n)
				s.late[s.phase] = max(s.late[s.phase], late)
				s.mu.Unlock()
			}
		}
	}()
	return s
}

func (s *sampler) setPhase(p int) {
	s.mu.Lock()
	s.phase = p
	s.mu.Unlock()
}

// stop ends the sampling; the figures may be read once it returns.
func (s *sampler) stop() {
	s.once.Do(func() { close(s.quit) })
	<-s.done
}

// loadAverage returns the machine's 1-minute load average, or "?".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}
