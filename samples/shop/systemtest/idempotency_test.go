package systemtest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience/cluster/redistest"
	"github.com/sundial-go/sundial/resilience/idempotency"
	"github.com/sundial-go/sundial/samples/shop/internal/shopcmd"
)

// startCountedShop starts a shop whose billing.charge calls are watched:
// its handler's starts (started) come after the idempotency middleware,
// so a replay or a 409 never counts.
func startCountedShop(t *testing.T) (*grpcShop, *handlerStarts) {
	c := newHandlerStarts("billing.charge")
	g := startShopGRPC(t, shopcmd.ServeOptions{KernelOptions: c.options()})
	return g, c
}

// chargeAfter is how long the story's charge runs past its caller's
// deadline: the retry made at once must find it running, whatever the
// scheduler does meanwhile.
const chargeAfter = 2 * time.Second

// chargeOnce is the story's first call: a charge taking d + chargeAfter
// under a caller's deadline d, answered at the deadline while it runs. call makes
// it with a key and d and reports whether it was answered as timed out.
// When the deadline passed before the handler started (c tells), nothing
// ran: the story starts over with another key and ten times d, three
// tries in all. It returns the key whose charge runs.
func chargeOnce(t *testing.T, c *handlerStarts, key string, call func(key string, d time.Duration) bool) string {
	t.Helper()
	d := 100 * time.Millisecond
	for try := 1; ; try++ {
		mark := c.mark()
		if !call(key, d) {
			t.Fatalf("first call (deadline %v): want it answered at its deadline", d)
		}
		if c.ran(t, mark) {
			return key
		}
		if try == 3 {
			t.Fatalf("the charge's handler did not start before its deadline in 3 tries (the last %v)", d)
		}
		t.Logf("the %v deadline passed before the charge started: once more, with another key", d)
		key, d = key+"-again", 10*d
	}
}

// untilNot409 repeats f until its answer is not the 409 of a running key,
// bounded (60 s): the charge returns chargeAfter after the first call's
// answer.
func untilNot409(t *testing.T, f func() bool) {
	t.Helper()
	for end := time.Now().Add(60 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if !f() {
			return
		}
	}
	t.Fatal("the key stayed running")
}

// TestShopChargeRetryAfterTimeoutHTTP: the 504-then-retry story over HTTP.
// The caller's 100 ms deadline fires while billing.charge runs (2.1 s);
// the retry with the same Idempotency-Key gets 409 with Retry-After while
// it runs, then the real receipt with the same charge ID, marked
// Idempotent-Replayed; the handler ran once.
func TestShopChargeRetryAfterTimeoutHTTP(t *testing.T) {
	g, c := startCountedShop(t)
	var body string
	var r shopResponse
	key := chargeOnce(t, c, "order-42-charge", func(key string, d time.Duration) bool {
		body = fmt.Sprintf(`{"amount":7,"processMs":%d}`, (d + chargeAfter).Milliseconds())
		r = g.shopServer.call(t, "POST", "/billing/charge", body, map[string]string{
			"Idempotency-Key": `"` + key + `"`, "Sundial-Timeout-Ms": strconv.FormatInt(d.Milliseconds(), 10)})
		if r.status != http.StatusGatewayTimeout {
			t.Logf("first call: %d %s, want 504", r.status, r.body)
		}
		return r.status == http.StatusGatewayTimeout
	})
	h := map[string]string{"Idempotency-Key": `"` + key + `"`}
	r = g.shopServer.call(t, "POST", "/billing/charge", body, h)
	if r.status != http.StatusConflict || r.header.Get("Retry-After") != "1" || r.problem["code"] != idempotency.CodeInProgress {
		t.Fatalf("retry while running: %d %v %s, want 409 KERNEL_CONFLICT_001 with Retry-After 1", r.status, r.header, r.body)
	}
	untilNot409(t, func() bool {
		r = g.shopServer.call(t, "POST", "/billing/charge", body, h)
		return r.status == http.StatusConflict
	})
	var rc struct {
		ChargeID string `json:"chargeId"`
		Charged  bool   `json:"charged"`
	}
	if err := json.Unmarshal([]byte(r.body), &rc); err != nil || r.status != http.StatusOK || !rc.Charged || rc.ChargeID == "" ||
		r.header.Get(idempotency.FieldReplayed) != "true" {
		t.Fatalf("retry after: %d %v %s, want the receipt, replayed", r.status, r.header, r.body)
	}
	first := rc.ChargeID
	r = g.shopServer.call(t, "POST", "/billing/charge", body, h)
	_ = json.Unmarshal([]byte(r.body), &rc)
	if rc.ChargeID != first || c.started.Load() != 1 {
		t.Fatalf("charge IDs %s then %s, %d executions; want one charge", first, rc.ChargeID, c.started.Load())
	}
	// The same key with another amount: 422.
	r = g.shopServer.call(t, "POST", "/billing/charge", `{"amount":8}`, h)
	if r.status != http.StatusUnprocessableEntity || r.problem["code"] != idempotency.CodeMismatch {
		t.Fatalf("other body: %d %s, want 422", r.status, r.body)
	}
}

// TestShopChargeRetryAfterTimeoutGRPC: the same story over gRPC, with the
// idempotency-key metadata.
func TestShopChargeRetryAfterTimeoutGRPC(t *testing.T) {
	g, c := startCountedShop(t)
	md := metadata.Pairs("idempotency-key", "order-43-charge")
	var last *status.Status
	call := func(timeout time.Duration, req string) (string, codes.Code, metadata.MD) {
		ctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(context.Background(), md), timeout)
		defer cancel()
		var hdr metadata.MD
		out, st := g.call(ctx, t, "shop.v1.Billing", "Charge", req, grpc.Header(&hdr))
		last = st
		return out, st.Code(), hdr
	}
	var req string
	key := chargeOnce(t, c, "order-43-charge", func(key string, d time.Duration) bool {
		md = metadata.Pairs("idempotency-key", key)
		req = fmt.Sprintf(`{"amount":7,"processMs":%d}`, (d + chargeAfter).Milliseconds())
		_, code, _ := call(d, req)
		if code != codes.DeadlineExceeded {
			t.Logf("first call: %v, want DeadlineExceeded", code)
		}
		return code == codes.DeadlineExceeded
	})
	md = metadata.Pairs("idempotency-key", key)
	if _, code, _ := call(5*time.Second, req); code != codes.AlreadyExists {
		t.Fatalf("retry while running: %v, want AlreadyExists (409)", code)
	}
	if ri := retryInfoOf(last); ri == nil || ri.GetRetryDelay().AsDuration() != time.Second {
		t.Fatalf("409 over gRPC: RetryInfo %v, want a retry delay of 1 s", ri)
	}
	var out string
	var hdr metadata.MD
	untilNot409(t, func() bool {
		var code codes.Code
		out, code, hdr = call(5*time.Second, req)
		return code == codes.AlreadyExists
	})
	var rc struct {
		ChargeID string `json:"chargeId"`
	}
	if err := json.Unmarshal([]byte(out), &rc); err != nil || rc.ChargeID == "" || len(hdr.Get("idempotent-replayed")) == 0 {
		t.Fatalf("retry after: %s %v, want the receipt, replayed", out, hdr)
	}
	if c.started.Load() != 1 {
		t.Fatalf("%d executions, want 1", c.started.Load())
	}
	if _, code, _ := call(5*time.Second, `{"amount":9}`); code != codes.FailedPrecondition {
		t.Fatalf("other input: %v, want FailedPrecondition (422)", code)
	}
}

// TestShopFiftyCallsOneKey: 50 concurrent calls with one key over HTTP,
// 50 over gRPC (another key), and 50 split between the two (a third):
// each time one execution, and the 49 others get 409 (gRPC AlreadyExists)
// or the replay. The CLI's share is TestShopFiftyCLICallsOneKey.
func TestShopFiftyCallsOneKey(t *testing.T) {
	g, c := startCountedShop(t)
	for _, tc := range []struct {
		name string
		http func(i int) bool // whether call i goes over HTTP
	}{
		{"http", func(int) bool { return true }},
		{"grpc", func(int) bool { return false }},
		{"mixed", func(i int) bool { return i%2 == 0 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := c.started.Load()
			key := "fifty-" + tc.name
			var wg sync.WaitGroup
			var ok, conflicts, replays atomic.Int64
			for i := range 50 {
				wg.Go(func() {
					if tc.http(i) {
						r := g.shopServer.call(t, "POST", "/billing/charge", `{"amount":3,"processMs":50}`, map[string]string{"Idempotency-Key": `"` + key + `"`})
						switch {
						case r.status == 200 && r.header.Get(idempotency.FieldReplayed) == "true":
							replays.Add(1)
						case r.status == 200:
							ok.Add(1)
						case r.status == 409 && r.header.Get("Retry-After") == "1":
							conflicts.Add(1)
						default:
							t.Errorf("HTTP: %d %v", r.status, r.header)
						}
						return
					}
					ctx := metadata.NewOutgoingContext(context.Background(), metadata.Pairs("idempotency-key", key))
					var hdr metadata.MD
					_, st := g.call(ctx, t, "shop.v1.Billing", "Charge", `{"amount":3,"processMs":50}`, grpc.Header(&hdr))
					switch {
					case st.Code() == codes.OK && len(hdr.Get("idempotent-replayed")) > 0:
						replays.Add(1)
					case st.Code() == codes.OK:
						ok.Add(1)
					case st.Code() == codes.AlreadyExists:
						conflicts.Add(1)
					default:
						t.Errorf("gRPC: %v", st)
					}
				})
			}
			wg.Wait()
			runs := c.started.Load() - before
			t.Logf("50 calls (%s), one key: %d executed, %d conflicts, %d replays", tc.name, runs, conflicts.Load(), replays.Load())
			if runs != 1 || ok.Load() != 1 || conflicts.Load()+replays.Load() != 49 {
				t.Fatalf("executions %d, first answers %d, conflicts %d, replays %d; want 1, 1 and 49 together", runs, ok.Load(), conflicts.Load(), replays.Load())
			}
		})
	}
}

// handlerRuns counts the billing.charge lines of a shop's handler log
// (flushed every 20 ms: read until two reads 100 ms apart agree).
func handlerRuns(t *testing.T, path string) int {
	t.Helper()
	count := func() int {
		b, _ := os.ReadFile(path)
		return strings.Count(string(b), "billing.charge ")
	}
	n := count()
	for range 20 {
		time.Sleep(100 * time.Millisecond)
		m := count()
		if m == n {
			return n
		}
		n = m
	}
	return n
}

// TestShopReplicasShareIdempotency: two shop processes on one Redis. A
// charge on replica A, retried with the same key on replica B, is a
// replay there (Idempotent-Replayed, the same charge ID), and the same
// input through the shop CLI (a third process) with the key is a replay
// too, another amount exit 9 (UNPROCESSABLE); the handler ran once, on A.
func TestShopReplicasShareIdempotency(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cfg := clusterConfig(srv.Addr(), `"billing.charge":{"Idempotency":{"RetentionSeconds":600}}`)
	a, b := startClusterShop(t, cfg), startClusterShop(t, cfg)
	client := &http.Client{}
	defer client.CloseIdleConnections()
	do := func(url string) (int, string, http.Header) {
		req, _ := http.NewRequest("POST", url+"/billing/charge", strings.NewReader(`{"amount":7,"processMs":20}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", `"replicas-1"`)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), resp.Header
	}
	st, first, h := do(a.url)
	if st != 200 || h.Get(idempotency.FieldReplayed) != "" {
		t.Fatalf("replica A: %d %s %v", st, first, h)
	}
	st, second, h := do(b.url)
	if st != 200 || h.Get(idempotency.FieldReplayed) != "true" || second != first {
		t.Fatalf("replica B: %d %s %v, want the replay of %s", st, second, h, first)
	}
	// The CLI, a third process on the same Redis, with the same input.
	dir := t.TempDir()
	path := filepath.Join(dir, "shop.json")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "billing", "charge", "--amount", "7", "--process-ms", "20", "--idempotency-key", "replicas-1", "--config", path)
	cmd.Env = childEnv()
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("shop billing charge: %v, stderr %s", err, stderr.String())
	}
	var fromHTTP, fromCLI map[string]any
	_ = json.Unmarshal([]byte(first), &fromHTTP)
	_ = json.Unmarshal([]byte(stdout.String()), &fromCLI)
	if fromCLI["chargeId"] == nil || fromCLI["chargeId"] != fromHTTP["chargeId"] || !strings.Contains(stderr.String(), "replayed") {
		t.Fatalf("CLI: stdout %s stderr %s, want the replay of %s", stdout.String(), stderr.String(), first)
	}
	// The same key with another amount through the CLI: exit 9.
	cmd = exec.Command(os.Args[0], "billing", "charge", "--amount", "8", "--process-ms", "20", "--idempotency-key", "replicas-1", "--config", path)
	cmd.Env = childEnv()
	stderr.Reset()
	cmd.Stderr = &stderr
	if err := cmd.Run(); cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 9 || !strings.Contains(stderr.String(), idempotency.CodeMismatch) {
		t.Fatalf("CLI, same key, another amount: %v, stderr %s; want exit 9 %s", err, stderr.String(), idempotency.CodeMismatch)
	}
	if na, nb := handlerRuns(t, a.handler), handlerRuns(t, b.handler); na != 1 || nb != 0 {
		t.Fatalf("handler ran %d times on A and %d on B, want once on A", na, nb)
	}
}

// TestShopFiftyCLICallsOneKey: the CLI's share of "50 concurrent calls,
// one key". Each CLI call is a process of its own, whose in-process store
// dies with it, so across processes keys are shared through Redis: 50 shop
// CLI processes started at once with one --idempotency-key, on one Redis.
// The charge takes 2 s, so that many processes arrive while it runs. One
// charge ran (exit 0 without the replay note); each of the 49 others got
// exit 5 (CONFLICT KERNEL_CONFLICT_001: the charge still ran) or the
// replay of that charge. A process may also find the store too slow to
// answer in time (50 processes starting at once on a loaded machine):
// exit 6, KERNEL_UNAVAILABLE_006, nothing ran. It is run again a second
// later, as its retryAfter says, until it gets one of the others.
func TestShopFiftyCLICallsOneKey(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	path := writeConfig(t, clusterConfig(srv.Addr(), `"billing.charge":{"Idempotency":{"RetentionSeconds":600}}`))
	type result struct {
		code           int
		stdout, stderr string
	}
	results := make([]result, 50)
	var unavailable atomic.Int32
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			for {
				cmd := exec.CommandContext(ctx, os.Args[0], "billing", "charge", "--amount", "3", "--process-ms", "2000",
					"--idempotency-key", "fifty-cli", "--config", path)
				cmd.Env = childEnv()
				var so, se strings.Builder
				cmd.Stdout, cmd.Stderr = &so, &se
				err := cmd.Run()
				code := 0
				if ee, ok := err.(*exec.ExitError); ok {
					code = ee.ExitCode()
				} else if err != nil {
					code = -1
				}
				results[i] = result{code, so.String(), se.String()}
				if code != 6 || !strings.Contains(se.String(), idempotency.CodeStore) || ctx.Err() != nil {
					return
				}
				unavailable.Add(1)
				time.Sleep(time.Second)
			}
		})
	}
	wg.Wait()
	if n := unavailable.Load(); n > 0 {
		t.Logf("%d runs found the store unavailable (exit 6, nothing ran) and ran again", n)
	}
	var executed, conflicts, replays int
	for i, r := range results {
		switch {
		case r.code == 0 && strings.Contains(r.stderr, "replayed: "):
			replays++
		case r.code == 0:
			executed++
		case r.code == 5 && strings.Contains(r.stderr, idempotency.CodeInProgress):
			conflicts++
		default:
			t.Errorf("process %d: exit %d, stdout %q, stderr %q", i, r.code, r.stdout, r.stderr)
		}
	}
	t.Logf("50 CLI processes, one key: %d executed, %d conflicts (exit 5), %d replays", executed, conflicts, replays)
	if executed != 1 || conflicts+replays != 49 {
		t.Fatalf("executed %d, conflicts %d, replays %d; want 1 and 49 together", executed, conflicts, replays)
	}
}

// TestShopCLITimeoutRerunGetsOutcome: the CLI's exit-7 story on a shop
// whose records live in Redis. `billing charge --process-ms 1500 --timeout
// 0.3` reports TIMEOUT (exit 7) at its deadline, with the generated key in
// details.idempotencyKey and the rerun line, and then — the failure
// already printed — waits for the charge to finish so that its outcome is
// stored under the key, and only then exits: at least 1.5 s after it
// started. A rerun with the printed key exits 0 with the receipt, marked as
// a replay (the charge did not run again), and a second rerun gets the
// same receipt.
//
// On a loaded machine the deadline can pass before the kernel starts the
// charge's handler: it then runs nothing, and there is no outcome to wait
// for. The first run, which knows so by the file handlerStartedEnv names,
// is then made again (a new process, so a new key) with ten times the
// deadline and the charge running as long past it, three tries in all.
func TestShopCLITimeoutRerunGetsOutcome(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	path := writeConfig(t, clusterConfig(srv.Addr(), `"billing.charge":{"Idempotency":{"RetentionSeconds":600}}`))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()

	var (
		// Of the first run whose charge ran: its deadline and the charge's
		// length, its stderr's lines, when the rerun line arrived and when
		// the process exited (after its start), and its key.
		timeout, charge  time.Duration
		lines            []string
		reported, exited time.Duration
		key              string
	)
	timeout = 300 * time.Millisecond
	for try := 1; ; try++ {
		charge = timeout + 1200*time.Millisecond
		mark := filepath.Join(dir, "started-"+strconv.Itoa(try))
		cmd := exec.CommandContext(ctx, os.Args[0], "billing", "charge", "--amount", "5",
			"--process-ms", strconv.FormatInt(charge.Milliseconds(), 10),
			"--timeout", strconv.FormatFloat(timeout.Seconds(), 'f', -1, 64), "--config", path)
		cmd.Env = childEnv(handlerStartedEnv + "=" + mark)
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines, reported = nil, 0
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines = append(lines, sc.Text())
			if strings.HasPrefix(sc.Text(), "rerun with --idempotency-key ") && reported == 0 {
				reported = time.Since(start)
			}
		}
		err = cmd.Wait()
		exited = time.Since(start)
		all := strings.Join(lines, "\n")
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 7 {
			t.Fatalf("first run (timeout %v): %v, want exit 7; stderr:\n%s", timeout, err, all)
		}
		var pd struct {
			Code    string            `json:"code"`
			Details map[string]string `json:"details"`
		}
		if len(lines) == 0 || json.Unmarshal([]byte(lines[0]), &pd) != nil || pd.Code != pipeline.CodeTimeout || pd.Details["idempotencyKey"] == "" {
			t.Fatalf("first run (timeout %v): stderr does not start with the TIMEOUT problem carrying details.idempotencyKey:\n%s", timeout, all)
		}
		key = pd.Details["idempotencyKey"]
		// The process has exited: a handler that started has created mark.
		if _, err := os.Stat(mark); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		if try == 3 {
			t.Fatalf("the charge's handler did not start before its deadline in 3 tries (the last %v)", timeout)
		}
		t.Logf("first run: the charge's handler did not start before its %v deadline: once more, with ten times it", timeout)
		timeout *= 10
	}
	all := strings.Join(lines, "\n")
	if !strings.Contains(all, "rerun with --idempotency-key "+key+" ") || !strings.Contains(all, "waiting for the running call to finish") ||
		strings.Contains(all, "stopped waiting") {
		t.Fatalf("first run: stderr lacks the rerun line for %s or the waiting line:\n%s", key, all)
	}
	t.Logf("first run: TIMEOUT reported %v after the process started, process exited after %v (the charge takes %v, the deadline %v)", reported, exited, charge, timeout)
	// The report came first, then the waiting line, then the exit, no
	// sooner than the charge finished. When the report is written (at the
	// deadline) is TestTimeoutWaitsForTheKeyedCall's, in cliadapter on a
	// synctest clock: here the child's start-up and a loaded machine's
	// scheduling come between the deadline and the line.
	if exited < charge {
		t.Errorf("the process exited %v after its start (%v after reporting), want after the %v charge finished", exited, exited-reported, charge)
	}

	rerun := func() (string, string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, os.Args[0], "billing", "charge", "--amount", "5",
			"--process-ms", strconv.FormatInt(charge.Milliseconds(), 10), "--idempotency-key", key, "--config", path)
		cmd.Env = childEnv()
		var so, se strings.Builder
		cmd.Stdout, cmd.Stderr = &so, &se
		if err := cmd.Run(); err != nil {
			t.Fatalf("rerun: %v, stdout %s, stderr %s", err, so.String(), se.String())
		}
		return so.String(), se.String()
	}
	out1, err1 := rerun()
	out2, err2 := rerun()
	var rc struct {
		ChargeID string `json:"chargeId"`
		Charged  bool   `json:"charged"`
	}
	if json.Unmarshal([]byte(out1), &rc) != nil || !rc.Charged || rc.ChargeID == "" || out2 != out1 {
		t.Fatalf("reruns: %q then %q, want one receipt twice", out1, out2)
	}
	note := "replayed: the stored outcome of an earlier call with idempotency key " + key
	if !strings.Contains(err1, note) || !strings.Contains(err2, note) {
		t.Fatalf("reruns' stderr %q and %q, want the replay note (the charge ran once, in the first run)", err1, err2)
	}
}
