//go:build stress

package systemtest

// The shop under load (make stress): 20,000 requests from 200 concurrent
// clients over 127.0.0.1, against `shop serve` running in this process,
// with reports.export rate- and concurrency-limited and orders.get free;
// then a straggler flood (2,000 calls to a handler that ignores its
// context, against the kernel's MaxStragglers) and a gRPC stall flood
// (1,000 calls that never send their request message, against the gRPC
// listener's bounds), each followed by the process's return to its
// goroutine count and RSS from before it. It stops by itself, and prints
// its figures.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	httppprof "net/http/pprof"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/sundial-go/sundial/adapters/grpcadapter"
	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/samples/shop/internal/shopcmd"
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

	// The straggler flood: tests.flaky in mode "stall" ignores its
	// context and returns only when the test releases it; under
	// stragglerTimeout and no concurrency limit, every call it answers at
	// the deadline leaves a straggler, until maxStragglers of them make
	// the kernel shed every new call (503 KERNEL_UNAVAILABLE_005).
	stragglerCalls   = 2000
	stragglerClients = 50
	stragglerTimeout = 200 * time.Millisecond
	maxStragglers    = 500

	// The gRPC stall flood: calls to /shop.v1.Orders/Get that send their
	// headers and never their message, spread over stallConns connections.
	// The listener holds grpcadapter.DefaultBounds().MaxConcurrentStreams
	// of them per connection (the client queues the rest), and answers each
	// DeadlineExceeded when its message has not come within stallRecvBound.
	stallStreams = 1000
	stallConns   = 2
	stallMethod  = "/shop.v1.Orders/Get"
	// stallRecvBound is the gRPC adapter's default WithRecvTimeout.
	stallRecvBound = 5 * time.Second

	// After a flood, the process is back at its baseline when it runs no
	// more goroutines than before it and its RSS (after a GC that returns
	// free memory to the OS, as before it) is at most rssMarginMiB above
	// what it was; it has recoverWithin to get there.
	rssMarginMiB = 12
	// stragglerGoroutines bounds the goroutines one stalled call keeps
	// (its handler's, the kernel's around it) and one client uses.
	stragglerGoroutines = 3
	recoverWithin       = 15 * time.Second
)

// stressConfig limits reports.export and nothing else: the shop's default
// of 1,000 calls per second for every operation is raised out of reach,
// so orders.get is unlimited for this run.
//
// It also bounds the stragglers at maxStragglers, and gives tests.flaky
// (the straggler flood's operation) its short timeout and no concurrency
// limit.
var stressConfig = fmt.Sprintf(`{"Sundial":{"Kernel":{"MaxStragglers": %d, "Resilience":{
	"PermitLimit": 100000000,
	"Operations": {
		"reports.export": {"PermitLimit": %d, "WindowSeconds": %g, "QueueLimit": 0, "ConcurrencyLimit": %d, "ConcurrencyQueueLimit": 0},
		"tests.flaky": {"TimeoutSeconds": %g}
	}
}}}}`, maxStragglers, limitedPermits, limitedWindow.Seconds(), limitedConcurrency, stragglerTimeout.Seconds())

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
	kind, ok := pipelinetest.ParseKind(title)
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
	stall := &stallingHandler{release: make(chan struct{})}
	stdout := &syncBuffer{}
	reg := flakyRegistry(t, stall.handle) // the shop's operations and tests.flaky
	go func() {
		served <- shopcmd.Serve(ctx, shopcmd.ServeOptions{
			ConfigFile: cfg, HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0",
			Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), // the real access log, written nowhere
			Stdout: stdout,
			KernelOptions: []kernel.Option{
				kernel.WithRegistry(reg),
				kernel.UseAt(pipeline.StageResilience, adm),
			},
			Ready: func(a string) { hi = time.Since(adm.t0); addr <- a },
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
	defer stall.free() // before the shutdown, should the test stop early
	grpcAddr := grpcAddrOf(t, stdout)

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
	rssBase := settledRSS()

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
	// The sampler counts on both sides. The test's own figures of the load
	// (20,000 outcomes) stay in memory, within the margin.
	goroutinesAfter, rssAfter, loadRecovered := backToBaseline(goroutinesBase, rssBase)

	// The floods, one after the other, each from the process as the one
	// before left it.
	watch.setPhase(2)
	sf := stragglerFlood(t, url, stall)
	sf.peakGoroutines, sf.peakRSS = watch.peaks(2)
	watch.setPhase(3)
	gf := stallFlood(t, grpcAddr)
	gf.peakGoroutines, gf.peakRSS = watch.peaks(3)
	watch.stop()
	resp, err = setup.Get(url + "/orders/ord-1")
	if err != nil || resp.StatusCode != 200 {
		t.Errorf("GET /orders/ord-1 after the floods = %v, %v; want 200", resp, err)
	} else {
		resp.Body.Close()
	}
	setup.CloseIdleConnections()

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
	passedRate := limited.c2xx + limited.codes[resilience.CodeConcurrencyLimited]
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
	row("503 "+resilience.CodeRateLimited, free.codes[resilience.CodeRateLimited], limited.codes[resilience.CodeRateLimited])
	row("503 "+resilience.CodeConcurrencyLimited, free.codes[resilience.CodeConcurrencyLimited], limited.codes[resilience.CodeConcurrencyLimited])
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
	row("RSS before / peak / after (MiB)", fmt.Sprintf("%s / %s / %s", mib(rssBase), mib(watch.rss[1]), mib(rssAfter)), "")
	row(fmt.Sprintf("back to baseline after (goroutines <= before, RSS <= before + %d MiB)", rssMarginMiB), recovery(loadRecovered), "")
	row("10 ms ticker late by, at most (unloaded / load)", ms(watch.late[0])+" / "+ms(watch.late[1]), "")
	row("load average before / after", loadBefore, loadAverage())
	tw.Flush()
	fmt.Fprintf(&tab, "\nstraggler flood: %d calls to tests.flaky (ignores its context, TimeoutSeconds %g, no concurrency limit) from %d clients in %v, MaxStragglers %d\n",
		stragglerCalls, stragglerTimeout.Seconds(), stragglerClients, sf.took.Round(time.Millisecond), maxStragglers)
	fmt.Fprintf(&tab, "gRPC stall flood: %d calls to %s that never send their message, on %d connections (MaxConcurrentStreams %d, recv bound %v)\n",
		stallStreams, stallMethod, stallConns, grpcadapter.DefaultBounds().MaxConcurrentStreams, stallRecvBound)
	row("", "straggler flood", "gRPC stall flood")
	row("answered", fmt.Sprintf("%d 504 %s + %d 503 %s", sf.codes[pipeline.CodeTimeout], pipeline.CodeTimeout, sf.codes[kernel.CodeOverloaded], kernel.CodeOverloaded),
		fmt.Sprintf("%d DeadlineExceeded + %d Unavailable (connection closed)", gf.codes[codes.DeadlineExceeded.String()], gf.codes[codes.Unavailable.String()]))
	row("other answers / lost", fmt.Sprintf("%d / %d", sf.other, sf.lost), fmt.Sprintf("%d / %d", gf.other, gf.lost))
	row("handlers held at once, at most", fmt.Sprintf("%d stalled (bound %d + %d clients); kernel stragglers %s", sf.heldPeak, maxStragglers, stragglerClients, sf.kernelStragglers),
		fmt.Sprintf("%d stalled calls (bound %d x %d connections)", gf.heldPeak, grpcadapter.DefaultBounds().MaxConcurrentStreams, stallConns))
	row("server goroutines, at most", "-", fmt.Sprintf("%d (%d before)", gf.serverPeak, gf.serverBefore))
	row("answered after (first / last)", "-", fmt.Sprintf("%v / %v", gf.first.Round(time.Millisecond), gf.last.Round(time.Millisecond)))
	row("goroutines before / peak / after", fmt.Sprintf("%d / %d / %d", sf.goroutinesBefore, sf.peakGoroutines, sf.goroutinesAfter),
		fmt.Sprintf("%d / %d / %d", gf.goroutinesBefore, gf.peakGoroutines, gf.goroutinesAfter))
	row("RSS before / peak / after (MiB)", fmt.Sprintf("%s / %s / %s", mib(sf.rssBefore), mib(sf.peakRSS), mib(sf.rssAfter)),
		fmt.Sprintf("%s / %s / %s", mib(gf.rssBefore), mib(gf.peakRSS), mib(gf.rssAfter)))
	row(fmt.Sprintf("back to baseline after (goroutines <= before, RSS <= before + %d MiB)", rssMarginMiB), recovery(sf.recovered), recovery(gf.recovered))
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
	if got := limited.codes[resilience.CodeRateLimited] + limited.codes[resilience.CodeConcurrencyLimited]; limited.c2xx+got != limited.sent {
		t.Errorf("reports.export: %d 2xx + %d rejections != %d sent; codes %v", limited.c2xx, got, limited.sent, limited.codes)
	}
	if limited.codes[resilience.CodeRateLimited] == 0 || limited.codes[resilience.CodeConcurrencyLimited] == 0 {
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
	if loadRecovered < 0 {
		t.Errorf("not back to the baseline within %v of the load: goroutines %d (before %d), RSS %s MiB (before %s, margin %d)",
			recoverWithin, goroutinesAfter, goroutinesBase, mib(rssAfter), mib(rssBase), rssMarginMiB)
	}
	sf.check(t)
	gf.check(t)
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
// its RSS, and how late a 10 ms ticker fires. A tick late by tens of
// milliseconds means the process got no CPU — on a shared machine, because
// other processes had it — and the latency figures of that phase carry it.
type sampler struct {
	quit, done chan struct{}
	once       sync.Once
	mu         sync.Mutex // guards phase, peak, rss and late
	phase      int        // 0: unloaded, 1: under load, 2: straggler flood, 3: gRPC stall flood
	peak       [4]int
	rss        [4]int64
	late       [4]time.Duration
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
				rss := readRSS()
				s.mu.Lock()
				s.peak[s.phase] = max(s.peak[s.phase], n)
				s.rss[s.phase] = max(s.rss[s.phase], rss)
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

// peaks returns the largest goroutine count and RSS seen so far in phase p.
func (s *sampler) peaks(p int) (goroutines int, rss int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak[p], s.rss[p]
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

// readRSS returns the process's resident set (VmRSS of /proc/self/status)
// in bytes, or 0 when it cannot be read.
func readRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v) // "123456 kB"
			if len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

// settledRSS returns the RSS once the garbage is collected and the free
// memory returned to the OS: what the process holds, not what the Go
// runtime keeps for later.
func settledRSS() int64 {
	debug.FreeOSMemory()
	return readRSS()
}

func mib(b int64) string { return fmt.Sprintf("%.1f", float64(b)/(1<<20)) }

func recovery(d time.Duration) string {
	if d < 0 {
		return fmt.Sprintf("not within %v", recoverWithin)
	}
	return d.Round(time.Millisecond).String()
}

// backToBaseline waits, up to recoverWithin, for the process to run at
// most goroutines goroutines and hold at most rss + rssMarginMiB, and
// returns the goroutine count and RSS it ended at and how long that took
// (-1: it did not get there).
func backToBaseline(goroutines int, rss int64) (int, int64, time.Duration) {
	start := time.Now()
	for {
		n, r := runtime.NumGoroutine(), settledRSS()
		if n <= goroutines && r <= rss+rssMarginMiB<<20 {
			return n, r, time.Since(start)
		}
		if time.Since(start) > recoverWithin {
			return n, r, -1
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stallingHandler serves tests.flaky: in mode "stall" it ignores its
// context and returns only once the test frees it; it counts the calls
// it holds.
type stallingHandler struct {
	release       chan struct{}
	once          sync.Once
	held, maxHeld atomic.Int64
}

func (s *stallingHandler) handle(_ context.Context, in flakyInput) (flakyOutput, error) {
	if in.Mode == "stall" {
		n := s.held.Add(1)
		for m := s.maxHeld.Load(); n > m && !s.maxHeld.CompareAndSwap(m, n); m = s.maxHeld.Load() {
		}
		defer s.held.Add(-1)
		<-s.release
	}
	return flakyOutput{Mode: in.Mode}, nil
}

// free makes the stalled handlers return, and every later one too.
func (s *stallingHandler) free() { s.once.Do(func() { close(s.release) }) }

// flood is what one flood showed.
type flood struct {
	name                                              string
	took                                              time.Duration
	codes                                             map[string]int // outcome code (HTTP) or gRPC status code
	other, lost                                       int            // answers of another kind; calls with no answer
	heldPeak                                          int64          // calls held by the server at once
	kernelStragglers                                  string         // sundial_stragglers at the peak (straggler flood)
	serverBefore, serverPeak                          int            // server goroutines (gRPC stall flood)
	first, last                                       time.Duration  // earliest and latest answer, from the call (gRPC)
	goroutinesBefore, peakGoroutines, goroutinesAfter int
	rssBefore, peakRSS, rssAfter                      int64
	growthLimit                                       int           // bound on peakGoroutines - goroutinesBefore
	recovered                                         time.Duration // -1: not back to the baseline
	problems                                          []string
}

// problem records what the flood got wrong (reported by check).
func (f *flood) problem(format string, args ...any) {
	f.problems = append(f.problems, fmt.Sprintf(f.name+": "+format, args...))
}

// check fails t with the flood's problems, and unless the process came
// back to its baseline.
func (f *flood) check(t *testing.T) {
	t.Helper()
	for _, p := range f.problems {
		t.Error(p)
	}
	if grew := f.peakGoroutines - f.goroutinesBefore; grew > f.growthLimit {
		t.Errorf("%s: goroutines grew by %d (%d → %d), want at most %d", f.name, grew, f.goroutinesBefore, f.peakGoroutines, f.growthLimit)
	}
	if f.recovered < 0 {
		t.Errorf("%s: not back to the baseline within %v: goroutines %d (before %d), RSS %s MiB (before %s, margin %d)",
			f.name, recoverWithin, f.goroutinesAfter, f.goroutinesBefore, mib(f.rssAfter), mib(f.rssBefore), rssMarginMiB)
	}
}

// stragglerFlood sends stragglerCalls calls of tests.flaky in mode
// "stall" from stragglerClients clients, each call after the previous
// one's answer; holds the stalled handlers until every call is answered;
// then frees them and waits for the process to come back to where it was.
func stragglerFlood(t *testing.T, url string, stall *stallingHandler) *flood {
	f := &flood{name: "straggler flood", codes: map[string]int{}}
	runtime.GC()
	f.goroutinesBefore = waitGoroutines(0, 0)
	f.rssBefore = settledRSS()
	var (
		next atomic.Int64
		mu   sync.Mutex // guards f's tallies
		wg   sync.WaitGroup
	)
	start := time.Now()
	for range stragglerClients {
		wg.Go(func() {
			hc := &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
			defer hc.CloseIdleConnections()
			for next.Add(1) <= stragglerCalls {
				req, _ := http.NewRequest("POST", url+"/tests/flaky", strings.NewReader(`{"mode":"stall"}`))
				req.Header.Set("Content-Type", "application/json")
				resp, err := hc.Do(req)
				if err != nil {
					mu.Lock()
					f.lost++
					if f.lost <= 3 {
						f.problem("no answer: %v", err)
					}
					mu.Unlock()
					continue
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				code, problem := checkResponse(resp, body)
				mu.Lock()
				switch {
				case err != nil:
					f.lost++
					f.problem("%d: reading the body: %v", resp.StatusCode, err)
				case problem != "":
					f.other++
					f.problem("%s", problem)
				case resp.StatusCode == http.StatusGatewayTimeout && code == pipeline.CodeTimeout,
					resp.StatusCode == http.StatusServiceUnavailable && code == kernel.CodeOverloaded && resp.Header.Get("Retry-After") != "":
					f.codes[code]++
				default:
					f.other++
					if f.other <= 3 {
						f.problem("answered %d %s (Retry-After %q), want 504 %s or 503 %s with Retry-After",
							resp.StatusCode, code, resp.Header.Get("Retry-After"), pipeline.CodeTimeout, kernel.CodeOverloaded)
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	f.took = time.Since(start)
	// Every call is answered and the stalled handlers still run: the
	// kernel's count, as an operator sees it.
	f.kernelStragglers = metricValue(url, "sundial_stragglers")
	f.heldPeak = stall.maxHeld.Load()
	stall.free()
	f.goroutinesAfter, f.rssAfter, f.recovered = backToBaseline(f.goroutinesBefore, f.rssBefore)

	ran := f.codes[pipeline.CodeTimeout] // each answered at its deadline, its handler stalled
	if f.heldPeak > maxStragglers+stragglerClients {
		f.problem("%d handlers stalled at once, want at most MaxStragglers %d + the %d calls in flight when it was reached",
			f.heldPeak, maxStragglers, stragglerClients)
	}
	if ran < maxStragglers || f.codes[kernel.CodeOverloaded] == 0 {
		f.problem("%d calls timed out and %d were shed: the flood never reached MaxStragglers %d", ran, f.codes[kernel.CodeOverloaded], maxStragglers)
	}
	if n := f.codes[pipeline.CodeTimeout] + f.codes[kernel.CodeOverloaded] + f.other + f.lost; n != stragglerCalls {
		f.problem("%d calls accounted for, want %d", n, stragglerCalls)
	}
	// Unbounded, every call would leave its handler's goroutines behind;
	// bounded, the peak is that of the stragglers and the clients.
	f.growthLimit = stragglerGoroutines * (maxStragglers + stragglerClients)
	if n := stall.held.Load(); n != 0 {
		f.problem("%d handlers still stalled after the release", n)
	}
	return f
}

// stallFlood opens stallStreams calls to stallMethod over stallConns new
// connections, none of which ever sends its request message, and waits
// for their answers (the listener's recv bound), watching the server's
// goroutines; then closes the connections and waits for the process to
// come back to where it was.
func stallFlood(t *testing.T, addr string) *flood {
	f := &flood{name: "gRPC stall flood", codes: map[string]int{}}
	runtime.GC()
	f.goroutinesBefore = waitGoroutines(0, 0)
	f.rssBefore = settledRSS()
	f.serverBefore, _ = serverGoroutines()
	conns := make([]*grpc.ClientConn, stallConns)
	for i := range conns {
		c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
	}
	// No client deadline: the server's own bound is what answers. The
	// calls still open at the end are cancelled (and counted lost).
	ctx, cancel := context.WithTimeout(context.Background(), 4*stallRecvBound)
	defer cancel()
	var (
		mu        sync.Mutex // guards f's tallies
		wg        sync.WaitGroup
		first     = time.Duration(1 << 62)
		answering atomic.Int64
	)
	start := time.Now()
	for i := range stallStreams {
		answering.Add(1)
		wg.Go(func() {
			defer answering.Add(-1)
			s, err := conns[i%stallConns].NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, stallMethod)
			if err == nil {
				err = s.RecvMsg(new(emptypb.Empty)) // never sent a message; the server answers
			}
			took := time.Since(start)
			st := status.Convert(err)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case ctx.Err() != nil:
				f.lost++
			case st.Code() == codes.DeadlineExceeded:
				f.codes[st.Code().String()]++
				first, f.last = min(first, took), max(f.last, took)
			case st.Code() == codes.Unavailable:
				// Its connection was closed by the listener's guard
				// (GOAWAY too_many_stalled_requests).
				f.codes[st.Code().String()]++
				f.last = max(f.last, took)
			default:
				f.other++
				if f.other <= 3 {
					f.problem("answered %v, want DeadlineExceeded or Unavailable", st)
				}
			}
		})
	}
	// The server's goroutines, and the calls it holds, while the streams
	// are open.
	for answering.Load() > 0 && ctx.Err() == nil {
		n, held := serverGoroutines()
		f.serverPeak = max(f.serverPeak, n)
		f.heldPeak = max(f.heldPeak, int64(held))
		time.Sleep(100 * time.Millisecond)
	}
	wg.Wait()
	cancel()
	f.took = time.Since(start)
	f.first = first
	for _, c := range conns {
		c.Close()
	}
	f.goroutinesAfter, f.rssAfter, f.recovered = backToBaseline(f.goroutinesBefore, f.rssBefore)

	bound := int64(grpcadapter.DefaultBounds().MaxConcurrentStreams) * stallConns
	if f.heldPeak > bound {
		f.problem("the server held %d stalled calls at once, want at most %d", f.heldPeak, bound)
	}
	if f.heldPeak < bound/2 {
		f.problem("the server held at most %d stalled calls: the flood never reached the stream bound %d", f.heldPeak, bound)
	}
	// Each call is answered DeadlineExceeded at the recv bound, or ends
	// Unavailable with its connection, which the guard closes once it has
	// stalled 16 calls; every connection stalled its first 16.
	timedOut, closed := f.codes[codes.DeadlineExceeded.String()], f.codes[codes.Unavailable.String()]
	if timedOut+closed != stallStreams || timedOut < 16*stallConns {
		f.problem("%d of %d stalled calls answered DeadlineExceeded and %d Unavailable (%d other, %d cancelled at the end); want all, at least %d DeadlineExceeded",
			timedOut, stallStreams, closed, f.other, f.lost, 16*stallConns)
	}
	if f.first < stallRecvBound {
		f.problem("a stalled call was answered after %v, before the recv bound %v", f.first, stallRecvBound)
	}
	// Per held call: its stream's goroutine and the one waiting for its
	// message; per connection, a few.
	if grew := int64(f.serverPeak - f.serverBefore); grew > 2*bound+10*stallConns {
		f.problem("server goroutines grew by %d (%d → %d), want at most %d", grew, f.serverBefore, f.serverPeak, 2*bound+10*stallConns)
	}
	// Both ends run in this process: the client's goroutines count too
	// (one per call, and its streams), so the process-wide bound is looser.
	f.growthLimit = 4*stallStreams + 2*int(bound)
	return f
}

// serverGoroutines counts the goroutines running grpc-go's server or the
// gRPC adapter (the client's are left out: both run in this process), and
// of them the calls waiting in the adapter for their request message.
func serverGoroutines() (n, waiting int) {
	var b bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
	for g := range strings.SplitSeq(b.String(), "\n\n") {
		if strings.Contains(g, "grpc.(*Server)") || strings.Contains(g, "transport.(*http2Server)") ||
			strings.Contains(g, "grpcadapter.") || strings.Contains(g, "transport.NewServerTransport") {
			n++
		}
		if strings.Contains(g, "grpcadapter.(*method).handle") {
			waiting++
		}
	}
	return n, waiting
}

// The attacks (TestStressAttacks): the shop in a process of its own,
// pinned to one core where the machine has two and taskset is there, the
// attackers in this process, pinned to the other. A healthy client, a
// process of its own beside the shop, reads an order at healthyRate; its
// latency is measured alone, then beside each attack, and beside all of
// them at once.
const (
	healthyRate = 100 // GET /orders/{id} a second
	// attackMeasure is each measurement's length: 2,000 requests, whose
	// p99 is the 20th slowest. With 800, eight requests made the p99, and
	// one host stall moved it by several times between identical runs.
	attackMeasure = 20 * time.Second
	attackWarmUp  = 500 * time.Millisecond
	// attackRecover bounds the wait for the shop's goroutines to come
	// back to where they were before an attack.
	attackRecover = 30 * time.Second
	// goroutineSlack is what go_goroutines may read above its baseline
	// once back: the scrape's own connection, timers firing.
	goroutineSlack = 10

	slowlorisConns = 500
	// The gRPC stall flood: stallFloodConns connections, each holding
	// MaxConcurrentStreams calls that never send their message, each
	// reopened as soon as it ends.
	stallFloodConns = 20
	// The rapid reset: a raw HTTP/2 connection a second, each opening and
	// resetting up to rapidResetStreams streams as fast as it can.
	rapidResetStreams = 100_000
	// The straggler flood: billing.charge (which ignores its context) for
	// stragglerProcess, at stragglerRate a second, each call cut at
	// stragglerDeadlineMs; its ConcurrencyLimit holds the stragglers.
	stragglerRate       = 500
	stragglerDeadlineMs = 200
	stragglerProcess    = 2 * time.Second
	stragglerLimit      = 8
)

// attackConfig leaves orders.get unlimited and holds billing.charge's
// stragglers with a ConcurrencyLimit (its breaker out of the way).
var attackConfig = fmt.Sprintf(`{"Sundial":{"Kernel":{"Resilience":{"PermitLimit":100000000,"Operations":{
	"billing.charge":{"ConcurrencyLimit":%d,"ConcurrencyQueueLimit":0,"FailureThreshold":1000000}}}}}}`, stragglerLimit)

// attackedShop is the shop process under attack.
type attackedShop struct {
	url, grpcAddr string
	harness       string // the test's listener in the shop (harnessEnv)
	pid           int
	pinned        bool
	// Lines of its log (stderr), by kind.
	grpcCalls, grpcCanceled, guardClosed, lines atomic.Int64
}

// startAttackedShop starts `shop serve` as a process (the test binary),
// pinned to CPU 0 with taskset when it can be.
func startAttackedShop(t *testing.T, pin bool) *attackedShop {
	cfg := filepath.Join(t.TempDir(), "attack.json")
	if err := os.WriteFile(cfg, []byte(attackConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{os.Args[0], "serve", "--config", cfg, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--grace", "5s", "--lame-duck", "0"}
	if pin {
		args = append([]string{"taskset", "-c", "0"}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = childEnv(harnessEnv + "=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	// With STRESS_PROFILE, a copy of the shop's log: flushed and closed
	// after the shop has exited and its log been read (cleanups run last
	// registered first).
	var logCopy io.Writer = io.Discard
	if dir := os.Getenv(profileEnv); dir != "" {
		f, err := os.Create(filepath.Join(dir, "shop.log"))
		if err != nil {
			t.Fatal(err)
		}
		w := bufio.NewWriterSize(f, 1<<20)
		t.Cleanup(func() {
			if err := errors.Join(w.Flush(), f.Close()); err != nil {
				t.Errorf("the copy of the shop's log: %v", err)
			}
		})
		logCopy = w
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &attackedShop{pid: cmd.Process.Pid, pinned: pin}
	exited := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintf(logCopy, "%d %s\n", time.Now().UnixNano(), line)
			s.lines.Add(1)
			switch {
			case strings.Contains(line, `"msg":"grpc call"`):
				s.grpcCalls.Add(1)
			case strings.Contains(line, `"msg":"grpc calls canceled by their clients"`):
				s.grpcCanceled.Add(1)
			case strings.Contains(line, "GOAWAY ENHANCE_YOUR_CALM"):
				s.guardClosed.Add(1)
			}
		}
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		harnessClient.CloseIdleConnections()
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("the shop exited with %v after SIGTERM", err)
			}
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Error("the shop did not exit within 15s of SIGTERM")
		}
	})
	sc := bufio.NewScanner(stdout)
	for s.url == "" || s.grpcAddr == "" || s.harness == "" {
		if !sc.Scan() {
			t.Fatalf("the shop printed no addresses: %v", sc.Err())
		}
		if a, ok := strings.CutPrefix(sc.Text(), "shop: serving HTTP on "); ok {
			s.url = a
		}
		if a, ok := strings.CutPrefix(sc.Text(), "shop: serving gRPC on "); ok {
			s.grpcAddr = a
		}
		if a, ok := strings.CutPrefix(sc.Text(), harnessLine); ok {
			s.harness = a
		}
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	return s
}

// cpu returns the CPU time the shop has used so far (/proc/PID/stat).
func (s *attackedShop) cpu() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.pid))
	if err != nil {
		return 0
	}
	// The fields after the command (which may hold spaces): utime and
	// stime are the 12th and 13th, in clock ticks (100 a second).
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// syscalls returns the read and write system calls the shop has made so
// far (/proc/PID/io): a count, where CPU time is noisy on a shared host.
func (s *attackedShop) syscalls() (reads, writes int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", s.pid))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ": ")
		n, _ := strconv.ParseInt(v, 10, 64)
		switch k {
		case "syscr":
			reads = n
		case "syscw":
			writes = n
		}
	}
	return reads, writes
}

// goroutines returns the shop's goroutines, as go_goroutines would (-1:
// unread).
func (s *attackedShop) goroutines() int {
	resp, err := harnessClient.Get(s.harness + "/goroutines")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	n, err := strconv.Atoi(string(b))
	if err != nil {
		return -1
	}
	return n
}

// harnessClient keeps its connections to the shop's harness listener.
var harnessClient = &http.Client{Transport: &http.Transport{}}

// healthy reads the order at healthyRate for d, each request on the
// schedule whatever the others do, and returns the answered requests'
// latencies and starts and the requests that failed.
func healthy(url string, d time.Duration) (r healthyResult) {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	every := time.Second / healthyRate
	start := time.Now()
	for i := range int(d / every) {
		time.Sleep(time.Until(start.Add(time.Duration(i) * every)))
		wg.Go(func() {
			t0 := time.Now()
			resp, err := hc.Get(url + "/orders/ord-1")
			took := time.Since(t0)
			if err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err == nil && resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				r.Failed = append(r.Failed, err.Error())
				return
			}
			r.Latencies = append(r.Latencies, took)
			r.Starts = append(r.Starts, t0.UnixNano())
		})
	}
	wg.Wait()
	return r
}

// healthyEnv makes the test binary the healthy client of
// TestStressAttacks: "URL DURATION". It runs as a process of its own,
// beside the shop on its CPU, so that the attackers' work on theirs
// does not delay it.
const healthyEnv = "SHOP_STRESS_HEALTHY"

// profileEnv names a directory: TestStressAttacks then saves profiles of
// the shop under each attack there: CPU (PHASE.pprof), allocations over
// the window (PHASE.allocs) and the heap at its start (PHASE.heap), and
// the answered healthy requests' starts and latencies (PHASE.healthy),
// each window alone too (PHASE-alone.*). It copies the shop's log there, each line
// after the Unix time it was read at (shop.log).
const profileEnv = "STRESS_PROFILE"

// traceEnv, set with profileEnv, saves an execution trace of the shop in
// each window beside its profiles (PHASE.trace): with
// PHASE.healthy, what the shop ran, or did not, while a slow healthy
// request waited. Tracing costs the shop CPU of its own, so it is off
// for figures.
const traceEnv = "STRESS_TRACE"

// harnessEnv makes the attacked shop serve the test on a listener of its
// own, printed as harnessLine: its goroutines, its profiles and its
// execution trace. A scrape of /metrics instead costs the shop
// milliseconds of CPU, beside the healthy calls.
const (
	harnessEnv  = "SHOP_STRESS_HARNESS"
	harnessLine = "shop: harness on "
)

func init() {
	if os.Getenv(runMainEnv) == "1" && os.Getenv(harnessEnv) != "" {
		serveHarness()
	}
	v := os.Getenv(healthyEnv)
	if v == "" {
		return
	}
	url, ds, _ := strings.Cut(v, " ")
	d, err := time.ParseDuration(ds)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	_ = json.NewEncoder(os.Stdout).Encode(healthy(url, d))
	os.Exit(0)
}

// serveHarness serves the process's goroutine count, its profiles (CPU,
// allocations, heap) and its execution trace on a listener of its own,
// and prints its address first.
func serveHarness() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/profile", httppprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", httppprof.Trace)
	mux.Handle("/debug/pprof/allocs", httppprof.Handler("allocs"))
	mux.Handle("/debug/pprof/heap", httppprof.Handler("heap"))
	mux.HandleFunc("/goroutines", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, runtime.NumGoroutine())
	})
	fmt.Println(harnessLine + "http://" + ln.Addr().String())
	go func() { _ = http.Serve(ln, mux) }()
}

// profile saves the shop's CPU and allocation profiles over d, its heap
// profile now, and with traceEnv its execution trace over d, as name.* in
// dir. The returned done waits for them all, then saves the window's
// healthy requests beside them (name.healthy); it does nothing when there
// is no dir.
func (s *attackedShop) profile(t *testing.T, dir, name string, d time.Duration) (done func(healthyResult)) {
	if dir == "" {
		return func(healthyResult) {}
	}
	kinds := map[string]string{"profile": ".pprof", "allocs": ".allocs", "heap": ".heap"}
	if os.Getenv(traceEnv) != "" {
		kinds["trace"] = ".trace"
	}
	var wg sync.WaitGroup
	for kind, ext := range kinds {
		wg.Go(func() {
			u := fmt.Sprintf("%s/debug/pprof/%s?seconds=%d", s.harness, kind, int(d.Seconds()))
			if kind == "heap" {
				u = s.harness + "/debug/pprof/heap" // as of the last collection
			}
			resp, err := harnessClient.Get(u)
			if err != nil {
				t.Logf("%s %s: %v", kind, name, err)
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err == nil {
				err = os.WriteFile(filepath.Join(dir, name+ext), b, 0o644)
			}
			if err != nil {
				t.Logf("%s %s: %v", kind, name, err)
			}
		})
	}
	return func(r healthyResult) {
		wg.Wait()
		saveHealthy(t, filepath.Join(dir, name+".healthy"), r)
	}
}

// saveHealthy writes r as lines of "start latency" in nanoseconds, the
// start Unix time: it finds the slowest requests in the shop's trace of
// the window, or in a system profile (perf) of the shop's CPU.
func saveHealthy(t *testing.T, path string, r healthyResult) {
	var b bytes.Buffer
	for i, d := range r.Latencies {
		fmt.Fprintf(&b, "%d %d\n", r.Starts[i], d.Nanoseconds())
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Logf("the healthy requests: %v", err)
	}
}

type healthyResult struct {
	Latencies []time.Duration
	Starts    []int64 // each answered request's start (Unix ns), in Latencies' order
	Failed    []string
}

// healthyProcess runs the healthy client for d as a process, pinned to
// CPU 0 beside the shop when pin is set.
func healthyProcess(t *testing.T, url string, d time.Duration, pin bool) healthyResult {
	args := []string{os.Args[0]}
	if pin {
		args = append([]string{"taskset", "-c", "0"}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), healthyEnv+"="+url+" "+d.String())
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the healthy client: %v", err)
	}
	var r healthyResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("the healthy client's figures: %v", err)
	}
	return r
}

// attackStats is what an attacker counted.
type attackStats struct {
	name                 string
	reset                bool // the rapid reset
	opened, ended, conns atomic.Int64
	goAways              atomic.Int64
	firstGoAway          atomic.Int64  // ns from the first connection's start to its GOAWAY; 0: none
	streamsBefore        atomic.Int64  // resets the first connection sent before its GOAWAY
	done                 chan struct{} // closed when the attacker has returned
}

// slowloris holds slowlorisConns HTTP connections that send a header a
// byte a second and never finish; each is reopened once the server closes
// it.
func slowloris(ctx context.Context, url string, st *attackStats) {
	addr := strings.TrimPrefix(url, "http://")
	var wg sync.WaitGroup
	for range slowlorisConns {
		wg.Go(func() {
			for ctx.Err() == nil {
				c, err := net.DialTimeout("tcp", addr, time.Second)
				if err != nil {
					sleepCtx(ctx, 100*time.Millisecond)
					continue
				}
				st.conns.Add(1)
				stop := context.AfterFunc(ctx, func() { c.Close() })
				_, err = io.WriteString(c, "GET /orders/ord-1 HTTP/1.1\r\nHost: shop\r\nX-Slow: ")
				for err == nil && ctx.Err() == nil {
					sleepCtx(ctx, time.Second)
					_, err = c.Write([]byte("a"))
				}
				stop()
				c.Close()
				st.ended.Add(1)
				sleepCtx(ctx, 100*time.Millisecond)
			}
		})
	}
	wg.Wait()
}

// stallFloodAttack holds MaxConcurrentStreams stalled calls on each of
// stallFloodConns connections, reopening each call as soon as it ends.
func stallFloodAttack(ctx context.Context, addr string, st *attackStats) {
	var wg sync.WaitGroup
	per := int(grpcadapter.DefaultBounds().MaxConcurrentStreams)
	for range stallFloodConns {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return
		}
		st.conns.Add(1)
		for range per {
			wg.Go(func() {
				for ctx.Err() == nil {
					s, err := cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, stallMethod)
					if err != nil {
						sleepCtx(ctx, 10*time.Millisecond) // the connection is being replaced
						continue
					}
					st.opened.Add(1)
					_ = s.RecvMsg(new(emptypb.Empty)) // never sent a message; the server ends it
					st.ended.Add(1)
				}
			})
		}
		defer cc.Close()
	}
	wg.Wait()
}

// rapidReset opens a raw HTTP/2 connection a second; each opens and
// resets up to rapidResetStreams streams as fast as it writes, until the
// server closes it.
func rapidReset(ctx context.Context, addr string, st *attackStats) {
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range []hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: stallMethod}, {Name: ":authority", Value: addr},
		{Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
	} {
		_ = enc.WriteField(f)
	}
	block := hb.Bytes()
	first := true
	for ctx.Err() == nil {
		start := time.Now()
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			sleepCtx(ctx, time.Second)
			continue
		}
		st.conns.Add(1)
		stop := context.AfterFunc(ctx, func() { c.Close() })
		bw := bufio.NewWriterSize(c, 64<<10)
		fr := http2.NewFramer(bw, c)
		goAway := make(chan struct{})
		go func() {
			defer close(goAway)
			for {
				f, err := fr.ReadFrame()
				if err != nil {
					return
				}
				if _, ok := f.(*http2.GoAwayFrame); ok {
					st.goAways.Add(1)
					return
				}
			}
		}()
		_, err = bw.WriteString(http2.ClientPreface)
		if err == nil {
			err = fr.WriteSettings()
		}
		sent := 0
		for i := 0; i < rapidResetStreams && err == nil; i++ {
			id := uint32(2*i + 1)
			if err = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndHeaders: true}); err == nil {
				err = fr.WriteRSTStream(id, http2.ErrCodeCancel)
			}
			sent++
			if sent%128 == 0 {
				if err == nil {
					err = bw.Flush()
				}
				select {
				case <-goAway:
					err = io.EOF
				default:
				}
			}
		}
		_ = bw.Flush()
		<-goAway
		if first {
			st.firstGoAway.Store(int64(time.Since(start)))
			st.streamsBefore.Store(int64(sent))
			first = false
		}
		st.opened.Add(int64(sent))
		stop()
		c.Close()
		sleepCtx(ctx, time.Until(start.Add(time.Second)))
	}
}

// stragglerAttack calls billing.charge at stragglerRate, each cut at
// stragglerDeadlineMs while its handler runs on for stragglerProcess.
func stragglerAttack(ctx context.Context, url string, st *attackStats) {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	body := fmt.Sprintf(`{"amount":1,"processMs":%d}`, stragglerProcess.Milliseconds())
	inFlight := make(chan struct{}, 256)
	var wg sync.WaitGroup
	tk := time.NewTicker(time.Second / stragglerRate)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case <-tk.C:
		}
		select {
		case inFlight <- struct{}{}:
		default:
			continue // as many in flight as the attacker holds
		}
		wg.Go(func() {
			defer func() { <-inFlight }()
			req, _ := http.NewRequest("POST", url+"/billing/charge", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set(httpadapter.DefaultRelativeDeadlineHeader, strconv.Itoa(stragglerDeadlineMs))
			st.opened.Add(1)
			if resp, err := hc.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				st.ended.Add(1)
			}
		})
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// pinSelf pins every thread of this process to CPU 1, and reports whether
// it could; undo restores the CPUs it had.
func pinSelf(t *testing.T) (ok bool, undo func()) {
	if runtime.NumCPU() < 2 {
		t.Logf("one CPU: the shop and the attackers share it")
		return false, func() {}
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		t.Logf("no taskset: the shop and the attackers share the CPUs")
		return false, func() {}
	}
	pid := strconv.Itoa(os.Getpid())
	if out, err := exec.Command("taskset", "-a", "-p", "-c", "1", pid).CombinedOutput(); err != nil {
		t.Logf("taskset could not pin the attackers (%v: %s): the shop and the attackers share the CPUs", err, out)
		return false, func() {}
	}
	all := fmt.Sprintf("0-%d", runtime.NumCPU()-1)
	return true, func() { _ = exec.Command("taskset", "-a", "-p", "-c", all, pid).Run() }
}

// attackPhase is one row of TestStressAttacks' table: an attack in one
// round.
type attackPhase struct {
	name                   string
	key                    string // the attack's short name: files, the summary
	round                  int
	alone, under           []time.Duration
	failed                 []string
	cpuAlone, cpu          time.Duration // the shop's, while the healthy client measured
	reads, writes          int64         // the shop's system calls while attacked
	grpcCalls, canceled    int64         // gRPC log records while attacked
	guardClosed, lines     int64
	goroutinesBefore, peak int
	goroutinesAfter        int
	recovered              time.Duration // -1: not within attackRecover
	stats                  []*attackStats
	control                bool // no attack: the attackers' CPU busy alone
}

// ratio returns the phase's p99 under attack over its p99 alone.
func (p *attackPhase) ratio() float64 {
	return float64(percentile(p.under, 0.99)) / float64(percentile(p.alone, 0.99))
}

// stressRounds returns STRESS_ROUNDS: how many times each attack is
// measured, alone then under, in turn (1 if unset).
func stressRounds(t *testing.T) int {
	v := os.Getenv("STRESS_ROUNDS")
	if v == "" {
		return 1
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("STRESS_ROUNDS=%q, want a positive number", v)
	}
	return n
}

// median returns the middle of x, the upper of the two middle values
// when there is an even number: never below the lower half.
func median(x []float64) float64 {
	s := slices.Clone(x)
	slices.Sort(s)
	return s[len(s)/2]
}

// spin keeps every CPU of the process busy until ctx ends, with no
// traffic.
func spin(ctx context.Context) {
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for n := 0; ctx.Err() == nil; n++ {
				for range 1 << 16 {
					n ^= n << 1
				}
			}
		})
	}
	wg.Wait()
}

// TestStressAttacks measures a healthy client's latency beside each
// attack, the combined attack (slowloris, the stall flood and the
// straggler flood at once) and all four at once, after a control that
// only keeps the attackers' CPU busy. STRESS_ATTACKS=stall,reset runs
// only the attacks whose names hold one of the words; the words
// "combined" and "all" run those together. STRESS_ROUNDS=N measures each attack
// N times, alone then under it in turn.
//
// It asserts p99 under every attack at most twice its p99 alone (measured
// just before; with rounds, the median of the rounds' ratios), every
// healthy request answered 200, and the shop's goroutines back to where
// they were within attackRecover. The rapid reset's first connection gets
// GOAWAY within a second.
func TestStressAttacks(t *testing.T) {
	rounds := stressRounds(t)
	profDir := os.Getenv(profileEnv)
	if profDir != "" {
		if err := os.MkdirAll(profDir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	pinned, undo := pinSelf(t)
	defer undo()
	s := startAttackedShop(t, pinned)
	setup := &http.Client{Transport: &http.Transport{}}
	resp, err := setup.Post(s.url+"/orders", "application/json", strings.NewReader(`{"name":"widget","amount":1}`))
	if err != nil || resp.StatusCode != 201 {
		t.Fatalf("POST /orders = %v, %v; want 201", resp, err)
	}
	resp.Body.Close()
	setup.CloseIdleConnections()
	_ = healthyProcess(t, s.url, time.Second, pinned) // warm up

	type attack struct {
		name, key string
		run       func(ctx context.Context, st *attackStats)
		reset     bool // the rapid reset: its first connection gets GOAWAY within a second
	}
	// The control is no attack: the attackers' CPU busy with no traffic.
	// It measures what load on that CPU alone does to the healthy tail.
	control := attack{"control: the attackers' CPU busy, no traffic", "control",
		func(ctx context.Context, _ *attackStats) { spin(ctx) }, false}
	one := []attack{
		{fmt.Sprintf("%d slowloris connections", slowlorisConns), "slowloris",
			func(ctx context.Context, st *attackStats) { slowloris(ctx, s.url, st) }, false},
		{fmt.Sprintf("gRPC stall flood (%d conns x %d streams)", stallFloodConns, grpcadapter.DefaultBounds().MaxConcurrentStreams), "stall",
			func(ctx context.Context, st *attackStats) { stallFloodAttack(ctx, s.grpcAddr, st) }, false},
		{fmt.Sprintf("rapid reset (1 conn/s, up to %d streams each)", rapidResetStreams), "reset",
			func(ctx context.Context, st *attackStats) { rapidReset(ctx, s.grpcAddr, st) }, true},
		{fmt.Sprintf("straggler flood (%d/s, ConcurrencyLimit %d)", stragglerRate, stragglerLimit), "straggler",
			func(ctx context.Context, st *attackStats) { stragglerAttack(ctx, s.url, st) }, false},
	}
	// The combined attack: slowloris, the stall flood and the straggler
	// flood at once. Then all four, the rapid reset too.
	type together struct {
		name, key string
		attacks   []attack
	}
	byKey := func(keys ...string) []attack {
		var as []attack
		for _, a := range one {
			if slices.Contains(keys, a.key) {
				as = append(as, a)
			}
		}
		return as
	}
	combined := together{"combined: slowloris, stall flood, straggler flood", "combined",
		byKey("slowloris", "stall", "straggler")}
	all := together{"all four at once", "all", one}
	var attacks []together
	only := os.Getenv("STRESS_ATTACKS") // a comma-separated list of words of attack names; empty: all
	chosen := func(name string) bool {
		return only == "" || slices.ContainsFunc(strings.Split(only, ","), func(w string) bool {
			return w != combined.key && w != all.key && strings.Contains(name, w) // "stall" holds "all"
		})
	}
	for _, a := range append([]attack{control}, one...) {
		if chosen(a.name) {
			attacks = append(attacks, together{a.name, a.key, []attack{a}})
		}
	}
	for _, tg := range []together{combined, all} {
		if only == "" || slices.Contains(strings.Split(only, ","), tg.key) {
			attacks = append(attacks, tg)
		}
	}

	var phases []*attackPhase
	for _, tg := range attacks {
		a := tg.attacks
		for round := 1; round <= rounds; round++ {
			p := &attackPhase{name: tg.name, key: tg.key, round: round, control: tg.key == control.key}
			phases = append(phases, p)
			runAttackPhase(t, s, p, profDir, pinned, func(ctx context.Context) []*attackStats {
				var sts []*attackStats
				for _, at := range a {
					st := &attackStats{name: at.name, reset: at.reset, done: make(chan struct{})}
					sts = append(sts, st)
					go func() {
						defer close(st.done)
						at.run(ctx, st)
					}()
				}
				return sts
			})
		}
	}
	t.Log("\n" + attackTable(phases, rounds, pinned))

	// The assertions.
	for _, p := range phases {
		for _, f := range p.failed[:min(len(p.failed), 3)] {
			t.Errorf("%s: a healthy request failed: %s", p.name, f)
		}
		if len(p.failed) > 3 {
			t.Errorf("%s: %d healthy requests failed in all", p.name, len(p.failed))
		}
		if p.recovered < 0 {
			t.Errorf("%s: the shop's goroutines %d, not back to %d (+%d) within %v", p.name, p.goroutinesAfter, p.goroutinesBefore, goroutineSlack, attackRecover)
		}
		for _, st := range p.stats {
			if d := time.Duration(st.firstGoAway.Load()); st.reset && (d <= 0 || d > time.Second || st.goAways.Load() == 0) {
				t.Errorf("%s: the rapid reset's first connection ended after %v with %d GOAWAYs read, want GOAWAY within 1s", p.name, d, st.goAways.Load())
			}
		}
	}
	for _, g := range groupPhases(phases) {
		p := g[0]
		if p.control {
			continue
		}
		if rounds == 1 {
			a99, u99 := percentile(p.alone, 0.99), percentile(p.under, 0.99)
			if u99 > 2*a99 {
				t.Errorf("%s: healthy p99 %v, want at most twice its p99 alone %v", p.name, u99, a99)
			}
			continue
		}
		if m := median(ratios(g)); m > 2 {
			t.Errorf("%s: healthy p99 under attack %.2fx its p99 alone (the median of %d rounds), want at most 2x", p.name, m, rounds)
		}
	}
}

// runAttackPhase measures p: the healthy client alone, then beside the
// attack start begins (whose attackers end with ctx), then the shop's
// return to its goroutines from before.
func runAttackPhase(t *testing.T, s *attackedShop, p *attackPhase, profDir string, pinned bool,
	start func(ctx context.Context) []*attackStats) {
	p.goroutinesBefore = s.goroutines()
	profiled := s.profile(t, profDir, fmt.Sprintf("%s-r%d-alone", p.key, p.round), attackMeasure)
	cpu0 := s.cpu()
	alone := healthyProcess(t, s.url, attackMeasure, pinned)
	p.alone = alone.Latencies
	p.cpuAlone = s.cpu() - cpu0
	p.failed = append(p.failed, alone.Failed...)
	profiled(alone)

	ctx, cancel := context.WithCancel(context.Background())
	p.stats = start(ctx)
	peakDone := make(chan struct{})
	go func() { // the shop's goroutines while attacked
		defer close(peakDone)
		for ctx.Err() == nil {
			p.peak = max(p.peak, s.goroutines())
			sleepCtx(ctx, 500*time.Millisecond)
		}
	}()
	time.Sleep(attackWarmUp)
	profiled = s.profile(t, profDir, fmt.Sprintf("%s-r%d", p.key, p.round), attackMeasure)
	cpu0 = s.cpu()
	reads0, writes0 := s.syscalls()
	calls0, canceled0, closed0, lines0 := s.grpcCalls.Load(), s.grpcCanceled.Load(), s.guardClosed.Load(), s.lines.Load()
	under := healthyProcess(t, s.url, attackMeasure, pinned)
	p.under = under.Latencies
	p.failed = append(p.failed, under.Failed...)
	p.cpu = s.cpu() - cpu0
	reads1, writes1 := s.syscalls()
	p.reads, p.writes = reads1-reads0, writes1-writes0
	p.grpcCalls, p.canceled = s.grpcCalls.Load()-calls0, s.grpcCanceled.Load()-canceled0
	p.guardClosed, p.lines = s.guardClosed.Load()-closed0, s.lines.Load()-lines0
	profiled(under)
	cancel()
	<-peakDone
	for _, st := range p.stats {
		<-st.done
	}

	began := time.Now()
	p.recovered = -1
	for time.Since(began) < attackRecover {
		if p.goroutinesAfter = s.goroutines(); p.goroutinesAfter >= 0 && p.goroutinesAfter <= p.goroutinesBefore+goroutineSlack {
			p.recovered = time.Since(began)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// groupPhases returns the phases of each attack together, in order.
func groupPhases(phases []*attackPhase) [][]*attackPhase {
	var g [][]*attackPhase
	for i, p := range phases {
		if i == 0 || phases[i-1].key != p.key {
			g = append(g, nil)
		}
		g[len(g)-1] = append(g[len(g)-1], p)
	}
	return g
}

// ratios returns the p99 ratio of each phase of g.
func ratios(g []*attackPhase) []float64 {
	r := make([]float64, len(g))
	for i, p := range g {
		r[i] = p.ratio()
	}
	return r
}

// attackTable prints TestStressAttacks' figures: a row a phase, then, per
// attack, its ratios over the rounds and against the run's pooled p99
// alone.
func attackTable(phases []*attackPhase, rounds int, pinned bool) string {
	var tab bytes.Buffer
	where := "the shop and the healthy client (a process of its own) pinned to CPU 0, the attackers to CPU 1 (taskset)"
	if !pinned {
		where = "the shop, the attackers and the healthy client sharing the CPUs (no taskset pinning)"
	}
	fmt.Fprintf(&tab, "healthy GET /orders/{id} at %d/s for %v alone, then %v beside each attack, %d round(s); %s; %d CPUs, load average %s\n",
		healthyRate, attackMeasure, attackMeasure, rounds, where, runtime.NumCPU(), loadAverage())
	tw := tabwriter.NewWriter(&tab, 0, 0, 2, ' ', tabwriter.AlignRight)
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d.Microseconds())/1000) }
	fmt.Fprintln(tw, "attack\tround\tp50 alone\tp99 alone\tp50 under\tp99 under\tp99 ratio\tfailed\tshop CPU alone\tshop CPU under\treads/writes under\tlog lines under\tgRPC log lines\tguard GOAWAYs\tgoroutines before/peak/after\tback after\t")
	var pooled []time.Duration
	for _, p := range phases {
		pooled = append(pooled, p.alone...)
		fmt.Fprintf(tw, "%s\t%d\t%s ms\t%s ms\t%s ms\t%s ms\t%.2fx\t%d\t%.2f s\t%.2f s\t%d/%d\t%d\t%d calls + %d summaries\t%d\t%d/%d/%d\t%s\t\n",
			p.name, p.round, ms(percentile(p.alone, 0.5)), ms(percentile(p.alone, 0.99)), ms(percentile(p.under, 0.5)),
			ms(percentile(p.under, 0.99)), p.ratio(), len(p.failed), p.cpuAlone.Seconds(), p.cpu.Seconds(),
			p.reads, p.writes, p.lines, p.grpcCalls, p.canceled, p.guardClosed, p.goroutinesBefore, p.peak, p.goroutinesAfter, recoveryIn(p.recovered))
	}
	tw.Flush()
	pooled99 := percentile(pooled, 0.99)
	fmt.Fprintf(&tab, "\npooled p99 alone (all %d alone windows): %s ms\n", len(phases), ms(pooled99))
	tw = tabwriter.NewWriter(&tab, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "attack\trounds\tmedian p99 ratio\trange\tp99 under (pooled) / pooled p99 alone\tshop CPU under (median)\t")
	for _, g := range groupPhases(phases) {
		r := ratios(g)
		var under []time.Duration
		cpu := make([]float64, len(g))
		for i, p := range g {
			under = append(under, p.under...)
			cpu[i] = p.cpu.Seconds()
		}
		fmt.Fprintf(tw, "%s\t%d\t%.2fx\t%.2f-%.2fx\t%.2fx\t%.2f s\t\n", g[0].name, len(g), median(r), slices.Min(r), slices.Max(r),
			float64(percentile(under, 0.99))/float64(pooled99), median(cpu))
	}
	tw.Flush()
	for _, p := range phases {
		for _, st := range p.stats {
			fmt.Fprintf(&tab, "%s (round %d) / %s: %d connections, %d streams or requests opened, %d ended, %d GOAWAYs read", p.name, p.round, st.name,
				st.conns.Load(), st.opened.Load(), st.ended.Load(), st.goAways.Load())
			if d := st.firstGoAway.Load(); d > 0 {
				fmt.Fprintf(&tab, "; first connection: GOAWAY after %v, %d resets sent", time.Duration(d).Round(time.Millisecond), st.streamsBefore.Load())
			}
			fmt.Fprintln(&tab)
		}
	}
	return tab.String()
}

func recoveryIn(d time.Duration) string {
	if d < 0 {
		return fmt.Sprintf("not within %v", attackRecover)
	}
	return d.Round(time.Millisecond).String()
}
