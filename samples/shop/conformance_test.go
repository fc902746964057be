package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/sundial-go/sundial/adapters/grpcadapter"
	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/samples/shop/app"
)

// The conformance table: every row is a scenario — a sequence of calls on
// a fresh shop — and every column a protocol. Each call names its
// operation, its JSON input and the caller's timeout, and the outcome code
// it must end with ("OK" for success) on every protocol. A column also
// checks that its protocol's own status (HTTP status, gRPC code, exit code) is the one
// DESIGN.md's table gives for the outcome's kind.
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

// caller calls one fresh shop over one protocol.
type caller interface {
	// call runs op with the JSON input and the caller's timeout and returns
	// the outcome code ("OK" for success), failing t when the protocol's
	// own status does not match the outcome's kind.
	call(t *testing.T, op, input string, timeout time.Duration) string
	// started receives the operation ID of every call that reaches its
	// handler.
	started() <-chan string
}

// column is one protocol of the table.
type column struct {
	name  string
	start func(t *testing.T) caller
}

var conformanceColumns = []column{
	{"http", func(t *testing.T) caller { return &httpCaller{s: startShopHTTP(t, serveOptions{})} }},
	{"grpc", func(t *testing.T) caller { return &grpcCaller{g: startShopGRPC(t, serveOptions{})} }},
	{"cli", func(t *testing.T) caller { return newCLICaller(t) }}, // exit codes; cliCaller in cli_test.go
}

var conformanceRows = []struct {
	name  string
	steps []step
}{
	{"create and get", []step{
		{op: "orders.create", input: `{"name":"widget","amount":1}`, want: "OK"},
		{op: "orders.get", input: `{"id":"ord-1"}`, want: "OK"},
	}},
	{"three orders", []step{
		{op: "orders.create", input: `{"name":"widget","amount":1}`, want: "OK"},
		{op: "orders.create", input: `{"name":"widget","amount":1}`, want: "OK"},
		{op: "orders.create", input: `{"name":"widget","amount":1}`, want: pipeline.CodeRateLimited},
	}},
	{"validation", []step{
		{op: "orders.create", input: `{"name":"","amount":1}`, want: "SHOP_VALIDATION_001"},
		{op: "orders.create", input: `{"name":"widget","amount":0}`, want: "SHOP_VALIDATION_001"},
		{op: "reports.export", input: `{"delayMs":-1}`, want: "SHOP_VALIDATION_001"},
	}},
	{"not found", []step{
		{op: "orders.get", input: `{"id":"ord-9"}`, want: "SHOP_NOT_FOUND_001"},
	}},
	{"caller's deadline", []step{
		{op: "reports.export", input: `{"delayMs":2000}`, timeout: 300 * time.Millisecond, want: pipeline.CodeTimeout},
		{op: "reports.export", input: `{"delayMs":0}`, timeout: 5 * time.Second, want: "OK"},
	}},
	{"dependency down", []step{
		{op: "billing.charge", input: `{"amount":5,"fail":true}`, want: "SHOP_UNAVAILABLE_001"},
		{op: "billing.charge", input: `{"amount":5}`, want: "OK"},
	}},
	{"breaker opens", []step{
		{op: "billing.charge", input: `{"amount":5,"fail":true}`, want: "SHOP_UNAVAILABLE_001"},
		{op: "billing.charge", input: `{"amount":5,"fail":true}`, want: "SHOP_UNAVAILABLE_001"},
		{op: "billing.charge", input: `{"amount":5,"fail":true}`, want: "SHOP_UNAVAILABLE_001"},
		{op: "billing.charge", input: `{"amount":5,"fail":true}`, want: "SHOP_UNAVAILABLE_001"},
		{op: "billing.charge", input: `{"amount":5,"fail":true}`, want: "SHOP_UNAVAILABLE_001"},
		{op: "billing.charge", input: `{"amount":5}`, want: pipeline.CodeCircuitOpen},
	}},
	{"concurrency limit", []step{
		{op: "reports.export", input: `{"delayMs":400}`, want: "OK", background: true},
		{op: "reports.export", input: `{"delayMs":400}`, want: "OK", background: true},
		{op: "reports.export", input: `{"delayMs":0}`, want: pipeline.CodeConcurrencyLimited},
	}},
}

func TestConformance(t *testing.T) {
	for _, row := range conformanceRows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			for _, col := range conformanceColumns {
				t.Run(col.name, func(t *testing.T) {
					runScenario(t, col.start(t), row.steps)
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
			if got := c.call(t, s.op, s.input, s.timeout); got != s.want {
				t.Errorf("step %d: %s %s = %s, want %s", i+1, s.op, s.input, got, s.want)
			}
			continue
		}
		p := pending{i, make(chan string, 1)}
		go func() { p.code <- c.call(t, s.op, s.input, s.timeout) }()
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

// descriptors returns the shop's operations by ID.
func descriptors(t *testing.T) map[string]*operations.Descriptor {
	t.Helper()
	reg := operations.NewRegistry()
	if err := app.New().Register(reg); err != nil {
		t.Fatal(err)
	}
	out := map[string]*operations.Descriptor{}
	for _, d := range reg.All() {
		out[d.ID] = d
	}
	return out
}

// httpCaller calls the shop's HTTP routes.
type httpCaller struct {
	s   *shopServer
	ops map[string]*operations.Descriptor
}

func (h *httpCaller) started() <-chan string { return h.s.probe.started }

func (h *httpCaller) call(t *testing.T, op, input string, timeout time.Duration) string {
	t.Helper()
	if h.ops == nil {
		h.ops = descriptors(t)
	}
	d := h.ops[op]
	path, body := d.Path, input
	var fields map[string]any
	if err := json.Unmarshal([]byte(input), &fields); err != nil {
		t.Fatalf("input %s: %v", input, err)
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
		header[httpadapter.HeaderDeadline] = httpadapter.FormatDeadline(time.Now().Add(timeout))
	}
	r := h.s.call(t, d.Method, path, body, header)
	if r.status < 300 {
		return "OK"
	}
	code, _ := r.problem["code"].(string)
	title, _ := r.problem["title"].(string)
	if kind, ok := pipeline.ParseKind(title); !ok || httpadapter.StatusFor(kind) != r.status {
		t.Errorf("%s %s: HTTP %d for a %s outcome, want %d", d.Method, path, r.status, title, httpadapter.StatusFor(kind))
	}
	return code
}

// grpcCaller calls the shop's gRPC methods, built from the reflected
// descriptors.
type grpcCaller struct {
	g *grpcShop
}

func (c *grpcCaller) started() <-chan string { return c.g.probe.started }

func (c *grpcCaller) call(t *testing.T, op, input string, timeout time.Duration) string {
	t.Helper()
	ctx := t.Context()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	service := grpcPackage + "." + operations.PascalCase(operations.Group(op))
	method := operations.PascalCase(operations.Name(op))
	_, st := c.g.call(ctx, t, service, method, input)
	if st == nil {
		return "OK"
	}
	ei := errorInfoOf(st)
	if ei == nil && (st.Code() == codes.DeadlineExceeded || st.Code() == codes.Canceled) {
		// The client's own timer ended the call before the server's
		// answer came back: the server's attribution is in its log.
		rec := c.g.logs.waitGRPCRecordWhere(t, func(m map[string]any) bool {
			return m["operation"] == op && m["grpcCode"] == st.Code().String()
		})
		return rec["code"].(string)
	}
	if ei == nil {
		t.Fatalf("%s/%s: status %v without ErrorInfo", service, method, st)
	}
	if kind, ok := kindOfCode(ei.GetReason()); !ok || grpcadapter.CodeFor(kind) != st.Code() {
		t.Errorf("%s/%s: gRPC code %v for outcome %s, want %v", service, method, st.Code(), ei.GetReason(), grpcadapter.CodeFor(kind))
	}
	return ei.GetReason()
}

// kindOfCode reads the outcome kind from a stable code, which is
// <DOMAIN>_<KIND>_<NNN> (KERNEL_TIMEOUT_001, SHOP_NOT_FOUND_001).
func kindOfCode(code string) (pipeline.Kind, bool) {
	i, j := strings.IndexByte(code, '_'), strings.LastIndexByte(code, '_')
	if i < 0 || j <= i {
		return pipeline.KindUnexpected, false
	}
	return pipeline.ParseKind(code[i+1 : j])
}
