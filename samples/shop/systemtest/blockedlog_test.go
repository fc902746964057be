package systemtest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sundial-go/sundial/samples/shop/internal/asynclog"
)

// metricValue returns the value of the first sample of metric on the
// shop's /metrics, or "?".
func metricValue(url, metric string) string {
	hc := &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections() // no connection left to count against the baseline
	resp, err := hc.Get(url + "/metrics")
	if err != nil {
		return "?"
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for line := range strings.Lines(string(b)) {
		if name, rest, ok := strings.Cut(line, " "); ok && (name == metric || strings.HasPrefix(name, metric+"{")) {
			return strings.TrimSpace(rest)
		}
	}
	return "?"
}

// TestShopServesWithStderrBlocked runs the shop as a process (the test
// binary as `shop serve`) whose stderr is a pipe nobody reads. Before the
// access log went through asynclog, the server froze once the pipe was
// full — after 256 requests, /healthz and the 504 at a deadline included.
// Now blockedLogRequests calls, /healthz and reports.export cut at a 20 ms
// deadline, are all answered while the pipe stays full; the
// records that did not fit are counted on /metrics
// (sundial_log_dropped_total); once someone reads the pipe, the log says
// how many were dropped, the same count, and SIGTERM ends the shop cleanly.
func TestShopServesWithStderrBlocked(t *testing.T) {
	const (
		// More than the asynclog queue (4,096 records, one access-log
		// record a request) plus what the pipe holds (64 KiB).
		blockedLogRequests = 6000
		clients            = 16
		timeoutEvery       = 5 // one call in 5 is a 504, the rest /healthz
		deadlineMs         = 20
		answerWithin       = 2 * time.Second // a call whose answer waited on the log would take forever
	)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "shop.json")
	// reports.export without limits: every call runs and is cut at its deadline.
	config := `{"Sundial":{"Kernel":{"Resilience":{"PermitLimit":100000000,"Operations":{
		"reports.export":{"PermitLimit":100000000,"WindowSeconds":1,"ConcurrencyLimit":100000}}}}}}`
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	cmd := exec.Command(os.Args[0], "serve", "--config", cfg, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--grace", "5s", "--lame-duck", "0")
	cmd.Env = childEnv()
	cmd.Stderr = pw // a pipe nobody reads, for now
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close() // the child holds the write end
	exited := make(chan error, 1)
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-exited
		}
	})
	br := bufio.NewReader(out)
	var url string
	for url == "" {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("shop printed no HTTP address: %v", err)
		}
		if a, ok := strings.CutPrefix(line, "shop: serving HTTP on "); ok {
			url = strings.TrimSpace(a)
		}
	}
	go func() {
		io.Copy(io.Discard, br)
		exited <- cmd.Wait()
	}()

	// The load: each client sends /healthz and, one call in timeoutEvery,
	// reports.export cut at its deadline, one after the other.
	type call struct {
		healthz bool
		status  int
		took    time.Duration
		err     error
	}
	calls := make([]call, blockedLogRequests)
	var wg sync.WaitGroup
	start := time.Now()
	for c := range clients {
		wg.Go(func() {
			hc := &http.Client{Transport: &http.Transport{}, Timeout: 2 * answerWithin}
			defer hc.CloseIdleConnections()
			for i := c; i < blockedLogRequests; i += clients {
				var req *http.Request
				healthz := i%timeoutEvery != 0
				if healthz {
					req, _ = http.NewRequest("GET", url+"/healthz", nil)
				} else {
					req, _ = http.NewRequest("POST", url+"/reports/export", strings.NewReader(`{"delayMs":1000}`))
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("Sundial-Timeout-Ms", strconv.Itoa(deadlineMs))
				}
				t0 := time.Now()
				resp, err := hc.Do(req)
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				calls[i] = call{healthz: healthz, took: time.Since(t0), err: err}
				if resp != nil {
					calls[i].status = resp.StatusCode
				}
				if err != nil {
					return // the server stopped answering: one failure is enough
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	var healthz, timeouts []time.Duration
	for i, c := range calls {
		want := http.StatusGatewayTimeout
		if c.healthz {
			want = http.StatusOK
		}
		if c.err != nil || c.status != want { // status 0, no error: never sent after an earlier failure
			t.Fatalf("call %d (healthz %v) = %d, %v after %v; want %d", i, c.healthz, c.status, c.err, c.took, want)
		}
		if c.healthz {
			healthz = append(healthz, c.took)
		} else {
			timeouts = append(timeouts, c.took)
		}
	}
	droppedMetric := strings.ReplaceAll(asynclog.MetricDropped, ".", "_") + "_total" // sundial_log_dropped_total
	dropped, err := strconv.ParseFloat(metricValue(url, droppedMetric), 64)
	if err != nil || dropped <= 0 {
		t.Fatalf("%s with stderr blocked = %q, want a positive count", droppedMetric, metricValue(url, droppedMetric))
	}
	q := func(d []time.Duration) string {
		slices.Sort(d)
		return fmt.Sprintf("p50 %v, p99 %v, max %v", d[len(d)/2].Round(10*time.Microsecond),
			d[len(d)*99/100].Round(10*time.Microsecond), d[len(d)-1].Round(10*time.Microsecond))
	}
	t.Logf("stderr blocked: %d requests from %d clients answered in %v: %d /healthz 200 (%s), %d reports.export 504 at %d ms (%s); %s %g",
		blockedLogRequests, clients, took.Round(time.Millisecond), len(healthz), q(healthz), len(timeouts), deadlineMs, q(timeouts), droppedMetric, dropped)
	for _, d := range [][]time.Duration{healthz, timeouts} {
		if worst := d[len(d)-1]; worst > answerWithin {
			t.Errorf("slowest answer took %v with stderr blocked, want within %v", worst, answerWithin)
		}
	}

	// Someone reads the pipe: the queued records come out, then the drop
	// report, whose count is the metric's.
	logs := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(pr) // until the shop exits
		logs <- string(b)
	}()
	reported := func() float64 {
		v, _ := strconv.ParseFloat(metricValue(url, droppedMetric), 64)
		return v
	}
	// Wait for the writer to drain (no more drops then): the metric stops
	// moving; the report itself is checked once the shop exited.
	final := reported()
	for deadline := time.Now().Add(10 * time.Second); ; {
		time.Sleep(100 * time.Millisecond)
		v := reported()
		if v == final {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still moving after 10 s of reading the pipe: %g", droppedMetric, v)
		}
		final = v
	}
	signalled := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("shop exited with %v after SIGTERM, want 0", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("shop still running 10 s after SIGTERM")
	}
	stopped := time.Since(signalled)
	var sum uint64
	reports := 0
	for line := range strings.Lines(<-logs) {
		var rec struct {
			Msg     string `json:"msg"`
			Dropped uint64 `json:"dropped"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && strings.HasPrefix(rec.Msg, "asynclog: dropped ") {
			sum += rec.Dropped
			reports++
		}
	}
	t.Logf("after reading the pipe: %d drop report(s) in the log, %d records in all; %s %g; exit 0 %v after SIGTERM",
		reports, sum, droppedMetric, final, stopped.Round(time.Millisecond))
	if reports == 0 || float64(sum) != final {
		t.Errorf("the log reports %d dropped records in %d report(s), want the metric's %g", sum, reports, final)
	}
}
