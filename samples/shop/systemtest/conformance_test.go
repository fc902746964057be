package systemtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundial-go/sundial/adapters/grpcadapter"
	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/samples/shop/internal/shopcmd"
)

// The conformance table: every row is a scenario — a sequence of calls on
// a fresh shop — and every column a protocol. Each call names its
// operation, its JSON input and the caller's timeout, and the outcome code
// it must end with ("OK" for success) on every protocol. A column also
// checks that its protocol's own status (HTTP status, gRPC code, exit
// code) is the one the outcome table of docs/pipeline.md gives for the
// outcome's kind.
//
// Rows whose checks do not fit a list of calls — timings, trace IDs, log
// records, span attributes, waits for a breaker to half-open — are a
// function of the caller instead, run on every column alike.
//
// Beside the shop's operations every shop of the table serves
// tests.flaky, a test-only operation whose input says what its handler
// does (see flakyInput), under the row's policy; and its kernel has an
// SDK tracer whose spans the row can read.
//
// To add a protocol, add a column: a name and a function that starts a
// fresh shop and returns a caller for it.

// step is one call of a scenario.
type step struct {
	op      string
	input   string
	timeout time.Duration // the caller's deadline; 0: none
	want    string        // the outcome code, "OK" for success
	// background starts the call and moves on once its handler runs;
	// its outcome is checked at the end of the scenario.
	background bool
}

// answer is what a caller saw of one call.
type answer struct {
	// code is the outcome code, "OK" for success.
	code string
	// status is the protocol's own status: the HTTP status ("504"), the
	// gRPC code ("DeadlineExceeded"), the exit code ("exit 7").
	status string
	// traceID is the trace ID the answer carries (the Problem Details'
	// traceId of an HTTP or CLI failure); problem reports whether it has
	// a field for one. A gRPC status carries none.
	traceID string
	problem bool
	// elapsed is the time from sending the call to its answer.
	elapsed time.Duration
	// access is the call's access-log record (zero when none was found).
	access pipelinetest.Record
}

// caller calls one fresh shop over one protocol.
type caller interface {
	// do runs op with the JSON input and the caller's timeout and returns
	// what the caller saw, failing t when the protocol's own status does
	// not match the outcome's kind. It may run on a goroutine of its own
	// (background steps): it reports with t.Errorf, never t.Fatal.
	do(t *testing.T, op, input string, timeout time.Duration) answer
	// started receives the operation ID of every call that reaches its
	// handler.
	started() <-chan string
	// statusFor returns the protocol's own status for an outcome kind, as
	// answer.status spells it.
	statusFor(k pipeline.Kind) string
	// access returns the shop's access log: one record per answer.
	access() accessLog
	// early makes the calls the protocol's adapter turns away before the
	// pipeline, and returns what the caller saw of each, by name.
	early(t *testing.T) map[string]answer
}

// column is one protocol of the table.
type column struct {
	name  string
	start func(t *testing.T, env *shopEnv) caller
}

var conformanceColumns = []column{
	{"http", func(t *testing.T, env *shopEnv) caller {
		return &httpCaller{s: startShopHTTP(t, shopcmd.ServeOptions{KernelOptions: env.kernelOptions()})}
	}},
	{"grpc", func(t *testing.T, env *shopEnv) caller {
		return &grpcCaller{g: startShopGRPC(t, shopcmd.ServeOptions{KernelOptions: env.kernelOptions()})}
	}},
	{"cli", func(t *testing.T, env *shopEnv) caller { return newCLICaller(t, env) }}, // exit codes; cliCaller in cli_test.go
	// The HTTP port's Connect and gRPC-Web (connect_test.go).
	{"connect", func(t *testing.T, env *shopEnv) caller { return newConnectCaller(t, env, false) }},
	{"grpcweb", func(t *testing.T, env *shopEnv) caller { return newConnectCaller(t, env, true) }},
	// Tool calls over Streamable HTTP at /mcp (conformance_mcp_test.go).
	{"mcp", func(t *testing.T, env *shopEnv) caller { return newMCPCaller(t, env) }},
}

// conformanceRow is one scenario: steps, then check.
type conformanceRow struct {
	name string
	// policy is the Resilience policy of tests.flaky, a JSON object; ""
	// for none.
	policy string
	steps  []step
	check  func(t *testing.T, c caller, env *shopEnv)
}

var conformanceRows = []conformanceRow{
	{name: "create and get", steps: []step{
		{op: "orders.create", input: `{"name":"widget","amount":1}`, want: "OK"},
		{op: "orders.get", input: `{"id":"ord-1"}`, want: "OK"},
	}},
	{name: "three orders", steps: []step{
		{op: "orders.create", input: `{"name":"widget","amount":1}`, want: "OK"},
		{op: "orders.create", input: `{"name":"widget","amount":1}`, want: "OK"},
		{op: "orders.create", input: `{"name":"widget","amount":1}`, want: resilience.CodeRateLimited},
	}},
	// Constraints are checked before the invocation: inputs that break
	// them spend no permit of orders.create's rate limit (2 per window).
	{name: "constraint failures spend no permit", steps: []step{
		{op: "orders.create", input: `{"name":"","amount":0,"currency":"GBP"}`, want: operations.CodeConstraint},
		{op: "orders.create", input: `{"name":"widget","amount":10001}`, want: operations.CodeConstraint},
		{op: "orders.create", input: `{"name":"widget","amount":1,"currency":"JPY"}`, want: operations.CodeConstraint},
		{op: "orders.create", input: `{"name":"widget","amount":1,"currency":"USD"}`, want: "OK"},
		{op: "orders.create", input: `{"name":"widget","amount":10000}`, want: "OK"},
		{op: "orders.create", input: `{"name":"widget","amount":1}`, want: resilience.CodeRateLimited},
	}},
	// ... and are neutral to billing.charge's breaker (FailureThreshold 5).
	{name: "constraint failures leave the breaker closed", steps: []step{
		{op: "billing.charge", input: `{"amount":0}`, want: operations.CodeConstraint},
		{op: "billing.charge", input: `{"amount":0}`, want: operations.CodeConstraint},
		{op: "billing.charge", input: `{"amount":0}`, want: operations.CodeConstraint},
		{op: "billing.charge", input: `{"amount":0}`, want: operations.CodeConstraint},
		{op: "billing.charge", input: `{"amount":0}`, want: operations.CodeConstraint},
		{op: "billing.charge", input: `{"amount":10001}`, want: operations.CodeConstraint},
		{op: "billing.charge", input: `{"amount":5}`, want: "OK"},
	}},
	// One input policy (operations.InputPolicy, docs/pipeline.md): an
	// unknown field or a key in the wrong case is the same VALIDATION
	// answer on every protocol; tests.lenient allows unknown fields.
	{name: "input policy", steps: []step{
		{op: "billing.charge", input: `{"amount":5,"extra":true}`, want: operations.CodeUnknownField},
		{op: "billing.charge", input: `{"Amount":5}`, want: operations.CodeUnknownField},
		{op: "orders.create", input: `{"name":"widget","amount":1,"note":"x"}`, want: operations.CodeUnknownField},
		{op: "tests.lenient", input: `{"mode":"ok","extra":true}`, want: "OK"},
		{op: "billing.charge", input: `{"amount":5}`, want: "OK"},
	}},
	{name: "validation", steps: []step{
		{op: "orders.create", input: `{"name":"","amount":1}`, want: operations.CodeConstraint},
		{op: "orders.create", input: `{"name":"widget","amount":0}`, want: operations.CodeConstraint},
		{op: "reports.export", input: `{"delayMs":-1}`, want: operations.CodeConstraint},
	}},
	{name: "not found", steps: []step{
		{op: "orders.get", input: `{"id":"ord-9"}`, want: "SHOP_NOT_FOUND_001"},
	}},
	{name: "caller's deadline", steps: []step{
		{op: "reports.export", input: `{"delayMs":2000}`, timeout: 300 * time.Millisecond, want: pipeline.CodeTimeout},
		{op: "reports.export", input: `{"delayMs":0}`, timeout: 5 * time.Second, want: "OK"},
	}},
	{name: "dependency down", steps: []step{
		{op: "billing.charge", input: `{"amount":5,"fail":true}`, want: "SHOP_UNAVAILABLE_001"},
		{op: "billing.charge", input: `{"amount":5}`, want: "OK"},
	}},
	{name: "breaker opens", steps: []step{
		{op: "billing.charge", input: `{"amount":5,"fail":true}`, want: "SHOP_UNAVAILABLE_001"},
		{op: "billing.charge", input: `{"amount":5,"fail":true}`, want: "SHOP_UNAVAILABLE_001"},
		{op: "billing.charge", input: `{"amount":5,"fail":true}`, want: "SHOP_UNAVAILABLE_001"},
		{op: "billing.charge", input: `{"amount":5,"fail":true}`, want: "SHOP_UNAVAILABLE_001"},
		{op: "billing.charge", input: `{"amount":5,"fail":true}`, want: "SHOP_UNAVAILABLE_001"},
		{op: "billing.charge", input: `{"amount":5}`, want: resilience.CodeCircuitOpen},
	}},
	{name: "concurrency limit", steps: []step{
		{op: "reports.export", input: `{"delayMs":400}`, want: "OK", background: true},
		{op: "reports.export", input: `{"delayMs":400}`, want: "OK", background: true},
		{op: "reports.export", input: `{"delayMs":0}`, want: resilience.CodeConcurrencyLimited},
	}},
	{name: "context-ignoring handler answered at its deadline", policy: `{"TimeoutSeconds": 0.3}`, check: checkStallAnswered},
	{name: "trace IDs on every answer", check: checkTraceIDs},
	{name: "typed-nil errors", check: checkTypedNils},
	{name: "budget is the caller's", check: checkBudget},
	{name: "breaker: neutral outcomes keep the run of failures",
		policy: `{"FailureThreshold": 3, "BreakSeconds": 30, "PermitLimit": 3, "WindowSeconds": 1, "QueueLimit": 0}`,
		check:  checkBreakerNeutralClosed},
	{name: "breaker: neutral probes keep it half-open",
		policy: `{"FailureThreshold": 2, "BreakSeconds": 1, "PermitLimit": 3, "WindowSeconds": 1, "QueueLimit": 0}`,
		check:  checkBreakerNeutralHalfOpen},
	{name: "breaker: whose deadline fired",
		policy: `{"TimeoutSeconds": 0.3, "FailureThreshold": 2, "BreakSeconds": 30}`,
		check:  checkBreakerDeadlines},
	{name: "breaker: a context-ignoring probe frees its slot at its deadline",
		policy: `{"FailureThreshold": 2, "BreakSeconds": 1}`,
		check:  checkBreakerStalledProbe},
}

func TestConformance(t *testing.T) {
	for _, row := range conformanceRows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			for _, col := range conformanceColumns {
				t.Run(col.name, func(t *testing.T) {
					// A check that finds a call's handler did not start
					// before its deadline (shopEnv.ranFlaky) runs again on
					// a fresh shop, with ten times the deadlines of the
					// row's policy and of its check's calls (env.scale),
					// three tries in all.
					for try, scale := 1, 1; ; try, scale = try+1, 10*scale {
						env := newShopEnv(t, scaledPolicy(t, row.policy, scale))
						env.scale = scale
						c := col.start(t, env)
						// Registered after the shop's: cleanups run last
						// first, so stalled handlers return before the shop
						// shuts down (and waits for them).
						t.Cleanup(env.releaseStalled)
						runScenario(t, c, row.steps)
						if row.check != nil && !t.Failed() {
							row.check(t, c, env)
						}
						if env.late == "" || t.Failed() {
							return
						}
						if try == 3 {
							t.Fatalf("%s in 3 tries (the last with %d times the row's deadlines)", env.late, scale)
						}
						t.Logf("%s (%d times the row's deadlines): once more on a fresh shop, with ten times those", env.late, scale)
					}
				})
			}
		})
	}
}

func runScenario(t *testing.T, c caller, steps []step) {
	t.Helper()
	type pending struct {
		i    int
		code chan string
	}
	var bg []pending
	for i, s := range steps {
		if !s.background {
			if got := c.do(t, s.op, s.input, s.timeout).code; got != s.want {
				t.Errorf("step %d: %s %s = %s, want %s", i+1, s.op, s.input, got, s.want)
			}
			continue
		}
		p := pending{i, make(chan string, 1)}
		go func() { p.code <- c.do(t, s.op, s.input, s.timeout).code }()
		bg = append(bg, p)
		select {
		case <-c.started():
		case <-time.After(5 * time.Second):
			t.Fatalf("step %d: %s did not start", i+1, s.op)
		}
	}
	for _, p := range bg {
		s := steps[p.i]
		if got := <-p.code; got != s.want {
			t.Errorf("step %d (background): %s %s = %s, want %s", p.i+1, s.op, s.input, got, s.want)
		}
	}
}

// expect calls op and fails t unless the outcome code is want.
func expect(t *testing.T, c caller, op, input string, timeout time.Duration, want string) answer {
	t.Helper()
	a := c.do(t, op, input, timeout)
	if a.code != want {
		t.Fatalf("%s %s (timeout %v) = %s (%s), want %s", op, input, timeout, a.code, a.status, want)
	}
	return a
}

// flaky calls tests.flaky in mode and fails t unless the outcome code is
// want.
func flaky(t *testing.T, c caller, mode string, timeout time.Duration, want string) answer {
	t.Helper()
	return expect(t, c, "tests.flaky", `{"mode":"`+mode+`"}`, timeout, want)
}

// Outcome codes of tests.flaky.
const (
	codeFlakyInvalid = "TESTS_VALIDATION_001"
	codeFlakyDown    = "TESTS_UNAVAILABLE_001"
)

// flakyInput is the input of tests.flaky. Its mode says what the handler
// does:
//
//	ok           succeed
//	fail         fail with UNAVAILABLE TESTS_UNAVAILABLE_001 (a dependency down)
//	throttled    reject the call as an application rate limiter does
//	             (resilience.RateLimited: KERNEL_UNAVAILABLE_002)
//	hang         wait for its context to end, and return its error
//	stall        ignore its context: wait for the end of the test
//	nil-ours     return a typed nil *pipeline.Error
//	nil-foreign  return a typed nil *foreignError
//
// Any other mode fails validation (VALIDATION TESTS_VALIDATION_001).
type flakyInput struct {
	Mode string `json:"mode"`
}

// Validate implements operations.Validator.
func (in *flakyInput) Validate() error {
	switch in.Mode {
	case "ok", "fail", "throttled", "hang", "stall", "nil-ours", "nil-foreign":
		return nil
	}
	return pipeline.NewError(pipeline.KindValidation, codeFlakyInvalid, "mode is not one tests.flaky knows.").WithDetail("field", "mode")
}

// flakyOutput is the output of tests.flaky.
type flakyOutput struct {
	Mode string `json:"mode"`
}

// foreignError is an application error whose Error method reads its
// receiver: called on a typed nil, it panics.
type foreignError struct{ msg string }

func (e *foreignError) Error() string { return "foreign: " + e.msg }

// shopEnv is what the table adds to the shop of one scenario on one
// protocol: tests.flaky under the row's policy, an SDK tracer whose spans
// are recorded, and the release of the handlers that stall.
type shopEnv struct {
	reg     *operations.Registry
	policy  string
	spans   *tracetest.SpanRecorder
	tp      *sdktrace.TracerProvider
	release chan struct{} // closed by releaseStalled
	once    sync.Once
	// starts watches the calls of tests.flaky: whether their handler
	// started.
	starts *handlerStarts
	// scale is what the deadlines of the row's policy and of its check's
	// calls are multiplied by (1, then 10 and 100 for the tries after one
	// whose handler did not start); late, when not "", says which call's
	// handler did not start before its deadline.
	scale int
	late  string
}

// newShopEnv returns the environment of a scenario whose tests.flaky has
// policy ("" for none). Its tracer provider shuts down when t ends.
func newShopEnv(t *testing.T, policy string) *shopEnv {
	t.Helper()
	e := &shopEnv{policy: policy, spans: tracetest.NewSpanRecorder(), release: make(chan struct{}),
		starts: newHandlerStarts("tests.flaky"), scale: 1}
	e.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(e.spans))
	t.Cleanup(func() { e.tp.Shutdown(context.Background()) })
	e.reg = flakyRegistry(t, e.flaky)
	return e
}

// flakyRegistry returns the shop's operations and tests.flaky, served by
// h.
func flakyRegistry(t *testing.T, h func(context.Context, flakyInput) (flakyOutput, error)) *operations.Registry {
	t.Helper()
	reg, err := shopcmd.NewRegistry()
	if err == nil {
		err = operations.Register(reg, operations.Descriptor{
			ID: "tests.flaky", Summary: "Do what the mode says (conformance tests).", Method: "POST", Path: "/tests/flaky",
		}, h)
	}
	if err == nil {
		err = operations.Register(reg, operations.Descriptor{
			ID: "tests.lenient", Summary: "tests.flaky with unknown input fields allowed.", Method: "POST", Path: "/tests/lenient",
			InputPolicy: operations.InputPolicy{AllowUnknownFields: true},
		}, h)
	}
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// kernelOptions returns the kernel options of the environment, to add to
// the shop's.
func (e *shopEnv) kernelOptions() []kernel.Option {
	opts := append([]kernel.Option{kernel.WithRegistry(e.reg), kernel.WithTracerProvider(e.tp)}, e.starts.options()...)
	if e.policy != "" {
		opts = append(opts, kernel.WithConfigJSON([]byte(
			`{"Sundial":{"Kernel":{"Resilience":{"Operations":{"tests.flaky":`+e.policy+`}}}}}`)))
	}
	return opts
}

// scaledPolicy returns policy with its TimeoutSeconds, if it has one,
// multiplied by scale.
func scaledPolicy(t *testing.T, policy string, scale int) string {
	t.Helper()
	if policy == "" || scale == 1 {
		return policy
	}
	var p map[string]any
	if err := json.Unmarshal([]byte(policy), &p); err != nil {
		t.Fatalf("policy %s: %v", policy, err)
	}
	if s, ok := p["TimeoutSeconds"].(float64); ok {
		p["TimeoutSeconds"] = s * float64(scale)
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// ranFlaky reports whether the handler of the tests.flaky call just
// answered started (mark is e.starts.mark() from before the call). When
// it did not — its deadline passed first, and the kernel answered TIMEOUT
// without running it — it records that the check is to run again with
// ten times the row's deadlines (what names the call), and the check
// returns at once.
func (e *shopEnv) ranFlaky(t *testing.T, mark int64, what string) bool {
	t.Helper()
	if e.starts.ran(t, mark) {
		return true
	}
	e.late = what + ": the handler did not start before its deadline"
	return false
}

// releaseStalled makes the handlers stalled in mode "stall" return.
func (e *shopEnv) releaseStalled() { e.once.Do(func() { close(e.release) }) }

// flaky is the handler of tests.flaky.
func (e *shopEnv) flaky(ctx context.Context, in flakyInput) (flakyOutput, error) {
	switch in.Mode {
	case "fail":
		return flakyOutput{}, pipeline.NewError(pipeline.KindUnavailable, codeFlakyDown, "The flaky dependency is down.")
	case "throttled":
		return flakyOutput{}, resilience.RateLimited("tests.flaky", time.Second)
	case "hang":
		<-ctx.Done()
		return flakyOutput{}, ctx.Err()
	case "stall":
		<-e.release
	case "nil-ours":
		var err *pipeline.Error
		return flakyOutput{}, err
	case "nil-foreign":
		var err *foreignError
		return flakyOutput{}, err
	}
	return flakyOutput{Mode: in.Mode}, nil
}

// span waits for the ended span of op in the trace traceID.
func (e *shopEnv) span(t *testing.T, op, traceID string) sdktrace.ReadOnlySpan {
	t.Helper()
	end := time.Now().Add(3 * time.Second)
	for {
		for _, s := range e.spans.Ended() {
			if s.Name() == op && s.SpanContext().TraceID().String() == traceID {
				return s
			}
		}
		if time.Now().After(end) {
			t.Fatalf("no ended span %s in trace %s", op, traceID)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// accessLog is the access log of one protocol in the shop's log: one
// record per answer.
type accessLog struct {
	shopLogs
	msg      string // the message of its records
	traceKey string // the attribute holding the trace ID
	// match, if set, selects the records of the protocol further.
	match func(pipelinetest.Record) bool
}

func (l accessLog) isAccess(r pipelinetest.Record) bool {
	return r.Message == l.msg && (l.match == nil || l.match(r))
}

// records returns the access records written so far, oldest first.
func (l accessLog) records() []pipelinetest.Record { return l.Find(l.isAccess) }

// traceID returns the trace ID of the access record r.
func (l accessLog) traceID(r pipelinetest.Record) string {
	s, _ := r.Attrs[l.traceKey].(string)
	return s
}

// after waits up to 3 s for the first access record, from the n-th on
// (counting from 0), that match accepts.
func (l accessLog) after(n int, match func(pipelinetest.Record) bool) (pipelinetest.Record, bool) {
	var found pipelinetest.Record
	_, ok := l.WaitFor(3*time.Second, func(pipelinetest.Record) bool {
		recs := l.records()
		for _, r := range recs[min(n, len(recs)):] {
			if match(r) {
				found = r
				return true
			}
		}
		return false
	})
	return found, ok
}

// httpCaller calls the shop's HTTP routes.
type httpCaller struct {
	s   *shopServer
	ops map[string]*operations.Descriptor
}

func (h *httpCaller) started() <-chan string { return h.s.probe.started }

func (h *httpCaller) statusFor(k pipeline.Kind) string { return strconv.Itoa(httpadapter.StatusFor(k)) }

func (h *httpCaller) access() accessLog {
	return accessLog{shopLogs: h.s.logs, msg: "http request", traceKey: "traceId"}
}

func (h *httpCaller) do(t *testing.T, op, input string, timeout time.Duration) answer {
	t.Helper()
	if h.ops == nil {
		h.ops = descriptors(t)
	}
	d := h.ops[op]
	if d == nil {
		t.Errorf("no operation %s", op)
		return answer{}
	}
	path, body := d.Path, input
	var fields map[string]any
	if err := json.Unmarshal([]byte(input), &fields); err != nil {
		t.Errorf("input %s: %v", input, err)
		return answer{}
	}
	for name, v := range fields {
		if seg := ":" + name; strings.Contains(path, seg) {
			path = strings.Replace(path, seg, v.(string), 1)
		}
	}
	if d.Method == http.MethodGet {
		body = ""
	}
	header := map[string]string{}
	if timeout > 0 {
		header[httpadapter.DefaultRelativeDeadlineHeader] = strconv.FormatInt(timeout.Milliseconds(), 10)
	}
	return h.send(t, d.Method, path, body, header)
}

// send sends one request and returns what came back, with its access
// record.
func (h *httpCaller) send(t *testing.T, method, path, body string, header map[string]string) answer {
	t.Helper()
	log := h.access()
	n := len(log.records())
	start := time.Now()
	r := h.s.call(t, method, path, body, header)
	a := answer{code: "OK", status: strconv.Itoa(r.status), elapsed: time.Since(start)}
	if r.status >= 300 {
		a.code, _ = r.problem["code"].(string)
		a.traceID, _ = r.problem["traceId"].(string)
		a.problem = true
		title, _ := r.problem["title"].(string)
		// The adapter's own rejections keep the status HTTP has for them
		// (405 with Allow, 413); every other answer's is its kind's.
		own := map[string]int{"HTTP_NOT_FOUND_002": 405, "HTTP_VALIDATION_003": 413}
		if want, mine := own[a.code]; mine {
			if r.status != want {
				t.Errorf("%s %s: HTTP %d for %s, want %d", method, path, r.status, a.code, want)
			}
		} else if kind, ok := pipelinetest.ParseKind(title); !ok || httpadapter.StatusFor(kind) != r.status {
			t.Errorf("%s %s: HTTP %d for a %s outcome, want %d", method, path, r.status, title, httpadapter.StatusFor(kind))
		}
	}
	var ok bool
	if a.access, ok = log.after(n, func(rec pipelinetest.Record) bool {
		return rec.Attrs["method"] == method && rec.Attrs["path"] == path
	}); !ok {
		t.Errorf("%s %s: no access record:\n%s", method, path, h.s.logs)
	}
	return a
}

func (h *httpCaller) early(t *testing.T) map[string]answer {
	t.Helper()
	return map[string]answer{
		"malformed Sundial-Deadline": h.send(t, "POST", "/reports/export", `{"delayMs":0}`,
			map[string]string{httpadapter.HeaderDeadline: "in five seconds"}),
		"body that is not JSON": h.send(t, "POST", "/orders", `{"name":"widget","amount":}`, nil),
		"unknown route":         h.send(t, "GET", "/nope", "", nil),
		"method not allowed":    h.send(t, "DELETE", "/orders", "", nil),
		"body over the limit": h.send(t, "POST", "/orders",
			`{"name":"`+strings.Repeat("x", 1<<20)+`"}`, nil),
	}
}

// grpcCaller calls the shop's gRPC methods, built from the reflected
// descriptors.
type grpcCaller struct {
	g *grpcShop
}

func (c *grpcCaller) started() <-chan string { return c.g.probe.started }

func (c *grpcCaller) statusFor(k pipeline.Kind) string { return grpcadapter.CodeFor(k).String() }

func (c *grpcCaller) access() accessLog {
	return accessLog{shopLogs: c.g.logs, msg: "grpc call", traceKey: "traceId"}
}

// patientContext states a deadline that it does not keep: grpc-go sends
// it as grpc-timeout, but does not cancel the call when it passes. The
// caller waits for the server to end the call, as the HTTP and CLI
// callers do, so the outcome is the server's whatever the scheduler does.
// A context that ends at the deadline races the server's timer with the
// client's: when the request spent more than the kernel's tolerance in
// transit, its cancellation reaches the server first and is rightly
// CANCELLED (TestInboundAttribution).
type patientContext struct {
	context.Context
	deadline time.Time
}

func (p patientContext) Deadline() (time.Time, bool) { return p.deadline, true }

func (c *grpcCaller) do(t *testing.T, op, input string, timeout time.Duration) answer {
	t.Helper()
	ctx := t.Context()
	if timeout > 0 {
		ctx = patientContext{ctx, time.Now().Add(timeout)}
	}
	service, method := operations.GRPCNames(op)
	service = shopcmd.GRPCPackage + "." + service
	log := c.access()
	n := len(log.records())
	start := time.Now()
	_, st := c.g.call(ctx, t, service, method, input)
	a := answer{code: "OK", status: st.Code().String(), elapsed: time.Since(start)}
	ofCall := func(r pipelinetest.Record) bool { return r.Attrs["operation"] == op }
	if st != nil {
		ei := errorInfoOf(st)
		switch {
		case ei == nil && st.Code() == codes.DeadlineExceeded:
			// grpc-go's server resets the stream at its deadline; a
			// kernel answer that comes after (a handler ignoring its
			// context is answered a settle window later) never leaves.
			// The server's attribution is in its log.
			ofCall = func(r pipelinetest.Record) bool {
				return r.Attrs["operation"] == op && r.Attrs["grpcCode"] == codes.DeadlineExceeded.String()
			}
		case ei == nil:
			t.Errorf("%s/%s: status %v without ErrorInfo", service, method, st)
		default:
			a.code = ei.GetReason()
			if kind, ok := kindOfCode(a.code); !ok || grpcadapter.CodeFor(kind) != st.Code() {
				t.Errorf("%s/%s: gRPC code %v for outcome %s, want %v", service, method, st.Code(), a.code, grpcadapter.CodeFor(kind))
			}
		}
	}
	var ok bool
	if a.access, ok = log.after(n, ofCall); !ok {
		t.Errorf("%s/%s: no call record:\n%s", service, method, c.g.logs)
		return a
	}
	if st != nil && errorInfoOf(st) == nil {
		a.code, _ = a.access.Attrs["code"].(string)
	}
	return a
}

// rawCodec sends and receives messages as the bytes given.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return v.([]byte), nil }

func (rawCodec) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), data...)
	return nil
}

func (rawCodec) Name() string { return "proto" }

func (c *grpcCaller) early(t *testing.T) map[string]answer {
	t.Helper()
	// The adapter's methods reject a request that is not protobuf, and its
	// UnknownServiceHandler (which the shop installs) answers a method the
	// server does not have.
	out := map[string]answer{}
	for _, tc := range []struct{ name, method string }{
		{"request that is not protobuf", "/shop.v1.Orders/Create"},
		{"unknown method", "/shop.v1.Orders/Nope"},
	} {
		log := c.access()
		n := len(log.records())
		var resp []byte
		err := c.g.conn.Invoke(t.Context(), tc.method, []byte{0xff, 0xff, 0xff}, &resp, grpc.ForceCodec(rawCodec{}))
		st := status.Convert(err)
		a := answer{status: st.Code().String()}
		if err == nil {
			t.Errorf("%s was answered OK", tc.name)
		}
		var ok bool
		if a.access, ok = log.after(n, func(r pipelinetest.Record) bool { return r.Attrs["method"] == tc.method }); !ok {
			t.Errorf("%s left no call record:\n%s", tc.name, c.g.logs)
		}
		// grpc-go's decoder status and Unimplemented go back without
		// ErrorInfo: the outcome's code is in the call record.
		a.code, _ = a.access.Attrs["code"].(string)
		out[tc.name] = a
	}
	return out
}

// kindOfCode reads the outcome kind from a stable code, which is
// <DOMAIN>_<KIND>_<NNN> (KERNEL_TIMEOUT_001, SHOP_NOT_FOUND_001).
func kindOfCode(code string) (pipeline.Kind, bool) {
	i, j := strings.IndexByte(code, '_'), strings.LastIndexByte(code, '_')
	if i < 0 || j <= i {
		return pipeline.KindUnexpected, false
	}
	return pipelinetest.ParseKind(code[i+1 : j])
}

// descriptors returns the shop's operations, and tests.flaky, by ID.
func descriptors(t *testing.T) map[string]*operations.Descriptor {
	t.Helper()
	out := map[string]*operations.Descriptor{}
	for _, d := range flakyRegistry(t, new(shopEnv).flaky).All() {
		out[d.ID] = d
	}
	return out
}

var traceIDPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)

// wantTraceID checks that the answer a, named what, carries a real W3C
// trace ID where its protocol has a field for one, and that its access
// record has the same one.
func wantTraceID(t *testing.T, c caller, what string, a answer) string {
	t.Helper()
	id := c.access().traceID(a.access)
	if !traceIDPattern.MatchString(id) || id == strings.Repeat("0", 32) {
		t.Errorf("%s: access record traceId %q, want a W3C trace ID (record %v)", what, id, a.access.Attrs)
	}
	if a.problem && a.traceID != id {
		t.Errorf("%s: the answer's traceId is %q, its access record's %q: want the same", what, a.traceID, id)
	}
	return id
}

// A handler that ignores its context, under TimeoutSeconds 0.3 and no
// caller's deadline: the answer leaves at the deadline (TIMEOUT) whatever
// the handler does, and once the handler returns the kernel logs its late
// result once, with the trace ID. A handler whose deadline passed before
// it could start never runs: the row then runs again on a fresh shop with
// ten times the deadline (env.scale).
func checkStallAnswered(t *testing.T, c caller, env *shopEnv) {
	deadline := time.Duration(env.scale) * 300 * time.Millisecond // TimeoutSeconds
	mark := env.starts.mark()
	a := flaky(t, c, "stall", 0, pipeline.CodeTimeout)
	if want := c.statusFor(pipeline.KindTimeout); a.status != want {
		t.Errorf("status %s, want %s", a.status, want)
	}
	// Only a handler that started stalls and returns a late result.
	if !env.ranFlaky(t, mark, fmt.Sprintf("the stalled call (deadline %v)", deadline)) {
		return
	}
	// Timers never fire early: the answer comes no sooner than the
	// deadline. It came while the handler was still stalled (it has
	// returned no late result yet), so the kernel did not wait for it;
	// how soon after the deadline it leaves is
	// TestContextIgnoringHandlerAnsweredAtDeadline's, on a clock of its own.
	if a.elapsed < deadline-10*time.Millisecond {
		t.Errorf("answered after %v, before the %v deadline", a.elapsed, deadline)
	}
	id := wantTraceID(t, c, "the answer at the deadline", a)
	late := func(r pipelinetest.Record) bool {
		return r.Message == "kernel: late result discarded" && r.Attrs["operation"] == "tests.flaky"
	}
	if n := len(c.access().Find(late)); n != 0 {
		t.Errorf("%d late-result records before the stalled handler was released, want 0", n)
	}

	env.releaseStalled()
	rec := c.access().waitWhere(t, late)
	if rec.Attrs["traceId"] != id || rec.Attrs["code"] != pipeline.CodeTimeout {
		t.Errorf("late-result record %v, want traceId %s and code %s", rec.Attrs, id, pipeline.CodeTimeout)
	}
	flaky(t, c, "ok", 0, "OK") // the shop serves on
	if n := len(c.access().Find(late)); n != 1 {
		t.Errorf("%d late-result records, want 1:\n%s", n, c.access().shopLogs)
	}
}

// Every answer carries a trace ID when an SDK tracer is installed — a
// success, a failure, and the protocol's early rejections, which never
// reach the pipeline — and it is its access record's.
func checkTraceIDs(t *testing.T, c caller, _ *shopEnv) {
	ids := map[string]string{}
	add := func(what string, a answer) {
		t.Helper()
		id := wantTraceID(t, c, what, a)
		if other, dup := ids[id]; dup && id != "" {
			t.Errorf("%s and %s share the trace ID %s", what, other, id)
		}
		ids[id] = what
	}
	add("a success", expect(t, c, "orders.create", `{"name":"widget","amount":1}`, 0, "OK"))
	add("a failure", expect(t, c, "orders.get", `{"id":"ord-9"}`, 0, "SHOP_NOT_FOUND_001"))
	for what, a := range c.early(t) {
		if a.code == "OK" {
			t.Errorf("%s: answered %s %s, want a failure", what, a.status, a.code)
		}
		add(what, a)
	}
}

// A handler returning a typed-nil error — ours, or an application's whose
// Error method reads its receiver — is an UNEXPECTED outcome on every
// protocol, with the shop's loggers on: no crash, one access record.
func checkTypedNils(t *testing.T, c caller, _ *shopEnv) {
	unexpected := func(r pipelinetest.Record) bool {
		return r.Attrs["operation"] == "tests.flaky" && r.Attrs["code"] == pipeline.CodeUnexpected
	}
	for i, mode := range []string{"nil-ours", "nil-foreign"} {
		a := flaky(t, c, mode, 0, pipeline.CodeUnexpected)
		if want := c.statusFor(pipeline.KindUnexpected); a.status != want {
			t.Errorf("%s: status %s, want %s", mode, a.status, want)
		}
		// The shop serves on; once the next call's record is written, the
		// typed nil's are all there.
		flaky(t, c, "ok", 0, "OK")
		if n := len(c.access().Find(func(r pipelinetest.Record) bool { return c.access().isAccess(r) && unexpected(r) })); n != i+1 {
			t.Errorf("after %s: %d access records of UNEXPECTED outcomes, want %d:\n%s", mode, n, i+1, c.access().shopLogs)
		}
	}
}

// The deadline budget the span reports is what the caller sent (100 s),
// although the kernel's cap (MaxTimeoutSeconds 30) binds.
func checkBudget(t *testing.T, c caller, env *shopEnv) {
	const sent, capped = 100 * time.Second, 30 * time.Second
	a := flaky(t, c, "ok", sent, "OK")
	s := env.span(t, "tests.flaky", wantTraceID(t, c, "the call", a))
	var budget int64 = -1
	var deadline time.Time
	for _, kv := range s.Attributes() {
		switch kv.Key {
		case attribute.Key("sundial.deadline.budget_ms"):
			budget = kv.Value.AsInt64()
		case attribute.Key("sundial.deadline"):
			deadline, _ = time.Parse(time.RFC3339Nano, kv.Value.AsString())
		}
	}
	if budget < (sent-time.Second).Milliseconds() || budget > sent.Milliseconds() {
		t.Errorf("sundial.deadline.budget_ms = %d, want the caller's %d ms (less the transit)", budget, sent.Milliseconds())
	}
	if d := deadline.Sub(s.StartTime()); d > capped || d < capped-time.Second {
		t.Errorf("sundial.deadline is %v after the start, want the kernel's cap %v", d, capped)
	}
}

// untilRateLimited calls tests.flaky with an invalid input until its rate
// limiter turns a call away. Every call is neutral for the breaker.
func untilRateLimited(t *testing.T, c caller) {
	t.Helper()
	for range 50 {
		switch a := c.do(t, "tests.flaky", `{"mode":"invalid"}`, 0); a.code {
		case resilience.CodeRateLimited:
			return
		case codeFlakyInvalid:
		default:
			t.Fatalf("an invalid call = %s, want %s or %s", a.code, codeFlakyInvalid, resilience.CodeRateLimited)
		}
	}
	t.Fatal("50 calls and the rate limiter never turned one away")
}

// (a) With the breaker closed, a VALIDATION outcome and rate-limit
// rejections (an application's and the operation's limiter's) neither
// count nor reset the run of failures: the third failure opens it.
func checkBreakerNeutralClosed(t *testing.T, c caller, _ *shopEnv) {
	const window = time.Second // WindowSeconds
	flaky(t, c, "fail", 0, codeFlakyDown)
	flaky(t, c, "fail", 0, codeFlakyDown)
	flaky(t, c, "invalid", 0, codeFlakyInvalid)
	flaky(t, c, "throttled", 0, resilience.CodeRateLimited)
	untilRateLimited(t, c)
	time.Sleep(window) // the next call is in a window of its own
	flaky(t, c, "fail", 0, codeFlakyDown)
	flaky(t, c, "ok", 0, resilience.CodeCircuitOpen)
}

// (a) With the breaker half-open, a VALIDATION outcome and rate-limit
// rejections are neutral probes: each frees the slot for the next call,
// none closes the breaker, and the failure of the next probe re-opens it.
func checkBreakerNeutralHalfOpen(t *testing.T, c caller, _ *shopEnv) {
	const breakFor, window = time.Second, time.Second // BreakSeconds, WindowSeconds
	flaky(t, c, "fail", 0, codeFlakyDown)
	flaky(t, c, "fail", 0, codeFlakyDown)
	flaky(t, c, "ok", 0, resilience.CodeCircuitOpen)
	time.Sleep(breakFor) // half-open from now on; a fresh window too
	flaky(t, c, "invalid", 0, codeFlakyInvalid)
	flaky(t, c, "throttled", 0, resilience.CodeRateLimited)
	untilRateLimited(t, c)
	time.Sleep(window)
	flaky(t, c, "fail", 0, codeFlakyDown)            // the probe that counts
	flaky(t, c, "ok", 0, resilience.CodeCircuitOpen) // re-opened: FailureThreshold 2 was not what did it
}

// (b) A handler honouring its context stopped by the operation's own
// TimeoutSeconds counts as a failure; stopped by the caller's shorter
// deadline, it does not.
//
// Each hanging call's handler must start for the call to say anything: one
// whose deadline passed first never starts, and the kernel counts it as
// neutral whichever deadline it was. The row then runs again on a fresh
// shop with ten times both deadlines (env.scale).
func checkBreakerDeadlines(t *testing.T, c caller, env *shopEnv) {
	callers := time.Duration(env.scale) * 100 * time.Millisecond // shorter than TimeoutSeconds
	own := time.Duration(env.scale) * 300 * time.Millisecond     // TimeoutSeconds
	hang := func(timeout time.Duration, what string) bool {
		t.Helper()
		mark := env.starts.mark()
		flaky(t, c, "hang", timeout, pipeline.CodeTimeout)
		return env.ranFlaky(t, mark, what)
	}
	for i := range 3 { // FailureThreshold 2: neutral, or the breaker opens
		if !hang(callers, fmt.Sprintf("hanging call %d under the caller's %v", i+1, callers)) {
			return
		}
	}
	flaky(t, c, "ok", 0, "OK")
	for i := range 2 {
		if !hang(0, fmt.Sprintf("hanging call %d under the operation's %v", i+1, own)) {
			return
		}
	}
	flaky(t, c, "ok", 0, resilience.CodeCircuitOpen)
}

// (c) A half-open probe whose handler ignores its context frees the slot
// at its deadline (the caller's: neutral): the next call is admitted as
// the probe while the first handler still runs, and closes the breaker.
func checkBreakerStalledProbe(t *testing.T, c caller, _ *shopEnv) {
	const breakFor = time.Second // BreakSeconds
	flaky(t, c, "fail", 0, codeFlakyDown)
	flaky(t, c, "fail", 0, codeFlakyDown)
	flaky(t, c, "ok", 0, resilience.CodeCircuitOpen)
	time.Sleep(breakFor) // half-open from now on
	flaky(t, c, "stall", 300*time.Millisecond, pipeline.CodeTimeout)
	flaky(t, c, "ok", 0, "OK")
	flaky(t, c, "fail", 0, codeFlakyDown) // closed: one failure does not open it
	flaky(t, c, "ok", 0, "OK")
}
