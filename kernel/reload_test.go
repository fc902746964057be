package kernel_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/kernel/internal/observe"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/resilience/cluster/redistest"
)

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// writeAtomically writes doc to a temporary file in path's directory and
// renames it over path, as editors and config tools do.
func writeAtomically(t *testing.T, path, doc string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func limitDoc(permits int) string {
	return fmt.Sprintf(`{"Sundial":{"Kernel":{"Resilience":{"Operations":{"test.echo":{"PermitLimit":%d,"WindowSeconds":3600}}}}}}`, permits)
}

// reloadKernel serves test.echo (handler fn; nil: echo) from the config
// file path, with a logger writing to log and an SDK meter read by the
// returned reader.
func reloadKernel(t *testing.T, path string, log *syncBuffer, fn func(context.Context, echoIn) (echoOut, error)) (*kernel.Kernel, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	k, err := kernel.New(kernel.WithRegistry(newRegistry(t, fn)), kernel.WithConfigFile(path),
		kernel.WithLogger(slog.New(slog.NewJSONHandler(log, nil))), kernel.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	return k, reader
}

func callEcho(k *kernel.Kernel) error {
	_, err := kernel.Call[echoIn, echoOut](context.Background(), k, "test.echo", echoIn{Text: "x"})
	return err
}

// reloadsBy returns the sundial.config.reloads points by result.
func reloadsBy(t *testing.T, reader *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	return sumsBy(rm, observe.MetricConfigReloads, func(a attribute.Set) string {
		v, _ := a.Value(attribute.Key(observe.MetricAttrResult))
		return v.AsString()
	})
}

// sumsBy returns the points of the int64 sum metric name, added up by
// the key each point's attributes give.
func sumsBy(rm metricdata.ResourceMetrics, name string, key func(attribute.Set) string) map[string]int64 {
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if s, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == name {
				for _, p := range s.DataPoints {
					out[key(p.Attributes)] += p.Value
				}
			}
		}
	}
	return out
}

// TestReloadInvalidKeepsTheLastGoodConfig: an invalid document written
// over a good one — a typo in a key, a negative limit, broken JSON — is
// refused as a whole: the limits in force keep working, with their
// window's permits; the error names the key path, in the returned error
// and in the log; the reload metric counts it as invalid. A valid
// document then applies, keeping the permits used; the same document
// again is "unchanged".
func TestReloadInvalidKeepsTheLastGoodConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.json")
	writeAtomically(t, path, limitDoc(2))
	var log syncBuffer
	k, reader := reloadKernel(t, path, &log, nil)
	for i := range 3 {
		if err := callEcho(k); (err == nil) != (i < 2) {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	for _, tc := range []struct{ name, doc, key string }{
		{"typo", `{"Sundial":{"Kernel":{"Resilience":{"Operations":{"test.echo":{"PermitLimt":50}}}}}}`, "Sundial.Kernel.Resilience.Operations.test.echo.PermitLimt"},
		{"negative", `{"Sundial":{"Kernel":{"Resilience":{"Operations":{"test.echo":{"PermitLimit":-1}}}}}}`, "Sundial.Kernel.Resilience.Operations.test.echo.PermitLimit"},
		{"wrong type", `{"Sundial":{"Kernel":{"MaxTimeoutSeconds":"ten","Resilience":{"PermitLimit":50}}}}`, "Sundial.Kernel.MaxTimeoutSeconds"},
		{"broken JSON", `{"Sundial":{"Kernel":`, ""},
	} {
		writeAtomically(t, path, tc.doc)
		res, err := kernel.ReloadResult(k.Reload())
		if res != kernel.ReloadInvalid || err == nil || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%s: Reload = %q, %v; want invalid, naming %q", tc.name, res, err, tc.key)
		}
		if tc.key != "" && !strings.Contains(log.String(), `"key":"`+tc.key+`"`) {
			t.Errorf("%s: the log does not name the key %s:\n%s", tc.name, tc.key, log.String())
		}
		if p := k.PolicyFor("test.echo"); p.PermitLimit != 2 {
			t.Errorf("%s: PermitLimit in force = %d, want 2", tc.name, p.PermitLimit)
		}
		if err := callEcho(k); pipelinetest.CodeOf(err) != resilience.CodeRateLimited {
			t.Errorf("%s: call = %v, want the old limit's rejection", tc.name, err)
		}
	}
	if got := reloadsBy(t, reader); got[kernel.ReloadInvalid] != 4 || k.Reloads()[kernel.ReloadInvalid] != 4 {
		t.Errorf("reloads = %v (kernel %v), want 4 invalid", got, k.Reloads())
	}
	writeAtomically(t, path, limitDoc(5))
	if res, err := kernel.ReloadResult(k.Reload()); res != kernel.ReloadOK || err != nil {
		t.Fatalf("Reload = %q, %v; want ok", res, err)
	}
	admitted := 0
	for range 5 {
		if callEcho(k) == nil {
			admitted++
		}
	}
	if admitted != 3 {
		t.Errorf("after 2 -> 5 with 2 used: admitted %d, want 3", admitted)
	}
	if res, err := kernel.ReloadResult(k.Reload()); res != kernel.ReloadUnchanged || err != nil {
		t.Fatalf("Reload of the same document = %q, %v; want unchanged", res, err)
	}
	if got := reloadsBy(t, reader); got[kernel.ReloadOK] != 1 || got[kernel.ReloadUnchanged] != 1 || got[kernel.ReloadInvalid] != 4 {
		t.Errorf("reloads = %v, want ok 1, unchanged 1, invalid 4", got)
	}
}

// TestReloadIgnoresStartupOnlyKeys: a change of UseBuiltInMiddleware or
// Redis is logged as ignored; the rest of the document applies.
func TestReloadIgnoresStartupOnlyKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.json")
	writeAtomically(t, path, limitDoc(2))
	var log syncBuffer
	k, _ := reloadKernel(t, path, &log, nil)
	writeAtomically(t, path, `{"Sundial":{"Kernel":{"UseBuiltInMiddleware":false,"IdempotencyStore":{"MaxRecords":5},
		"Resilience":{"Operations":{"test.echo":{"PermitLimit":7,"Idempotency":{}}}}}}}`)
	if res, err := kernel.ReloadResult(k.Reload()); res != kernel.ReloadOK || err != nil {
		t.Fatalf("Reload = %q, %v", res, err)
	}
	if !k.Settings().UseBuiltInMiddleware || k.Settings().IdempotencyStore != nil || k.PolicyFor("test.echo").PermitLimit != 7 {
		t.Errorf("UseBuiltInMiddleware %v, IdempotencyStore %v, PermitLimit %d; want true and nil (start-up values) and 7",
			k.Settings().UseBuiltInMiddleware, k.Settings().IdempotencyStore, k.PolicyFor("test.echo").PermitLimit)
	}
	for _, key := range []string{"UseBuiltInMiddleware", "IdempotencyStore"} {
		if !strings.Contains(log.String(), `"key":"Sundial.Kernel.`+key+`"`) || !strings.Contains(log.String(), "ignored") {
			t.Errorf("the log does not say the change of %s is ignored:\n%s", key, log.String())
		}
	}
	if p, _ := k.Op("test.echo").Idempotency(); p.Enabled || !strings.Contains(log.String(), "Operations.test.echo.Idempotency changed") {
		t.Errorf("test.echo's Idempotency after the reload: %+v; want the start-up policy (off) and a log line saying the change is ignored:\n%s", p, log.String())
	}
}

// TestReloadTimeouts: TimeoutSeconds and MaxTimeoutSeconds apply to the
// invocations that start after the reload; one running keeps its
// deadline.
func TestReloadTimeouts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.json")
	writeAtomically(t, path, `{"Sundial":{"Kernel":{"Resilience":{"Operations":{"test.echo":{"TimeoutSeconds":100}}}}}}`)
	started, release := make(chan time.Duration, 4), make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	var log syncBuffer
	k, _ := reloadKernel(t, path, &log, func(ctx context.Context, in echoIn) (echoOut, error) {
		d, _ := ctx.Deadline()
		started <- time.Until(d)
		if in.Text == "wait" {
			<-release
		}
		return echoOut(in), nil
	})
	done := make(chan error, 1)
	go func() {
		_, err := kernel.Call[echoIn, echoOut](context.Background(), k, "test.echo", echoIn{Text: "wait"})
		done <- err
	}()
	select {
	case left := <-started:
		if left <= 90*time.Second {
			t.Fatalf("deadline in %v, want about 100s", left)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call under TimeoutSeconds 100 did not start its handler in 10 s")
	}
	writeAtomically(t, path, `{"Sundial":{"Kernel":{"Resilience":{"Operations":{"test.echo":{"TimeoutSeconds":10}}}}}}`)
	if res, err := kernel.ReloadResult(k.Reload()); res != kernel.ReloadOK {
		t.Fatal(res, err)
	}
	if left, ok := startEcho(t, k, started); !ok {
		t.Fatal("after the reload: the handler did not start before its 10s deadline")
	} else if left > 10*time.Second || left < 5*time.Second {
		t.Errorf("after the reload: deadline in %v, want about 10s", left)
	}
	// MaxTimeoutSeconds caps a TimeoutSeconds five times as long. On a
	// loaded machine the cap can pass before the kernel starts the
	// handler, and it then never runs it. Such a call is made again under
	// a cap ten times as long, three tries in all.
	for limit := 2; ; limit *= 10 {
		writeAtomically(t, path, fmt.Sprintf(`{"Sundial":{"Kernel":{"MaxTimeoutSeconds":%d,"Resilience":{"Operations":{"test.echo":{"TimeoutSeconds":%d}}}}}}`,
			limit, 5*limit))
		if res, err := kernel.ReloadResult(k.Reload()); res != kernel.ReloadOK {
			t.Fatal(res, err)
		}
		left, ok := startEcho(t, k, started)
		if ok {
			if left > time.Duration(limit)*time.Second {
				t.Errorf("after MaxTimeoutSeconds %d: deadline in %v, want at most %ds", limit, left, limit)
			}
			break
		}
		if limit == 200 {
			t.Fatalf("the handler did not start before its deadline in three tries (the last MaxTimeoutSeconds %d)", limit)
		}
		t.Logf("under MaxTimeoutSeconds %d the call returned without running its handler: once more under %d", limit, 10*limit)
	}
	unblock()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the call running across the reload: %v, want success under its 100s deadline", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call running across the reload did not return within 10 s of its release")
	}
}

// startEcho calls test.echo in the background and returns the time to
// its deadline that its handler saw, and true; or false when the call
// returned TIMEOUT without running the handler (the kernel never starts
// one whose deadline has passed). It fails the test when neither happens
// within 10 s.
func startEcho(t *testing.T, k *kernel.Kernel, started <-chan time.Duration) (time.Duration, bool) {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- callEcho(k) }()
	select {
	case left := <-started:
		return left, true
	case err := <-errc:
		// The call returns after its handler, which tells its start first.
		select {
		case left := <-started:
			return left, true
		default:
		}
		if pipelinetest.CodeOf(err) != pipeline.CodeTimeout {
			t.Fatalf("test.echo = %v without running its handler, want %s", err, pipeline.CodeTimeout)
		}
		return 0, false
	case <-time.After(10 * time.Second):
		t.Fatal("test.echo neither started its handler nor returned in 10 s")
		return 0, false
	}
}

// TestReloadLeavesAnOpenBreakerOpen: a breaker open when an unrelated
// reload applies (another operation's limit, the kernel's MaxStragglers)
// stays open: calls are still turned away with KERNEL_UNAVAILABLE_004.
func TestReloadLeavesAnOpenBreakerOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.json")
	doc := `{"Sundial":{"Kernel":{%s"Resilience":{"Operations":{"test.echo":{"FailureThreshold":1,"BreakSeconds":3600},"other.op":{"PermitLimit":%d}}}}}}`
	writeAtomically(t, path, fmt.Sprintf(doc, "", 1))
	var log syncBuffer
	k, _ := reloadKernel(t, path, &log, func(context.Context, echoIn) (echoOut, error) {
		return echoOut{}, errors.New("down")
	})
	_ = callEcho(k)
	if s := k.Limits("test.echo").State().Breaker; s != resilience.BreakerOpen {
		t.Fatalf("breaker %v, want open", s)
	}
	for i, extra := range []string{"", `"MaxStragglers":10,`, `"MaxTimeoutSeconds":30,`} {
		writeAtomically(t, path, fmt.Sprintf(doc, extra, i+2))
		if res, err := kernel.ReloadResult(k.Reload()); res != kernel.ReloadOK {
			t.Fatal(res, err)
		}
		if s := k.Limits("test.echo").State().Breaker; s != resilience.BreakerOpen {
			t.Errorf("reload %d: breaker %v, want open", i, s)
		}
		if err := callEcho(k); pipelinetest.CodeOf(err) != resilience.CodeCircuitOpen {
			t.Errorf("reload %d: call = %v, want %s", i, err, resilience.CodeCircuitOpen)
		}
	}
}

// TestReloadGainsALimit: an operation without limits at start-up gets
// one by a reload, and loses it by the next.
func TestReloadGainsALimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.json")
	writeAtomically(t, path, `{}`)
	var log syncBuffer
	k, _ := reloadKernel(t, path, &log, nil)
	if k.Limits("test.echo") != nil {
		t.Fatal("Limits = non-nil without limits")
	}
	writeAtomically(t, path, limitDoc(1))
	if res, err := kernel.ReloadResult(k.Reload()); res != kernel.ReloadOK {
		t.Fatal(res, err)
	}
	if err, err2 := callEcho(k), callEcho(k); err != nil || pipelinetest.CodeOf(err2) != resilience.CodeRateLimited {
		t.Fatalf("calls = %v, %v; want success, then rate limited", err, err2)
	}
	writeAtomically(t, path, `{}`)
	if res, err := kernel.ReloadResult(k.Reload()); res != kernel.ReloadOK {
		t.Fatal(res, err)
	}
	if err := callEcho(k); err != nil || k.Limits("test.echo") != nil {
		t.Fatalf("call = %v, Limits %v; want success and none", err, k.Limits("test.echo"))
	}
}

// waitFor polls cond until it holds, failing after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestWatchConfig: WatchConfig picks up every way of replacing the file,
// several times in a row each: a write to a temporary file renamed over
// it (editors), a swap of the ..data symlink of a Kubernetes ConfigMap
// volume, and a removal followed by a new file (the provider stops at a
// removal; WatchConfig re-arms it).
func TestWatchConfig(t *testing.T) {
	t.Run("rename", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "config.json")
		writeAtomically(t, path, limitDoc(1))
		watchAndCheck(t, path, func(n int) { writeAtomically(t, path, limitDoc(n)) }, false)
	})
	t.Run("configmap-symlink", func(t *testing.T) {
		dir := t.TempDir()
		gen := 0
		swap := func(n int) {
			gen++
			ts := filepath.Join(dir, fmt.Sprintf("..2026_12_03_%02d", gen))
			if err := os.Mkdir(ts, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(ts, "config.json"), []byte(limitDoc(n)), 0o600); err != nil {
				t.Fatal(err)
			}
			tmp := filepath.Join(dir, "..data_tmp")
			if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
				t.Fatal(err)
			}
			if gen > 1 { // the kubelet removes the old timestamped directory
				if err := os.RemoveAll(filepath.Join(dir, fmt.Sprintf("..2026_12_03_%02d", gen-1))); err != nil {
					t.Fatal(err)
				}
			}
		}
		swap(1)
		path := filepath.Join(dir, "config.json")
		if err := os.Symlink(filepath.Join("..data", "config.json"), path); err != nil {
			t.Fatal(err)
		}
		watchAndCheck(t, path, swap, false)
	})
	t.Run("remove-and-recreate", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "config.json")
		writeAtomically(t, path, limitDoc(1))
		watchAndCheck(t, path, func(n int) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(limitDoc(n)), 0o600); err != nil {
				t.Fatal(err)
			}
		}, true)
	})
}

// watchAndCheck runs WatchConfig on a kernel reading path (which says
// PermitLimit 1), changes the file three times with change(n), n = 2, 3,
// 4, and waits each time for PermitLimit n to be in force; wantRearm says
// whether the changes stop the provider (a removal) and so re-arm it.
func watchAndCheck(t *testing.T, path string, change func(n int), wantRearm bool) {
	t.Helper()
	var log syncBuffer
	k, _ := reloadKernel(t, path, &log, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- k.WatchConfig(ctx, 20*time.Millisecond) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	waitFor(t, "the watch", func() bool { return strings.Contains(log.String(), "watching the config file") })
	for n := 2; n <= 4; n++ {
		change(n)
		waitFor(t, fmt.Sprintf("PermitLimit %d", n), func() bool { return k.PolicyFor("test.echo").PermitLimit == n })
	}
	if n := strings.Count(log.String(), "re-arming"); wantRearm != (n > 0) {
		t.Errorf("the watch was re-armed %d times; want re-arming: %v", n, wantRearm)
	}
	if got := k.Reloads(); got[kernel.ReloadInvalid] != 0 {
		t.Errorf("reloads = %v, want none invalid; log:\n%s", got, log.String())
	}
}

// TestWatchConfigWithoutFile: WatchConfig needs a config file.
func TestWatchConfigWithoutFile(t *testing.T) {
	k, err := kernel.New(kernel.WithRegistry(operations.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	if err := k.WatchConfig(context.Background(), 0); !errors.Is(err, kernel.ErrNoConfigFile) {
		t.Errorf("WatchConfig = %v, want ErrNoConfigFile", err)
	}
}

// TestReloadChangesScope: a reload that moves an operation from Scope
// process to cluster starts the limits of the new scope — counted in
// Redis, with the store started by the reload when no operation needed
// it at start-up — and back (TestUpdateScopeKeepsTheBreaker: the
// breaker, per process in both, is kept).
func TestReloadChangesScope(t *testing.T) {
	srv := redistest.Start(t)
	path := filepath.Join(t.TempDir(), "config.json")
	doc := func(scope string) string {
		return `{"Sundial":{"Kernel":{"Redis":{"Address":"` + srv.Addr() + `","KeyPrefix":"rl"},
			"Resilience":{"Operations":{"orders.create":{"PermitLimit":3,"WindowSeconds":3600,"FailureThreshold":5,
			"Scope":"` + scope + `","StoreTimeoutMs":2000}}}}}}`
	}
	writeAtomically(t, path, doc("process"))
	k, err := clusterKernel(`{}`, kernel.WithConfigFile(path))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	admit := func(n int) (ok int) {
		for range n {
			if out := k.Op("orders.create").Invoke(t.Context(), kernel.Unary{Input: new("x")}); out.Err == nil {
				ok++
			} else if pipelinetest.CodeOf(out.Err) != resilience.CodeRateLimited {
				t.Fatalf("call: %v", out.Err)
			}
		}
		return ok
	}
	if got := admit(2); got != 2 {
		t.Fatalf("process scope: admitted %d, want 2", got)
	}
	for i, tc := range []struct {
		scope      string
		local      bool // the window is counted in this process
		wantAdmits int
	}{
		{"cluster", false, 3}, // the shared window starts empty
		{"process", true, 3},  // so does the new local one
	} {
		writeAtomically(t, path, doc(tc.scope))
		if res, err := kernel.ReloadResult(k.Reload()); res != kernel.ReloadOK {
			t.Fatalf("reload %d: %q, %v", i, res, err)
		}
		l := k.Limits("orders.create")
		if local := l.State().HasWindow; local != tc.local || l.Policy().Scope != resilience.Scope(tc.scope) {
			t.Fatalf("reload %d: scope %q, local window %v; want %q, %v", i, l.Policy().Scope, local, tc.scope, tc.local)
		}
		if got := admit(5); got != tc.wantAdmits {
			t.Errorf("scope %s: admitted %d of 5, want %d", tc.scope, got, tc.wantAdmits)
		}
	}
	if k.ClusterStore() == nil {
		t.Error("the reload did not start the cluster store")
	}
}

// TestReloadStartsStoreSafelyAndNotAfterClose: the first reload that
// scopes an operation to the cluster starts the cluster store while
// Status is read concurrently (-race checks the hand-over); after Close a
// reload is refused with ErrClosed and starts nothing (goleak, in
// TestMain, checks that no store heartbeat is left running).
func TestReloadStartsStoreSafelyAndNotAfterClose(t *testing.T) {
	srv := redistest.Start(t)
	path := filepath.Join(t.TempDir(), "config.json")
	doc := func(scope string) string {
		return `{"Sundial":{"Kernel":{"Redis":{"Address":"` + srv.Addr() + `","KeyPrefix":"rc"},
			"Resilience":{"Operations":{"orders.create":{"PermitLimit":3,"Scope":"` + scope + `"}}}}}}`
	}
	writeAtomically(t, path, doc("process"))
	k, err := clusterKernel(`{}`, kernel.WithConfigFile(path))
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				_ = k.Status()
				_ = k.ClusterStore()
			}
		}
	})
	writeAtomically(t, path, doc("cluster"))
	if res, err := kernel.ReloadResult(k.Reload()); res != kernel.ReloadOK || err != nil {
		t.Fatalf("Reload to cluster scope = %q, %v", res, err)
	}
	close(stop)
	wg.Wait()
	if k.ClusterStore() == nil {
		t.Fatal("no cluster store after the reload")
	}
	if err := k.Close(); err != nil {
		t.Fatal(err)
	}
	writeAtomically(t, path, doc("process"))
	if res, err := kernel.ReloadResult(k.Reload()); !errors.Is(err, kernel.ErrClosed) || res != kernel.ReloadInvalid {
		t.Fatalf("Reload after Close = %q, %v; want %q, ErrClosed", res, err, kernel.ReloadInvalid)
	}
}
