package systemtest

import (
	"bytes"
	"context"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc/codes"

	"github.com/sundial-go/sundial/samples/shop/internal/shopcmd"
)

// TestShopMetricsEndpoint: /metrics on the HTTP port lists the invocation
// duration histogram per operation after a call (its _count is the count of
// invocations: there is no separate counter), the breaker state of the
// operation that has a breaker (one series per state), the count of
// stragglers, and Go's runtime metrics (goroutines, memory).
func TestShopMetricsEndpoint(t *testing.T) {
	s := startShopHTTP(t, shopcmd.ServeOptions{})
	if r := s.call(t, "POST", "/orders", `{"name":"widget","amount":1}`, nil); r.status != http.StatusCreated {
		t.Fatalf("POST /orders = %d %s, want 201", r.status, r.body)
	}
	r := s.call(t, "GET", "/metrics", "", nil)
	if r.status != http.StatusOK {
		t.Fatalf("GET /metrics = %d, want 200", r.status)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^sundial_invocation_duration_seconds_count\{[^}]*kind="OK"[^}]*operation="orders.create"[^}]*protocol="http"[^}]*\} 1$`),
		regexp.MustCompile(`(?m)^sundial_breaker_state\{[^}]*operation="billing.charge"[^}]*state="closed"[^}]*\} 1$`),
		regexp.MustCompile(`(?m)^sundial_breaker_state\{[^}]*operation="billing.charge"[^}]*state="open"[^}]*\} 0$`),
		regexp.MustCompile(`(?m)^sundial_queue_depth\{[^}]*operation="orders.create"[^}]*queue="rate"[^}]*\} 0$`),
		regexp.MustCompile(`(?m)^sundial_stragglers(_total)?\{[^}]*\} 0$|(?m)^sundial_stragglers(_total)? 0$`),
		regexp.MustCompile(`(?m)^go_goroutines [0-9]+$`),
		regexp.MustCompile(`(?m)^go_memstats_heap_inuse_bytes [0-9.e+]+$`),
	} {
		if !want.MatchString(r.body) {
			t.Errorf("GET /metrics has no line matching %s; got:\n%s", want, grepLines(r.body, "sundial_"))
		}
	}
	if strings.Contains(r.body, "sundial_invocation_count_total") {
		t.Errorf("/metrics has sundial_invocation_count_total, which repeats sundial_invocation_duration_seconds_count")
	}
	if strings.Contains(r.body, `route="GET /metrics"`) {
		t.Errorf("/metrics scrapes are themselves counted; want them outside the pipeline")
	}
}

func grepLines(s, sub string) string {
	var out []string
	for line := range strings.Lines(s) {
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "")
}

// TestShopTraceIDs: with the SDK installed every Problem Details traceId
// is a real W3C trace ID, equal to the access log's; an incoming
// traceparent is continued, not replaced.
func TestShopTraceIDs(t *testing.T) {
	s := startShopHTTP(t, shopcmd.ServeOptions{})
	r := s.call(t, "GET", "/orders/nope", "", nil)
	id, _ := r.problem["traceId"].(string)
	if r.status != http.StatusNotFound || !traceIDPattern.MatchString(id) || id == strings.Repeat("0", 32) {
		t.Fatalf("GET /orders/nope = %d, traceId %q; want 404 with a W3C trace ID", r.status, id)
	}
	if rec := s.logs.waitRecord(t, "orders.get", "SHOP_NOT_FOUND_001"); rec.Attrs["traceId"] != id {
		t.Errorf("access log traceId = %v, want the Problem Details one %s", rec.Attrs["traceId"], id)
	}

	const caller = "4bf92f3577b34da6a3ce929d0e0e4736"
	r = s.call(t, "GET", "/orders/gone", "", map[string]string{"traceparent": "00-" + caller + "-00f067aa0ba902b7-01"})
	if got := r.problem["traceId"]; got != caller {
		t.Errorf("with traceparent, traceId = %v, want the caller's %s", got, caller)
	}
}

// TestShopExportsOTLPWhenConfigured: with OTEL_EXPORTER_OTLP_ENDPOINT set,
// the invocation spans are exported (OTLP/HTTP) to it by shutdown at the
// latest; without it nothing is sent (TestShopMetricsEndpoint and the other
// tests run with no endpoint and no collector).
func TestShopExportsOTLPWhenConfigured(t *testing.T) {
	var mu sync.Mutex
	var bodies [][]byte
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		if r.URL.Path == "/v1/traces" {
			bodies = append(bodies, b)
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer collector.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL) // 127.0.0.1
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "")

	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	logs := newShopLogs()
	o := shopcmd.ServeOptions{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", Ready: func(a string) { addr <- a },
		Logger: logs.Logger()}
	go func() { done <- shopcmd.Serve(ctx, o) }()
	var url string
	select {
	case a := <-addr:
		url = "http://" + a
	case err := <-done:
		cancel()
		t.Fatalf("serve() = %v before listening", err)
	}
	client := &http.Client{Transport: &http.Transport{}}
	resp, err := client.Post(url+"/orders", "application/json", strings.NewReader(`{"name":"widget","amount":1}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	client.CloseIdleConnections()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve() after shutdown = %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	all := bytes.Join(bodies, nil)
	if !bytes.Contains(all, []byte("orders.create")) || !bytes.Contains(all, []byte("sundial.outcome.kind")) {
		t.Errorf("collector received %d trace exports without the orders.create span; log:\n%s", len(bodies), logs)
	}
}

// TestShopMetricsPromlint: the /metrics exposition, after calls over HTTP
// (a success, a 404, failures of the operation with a breaker) and gRPC
// (a failing charge), parses with
// Prometheus' own text parser (expfmt) and promlint finds no problem in
// it. On the way it checks the conventions' http.server.request.duration
// and the promises of docs/observability.md that an
// operator's Prometheus sees: no otel_scope_* label on any series, the
// duration histogram's buckets resolve sub-millisecond calls (le 0.0001 …
// 0.0005), the breaker state is one 0/1 series per state, the Go runtime
// metrics are there, and target_info carries service.name, service.version
// and service.instance.id.
func TestShopMetricsPromlint(t *testing.T) {
	g := startShopGRPC(t, shopcmd.ServeOptions{})
	s := g.shopServer
	if r := s.call(t, "POST", "/orders", `{"name":"widget","amount":1}`, nil); r.status != http.StatusCreated {
		t.Fatalf("POST /orders = %d %s, want 201", r.status, r.body)
	}
	if _, st := g.call(t.Context(), t, "shop.v1.Billing", "Charge", `{"amount":5,"fail":true}`); st.Code() != codes.Unavailable {
		t.Fatalf("gRPC Billing/Charge = %v, want Unavailable", st)
	}
	s.call(t, "GET", "/orders/nope", "", nil)
	for range 2 {
		s.call(t, "POST", "/billing/charge", `{"amount":5,"fail":true}`, nil)
	}
	s.call(t, "GET", "/healthz", "", nil)
	r := s.call(t, "GET", "/metrics", "", nil)
	if r.status != http.StatusOK {
		t.Fatalf("GET /metrics = %d, want 200", r.status)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(r.body))
	if err != nil {
		t.Fatalf("expfmt cannot parse /metrics: %v\n%s", err, r.body)
	}
	mfs := make([]*dto.MetricFamily, 0, len(families))
	for _, mf := range families {
		mfs = append(mfs, mf)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatalf("promlint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}

	for name, mf := range families {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if strings.HasPrefix(l.GetName(), "otel_scope_") {
					t.Fatalf("%s has label %s=%q; want no otel_scope_* labels", name, l.GetName(), l.GetValue())
				}
			}
		}
	}
	dur := families["sundial_invocation_duration_seconds"]
	if dur == nil || dur.GetType() != dto.MetricType_HISTOGRAM {
		t.Fatalf("sundial_invocation_duration_seconds missing or not a histogram")
	}
	var bounds []float64
	for _, b := range dur.GetMetric()[0].GetHistogram().GetBucket() {
		bounds = append(bounds, b.GetUpperBound())
	}
	for _, want := range []float64{0.0001, 0.00025, 0.0005, 0.001} {
		if !slices.Contains(bounds, want) {
			t.Errorf("duration buckets %v lack le=%v: sub-millisecond calls are not resolved", bounds, want)
		}
	}
	found := false
	for _, m := range families["http_server_request_duration_seconds"].GetMetric() {
		if label(m, "http_route") == "/orders" && label(m, "http_request_method") == "POST" && label(m, "http_response_status_code") == "201" {
			found = true
		}
	}
	if !found {
		t.Errorf("no http_server_request_duration_seconds{http_route=/orders,http_request_method=POST,http_response_status_code=201} (the conventions' metric)")
	}
	// One histogram point is 20 series: 17 bounds + le="+Inf", _sum and
	// _count (the worst case of docs/observability.md counts with it).
	n := 0
	for line := range strings.Lines(r.body) {
		if strings.HasPrefix(line, "sundial_invocation_duration_seconds") && strings.Contains(line, `operation="orders.create"`) &&
			strings.Contains(line, `protocol="http"`) && strings.Contains(line, `kind="OK"`) {
			n++
		}
	}
	if n != 20 {
		t.Errorf("sundial_invocation_duration_seconds{orders.create,http,OK} has %d series, want 20", n)
	}
	found = false
	for _, m := range families["rpc_server_call_duration_seconds"].GetMetric() {
		if label(m, "rpc_method") == "shop.v1.Billing/Charge" && label(m, "rpc_response_status_code") == "UNAVAILABLE" && label(m, "error_type") == "UNAVAILABLE" {
			found = true
		}
	}
	if !found {
		t.Errorf("no rpc_server_call_duration_seconds{rpc_method=shop.v1.Billing/Charge,rpc_response_status_code=UNAVAILABLE}")
	}
	states := map[string]float64{}
	for _, m := range families["sundial_breaker_state"].GetMetric() {
		if label(m, "operation") == "billing.charge" {
			states[label(m, "state")] = m.GetGauge().GetValue()
		}
	}
	if want := map[string]float64{"closed": 1, "half_open": 0, "open": 0}; !maps.Equal(states, want) {
		t.Errorf("sundial_breaker_state{operation=billing.charge} by state = %v, want %v", states, want)
	}
	for _, name := range []string{"go_goroutines", "go_memstats_heap_inuse_bytes", "process_resident_memory_bytes"} {
		if families[name] == nil {
			t.Errorf("/metrics has no %s (Go runtime metrics)", name)
		}
	}
	ti := families["target_info"]
	if ti == nil || len(ti.GetMetric()) != 1 {
		t.Fatalf("target_info missing: %v", ti)
	}
	m := ti.GetMetric()[0]
	if label(m, "service_name") != "shop" || label(m, "service_version") == "" || !uuidPattern.MatchString(label(m, "service_instance_id")) {
		t.Errorf("target_info labels = %v, want service_name=shop, a service_version and a UUID service_instance_id", m.GetLabel())
	}
}

var uuidPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// label returns the value of m's label name, or "".
func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// TestShopCLIExportsOTLPWhenConfigured: with OTEL_EXPORTER_OTLP_ENDPOINT
// set, an operation command (`shop orders create ...`) exports its
// invocation span like serve, flushed before run returns, with the
// resource's service.name; the protocol is cli.
func TestShopCLIExportsOTLPWhenConfigured(t *testing.T) {
	var mu sync.Mutex
	var bodies [][]byte
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		if r.URL.Path == "/v1/traces" {
			bodies = append(bodies, b)
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer collector.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL) // 127.0.0.1
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "")

	var stdout, stderr bytes.Buffer
	if code := shopcmd.Run([]string{"orders", "create", "--name", "widget", "--amount", "1"}, strings.NewReader(""), &stdout, &stderr); code != 0 {
		t.Fatalf("run(orders create) = %d, stderr %q", code, stderr.String())
	}
	mu.Lock()
	defer mu.Unlock()
	all := bytes.Join(bodies, nil)
	for _, want := range []string{"orders.create", "sundial.protocol", "cli", "service.name", "shop", "service.instance.id"} {
		if !bytes.Contains(all, []byte(want)) {
			t.Errorf("collector received %d trace exports without %q", len(bodies), want)
		}
	}
}

// TestShopCLIPolish: the shop's command line shows no Go internals for a
// malformed flag (on an operation command and on serve), completes
// --output with json and text, and shows no back quotes in the
// descriptions shell completion lists.
func TestShopCLIPolish(t *testing.T) {
	shop := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := shopcmd.Run(args, strings.NewReader(""), &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"orders", "create", "--name", "w", "--amount", "x"}, `shop: invalid value "x" for --amount: want an integer`},
		{[]string{"serve", "--grace", "soon"}, `shop: invalid value "soon" for --grace: want a duration such as 300ms, 1.5s or 2m`},
	} {
		code, _, stderr := shop(tc.args...)
		if code != 2 || !strings.HasPrefix(stderr, tc.want+"\n") || strings.Contains(stderr, "strconv") {
			t.Errorf("shop %q = %d, stderr %q; want 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
	if _, out, _ := shop("__complete", "orders", "create", "--output", ""); !strings.Contains(out, "json\t") || !strings.Contains(out, "text\t") || !strings.HasSuffix(out, ":4\n") {
		t.Errorf("completion of --output = %q, want json and text and no file names", out)
	}
	for _, args := range [][]string{{"__complete", "serve", "--"}, {"__complete", "orders", "create", "--"}, {"__complete", ""}} {
		if _, out, _ := shop(args...); strings.Contains(out, "`") || !strings.Contains(out, "\t") {
			t.Errorf("shop %q = %q: want descriptions without back quotes", args, out)
		}
	}
}

// TestMakeRunBindsLoopback: `make run` starts the shop on 127.0.0.1 for
// both listeners unless HTTP_ADDR/GRPC_ADDR say otherwise (make -n prints
// the command without running it).
func TestMakeRunBindsLoopback(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	for _, tc := range []struct {
		vars []string
		want string
	}{
		{nil, "serve --http 127.0.0.1:5000 --grpc 127.0.0.1:5001"},
		{[]string{"HTTP_ADDR=:8080", "GRPC_ADDR=:8081"}, "serve --http :8080 --grpc :8081"},
	} {
		out, err := exec.Command("make", append([]string{"-s", "-n", "-C", "../../..", "run"}, tc.vars...)...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("make -n run %v = %q (%v), want a command with %q", tc.vars, out, err, tc.want)
		}
	}
}
