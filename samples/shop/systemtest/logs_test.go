package systemtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/samples/shop/internal/shopcmd"
)

// stderrRecords splits an operation command's stderr into lines and
// decodes each as a JSON object, but for the command's human line about a
// failure ("shop orders create: ..."); any other line fails the test.
func stderrRecords(t *testing.T, stderr string) []map[string]any {
	t.Helper()
	var recs []map[string]any
	for line := range strings.Lines(stderr) {
		if strings.HasPrefix(line, "shop orders ") {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Errorf("stderr line %q is not a JSON object", line)
			continue
		}
		recs = append(recs, m)
	}
	return recs
}

// findRecord returns the first record of recs at level whose attribute
// key contains want.
func findRecord(recs []map[string]any, level, key, want string) (map[string]any, bool) {
	for _, r := range recs {
		if s, _ := r[key].(string); r["level"] == level && strings.Contains(s, want) {
			return r, true
		}
	}
	return nil, false
}

// TestShopCLILogsConfigTypo: an operation command whose config names an
// operation the shop does not have says so on stderr, as a JSON record,
// while stdout holds the result alone.
func TestShopCLILogsConfigTypo(t *testing.T) {
	config := filepath.Join(t.TempDir(), "config.json")
	doc := `{"Sundial":{"Kernel":{"Resilience":{"Operations":{"orders.craete":{"PermitLimit":1}}}}}}`
	if err := os.WriteFile(config, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	args := []string{"--config", config, "orders", "create", "--name", "widget", "--amount", "1"}
	if code := shopcmd.Run(args, strings.NewReader(""), &stdout, &stderr); code != 0 {
		t.Fatalf("shop %q = exit %d, stderr %q", args, code, stderr.String())
	}
	var order map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &order); err != nil || order["name"] != "widget" {
		t.Errorf("stdout = %q (%v), want the order alone", stdout.String(), err)
	}
	recs := stderrRecords(t, stderr.String())
	if _, ok := findRecord(recs, "WARN", "operation", "orders.craete"); !ok {
		t.Errorf("stderr = %q, want a WARN record naming orders.craete", stderr.String())
	}
}

// TestShopCLILogsUnexpectedCause: the cause of an UNEXPECTED outcome of
// an operation command, which its Problem Details do not show, is a JSON
// record on stderr after them; stdout stays empty.
func TestShopCLILogsUnexpectedCause(t *testing.T) {
	const cause = "ledger offline: disk 7 unreadable"
	failing := pipeline.MiddlewareFunc(func(context.Context, *pipeline.Invocation, pipeline.Handler) (any, error) {
		return nil, errors.New(cause)
	})
	saved := shopcmd.ExtraKernelOptions
	shopcmd.ExtraKernelOptions = append(shopcmd.ExtraKernelOptions, kernel.UseAt(pipeline.StageHandle, failing))
	t.Cleanup(func() { shopcmd.ExtraKernelOptions = saved })

	var stdout, stderr bytes.Buffer
	args := []string{"orders", "create", "--name", "widget", "--amount", "1"}
	if code := shopcmd.Run(args, strings.NewReader(""), &stdout, &stderr); code != 1 {
		t.Fatalf("shop %q = exit %d, want 1; stderr %q", args, code, stderr.String())
	}
	if stdout.Len() != 0 {
		t.Errorf("stdout = %q, want nothing", stdout.String())
	}
	recs := stderrRecords(t, stderr.String())
	if len(recs) < 2 || recs[0]["code"] != pipeline.CodeUnexpected || strings.Contains(stderr.String()[:strings.Index(stderr.String(), "\n")], "ledger") {
		t.Fatalf("stderr = %q, want the Problem Details first, without the cause", stderr.String())
	}
	r, ok := findRecord(recs[1:], "ERROR", "error", cause)
	if !ok || r["traceId"] != recs[0]["traceId"] || r["operation"] != "orders.create" {
		t.Errorf("stderr = %q, want an ERROR record with the cause, the operation and the problem's traceId", stderr.String())
	}
}

// closedEndpoint returns an OTLP endpoint on 127.0.0.1 where nothing
// listens, and sets the environment so that exports to it fail fast.
func closedEndpoint(t *testing.T) string {
	t.Helper()
	addr := refusedAddr(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+addr)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "300") // ms, retries included
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "20")     // ms between batches
	return addr
}

// TestShopServeLogsExportFailures: with the OTLP endpoint down, serve's
// failed span exports are records of its structured log, naming the
// endpoint, not plain text beside it.
func TestShopServeLogsExportFailures(t *testing.T) {
	addr := closedEndpoint(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan string, 1)
	done := make(chan error, 1)
	logs := newShopLogs()
	o := shopcmd.ServeOptions{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", Ready: func(a string) { ready <- a },
		Logger: logs.Logger()}
	go func() { done <- shopcmd.Serve(ctx, o) }()
	var url string
	select {
	case a := <-ready:
		url = "http://" + a
	case err := <-done:
		t.Fatalf("serve() = %v before listening", err)
	}
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Get(url + "/orders/ord-1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	r, ok := logs.WaitFor(10*time.Second, pipelinetest.Message("sundial: opentelemetry error"))
	cancel()
	if err := <-done; err != nil {
		t.Errorf("serve() after shutdown = %v", err)
	}
	if msg, _ := r.Attrs["error"].(string); !ok || !strings.Contains(msg, addr) {
		t.Errorf("record %+v (found: %v), want a failed export to %s; log:\n%s", r, ok, addr, logs)
	}
}

// TestShopCLILogsExportFailures: an operation command whose span cannot
// be exported reports that as JSON records on stderr; its result stays
// alone on stdout.
func TestShopCLILogsExportFailures(t *testing.T) {
	addr := closedEndpoint(t)
	var stdout, stderr bytes.Buffer
	args := []string{"orders", "create", "--name", "widget", "--amount", "1"}
	if code := shopcmd.Run(args, strings.NewReader(""), &stdout, &stderr); code != 0 {
		t.Fatalf("shop %q = exit %d, stderr %q", args, code, stderr.String())
	}
	if err := json.Unmarshal(stdout.Bytes(), new(map[string]any)); err != nil {
		t.Errorf("stdout = %q (%v), want the order alone", stdout.String(), err)
	}
	recs := stderrRecords(t, stderr.String())
	_, handled := findRecord(recs, "ERROR", "error", addr)
	_, shutdown := findRecord(recs, "WARN", "error", addr)
	if !handled && !shutdown {
		t.Errorf("stderr = %q, want a record of the failed export to %s", stderr.String(), addr)
	}
}
