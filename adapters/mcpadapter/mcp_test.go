package mcpadapter_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/baggage"

	"github.com/labstack/echo/v4"

	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/adapters/mcpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

func bagMember(ctx context.Context, key string) string {
	return baggage.FromContext(ctx).Member(key).Value()
}

// TestToolsAreTheOperations: the SDK's client lists one tool per
// operation: its ID as name, its summary as description, as inputSchema
// the very request body schema of the OpenAPI document (constraints
// included), and the output type's schema as outputSchema.
func TestToolsAreTheOperations(t *testing.T) {
	k := newKernel(t, newProbe(), nil)
	url, _ := serve(t, k, nil)
	cs := connectHTTP(t, url)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	a, err := httpadapter.Mount(e, k)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := a.OpenAPI(httpadapter.OpenAPIInfo{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		d := opByID(t, k.Operations(), tool.Name)
		if d.Kind() != operations.Unary {
			continue // TestToolStreamSchemas
		}
		if tool.Description != d.Summary {
			t.Errorf("%s: description %q, want the summary %q", tool.Name, tool.Description, d.Summary)
		}
		op := doc.Paths.Find(d.Path).GetOperation(d.Method)
		var want any = map[string]any{"type": "object", "additionalProperties": false} // no fields
		if op.RequestBody != nil {
			want = op.RequestBody.Value.Content.Get("application/json").Schema.Value
		}
		if !jsonEqual(tool.InputSchema, want) {
			in, _ := json.Marshal(tool.InputSchema)
			w, _ := json.Marshal(want)
			t.Errorf("%s: inputSchema %s, want the OpenAPI request body's %s", tool.Name, in, w)
		}
		ok := op.Responses.Status(200)
		if ok == nil {
			ok = op.Responses.Status(201)
		}
		out := ok.Value.Content.Get("application/json").Schema.Value
		if !jsonEqual(tool.OutputSchema, out) {
			t.Errorf("%s: outputSchema %v, want the OpenAPI response's", tool.Name, tool.OutputSchema)
		}
	}
	if got := strings.Join(names, " "); got != "orders.create orders.fail orders.feed orders.gush orders.hush orders.limited "+
		"orders.pay orders.ration orders.slow orders.tail orders.wait" {
		t.Errorf("tools %q, want one per unary operation and server stream", got)
	}
	in, _ := json.Marshal(res.Tools[0].InputSchema)
	for _, c := range []string{`"maxLength":10`, `"minimum":1`, `"enum":["EUR","USD"]`, `"required":["name"`} {
		if !bytes.Contains(in, []byte(c)) {
			t.Errorf("orders.create inputSchema %s lacks the constraint %s", in, c)
		}
	}
}

func opByID(t *testing.T, ops []*kernelOp, id string) *operations.Descriptor {
	t.Helper()
	for _, op := range ops {
		if op.Descriptor().ID == id {
			return op.Descriptor()
		}
	}
	t.Fatalf("no operation %q", id)
	return nil
}

// TestOptionsOperations: Options.Operations chooses the tools; an ID the
// kernel does not serve fails New. Client and bidi streams take a stream
// of inputs, which one tool call cannot send: they are left out of the
// default set, and naming one fails New.
func TestOptionsOperations(t *testing.T) {
	k := newKernel(t, newProbe(), nil)
	if names := toolNames(t, k, nil); strings.Contains(names, "orders.upload") || strings.Contains(names, "orders.chat") {
		t.Errorf("tools %q include a client or bidi stream", names)
	}
	for _, id := range []string{"orders.upload", "orders.chat"} {
		if _, err := mcpadapter.New(k, &mcpadapter.Options{Operations: []string{id}}); err == nil ||
			!strings.Contains(err.Error(), id) || !strings.Contains(err.Error(), "stream of inputs") {
			t.Errorf("New naming %s: %v, want an error naming it and why", id, err)
		}
	}
	url, _ := serve(t, k, &mcpadapter.Options{Operations: []string{"orders.create"}})
	res, err := connectHTTP(t, url).ListTools(context.Background(), nil)
	if err != nil || len(res.Tools) != 1 || res.Tools[0].Name != "orders.create" {
		t.Fatalf("tools %v (%v), want orders.create alone", res, err)
	}
	if _, err := mcpadapter.New(k, &mcpadapter.Options{Operations: []string{"orders.nope"}}); err == nil ||
		!strings.Contains(err.Error(), "orders.nope") {
		t.Errorf("New with an unknown operation: %v, want an error naming it", err)
	}
}

// refusalCase is one input, sent over HTTP and as a tool call.
type refusalCase struct {
	name    string
	path    string // HTTP
	body    string
	headers map[string]string
	tool    string // MCP
	args    any
	meta    mcp.Meta
	// want: refused or not, and the code over HTTP and over MCP ("": the
	// same as HTTP's). A JSON-RPC error has code "rpc".
	refused  bool
	code     string
	mcpCode  string
	errors   int
	retry    bool
	sameBody bool
	// retryFrom names the row whose call started the retry-after's clock;
	// "": the kernel's start (a rate limit's windows). The clock is 60 s.
	retryFrom string
}

// retryClock is the length of orders.limited's window and orders.fail's
// break (testConfig).
const retryClock = 60 * time.Second

var refusalCases = []refusalCase{
	{name: "ok", path: "/orders", body: `{"name":"pen","amount":2,"currency":"EUR"}`,
		tool: "orders.create", args: map[string]any{"name": "pen", "amount": 2, "currency": "EUR"}, sameBody: true},
	{name: "every violation", path: "/orders", body: `{"name":"far too long a name","amount":0,"currency":"GBP"}`,
		tool: "orders.create", args: map[string]any{"name": "far too long a name", "amount": 0, "currency": "GBP"},
		refused: true, code: operations.CodeConstraint, errors: 3},
	{name: "wrong type", path: "/orders", body: `{"name":"pen","amount":"two","currency":"EUR"}`,
		tool: "orders.create", args: map[string]any{"name": "pen", "amount": "two", "currency": "EUR"},
		refused: true, code: "HTTP_VALIDATION_002", mcpCode: "MCP_VALIDATION_001"},
	{name: "unknown field", path: "/orders", body: `{"name":"pen","amount":2,"currency":"EUR","colour":"red"}`,
		tool: "orders.create", args: map[string]any{"name": "pen", "amount": 2, "currency": "EUR", "colour": "red"},
		refused: true, code: "KERNEL_VALIDATION_003"},
	{name: "malformed arguments", path: "/orders", body: `[1]`,
		tool: "orders.create", args: json.RawMessage(`[1]`), refused: true, code: "HTTP_VALIDATION_002", mcpCode: "rpc"},
	{name: "unknown tool", path: "/nope", body: `{}`, tool: "orders.nope", args: map[string]any{},
		refused: true, code: "HTTP_NOT_FOUND_001", mcpCode: "rpc"},
	{name: "first call in the window", path: "/limited", body: `{}`, tool: "orders.limited", args: map[string]any{}},
	{name: "rate limited", path: "/limited", body: `{}`, tool: "orders.limited", args: map[string]any{},
		refused: true, code: "KERNEL_UNAVAILABLE_002", retry: true},
	{name: "first failure", path: "/fail", body: `{}`, tool: "orders.fail", args: map[string]any{},
		refused: true, code: pipeline.CodeUnexpected},
	{name: "second failure", path: "/fail", body: `{}`, tool: "orders.fail", args: map[string]any{},
		refused: true, code: pipeline.CodeUnexpected},
	{name: "breaker open", path: "/fail", body: `{}`, tool: "orders.fail", args: map[string]any{},
		refused: true, code: "KERNEL_UNAVAILABLE_004", retry: true, retryFrom: "second failure"},
	{name: "operation deadline", path: "/slow", body: `{}`, tool: "orders.slow", args: map[string]any{},
		refused: true, code: pipeline.CodeTimeout},
	{name: "caller deadline", path: "/wait", body: `{}`, headers: map[string]string{"Sundial-Timeout-Ms": "50"},
		tool: "orders.wait", args: map[string]any{}, meta: mcp.Meta{"sundial/timeoutMs": 50},
		refused: true, code: pipeline.CodeTimeout},
	{name: "malformed deadline", path: "/wait", body: `{}`, headers: map[string]string{"Sundial-Deadline": "soon"},
		tool: "orders.wait", args: map[string]any{}, meta: mcp.Meta{"sundial/timeoutMs": "soon"},
		refused: true, code: "KERNEL_VALIDATION_002"},
	{name: "idempotency key required", path: "/pay", body: `{}`, tool: "orders.pay", args: map[string]any{},
		refused: true, code: "KERNEL_VALIDATION_004"},
	{name: "malformed idempotency key", path: "/pay", body: `{}`, headers: map[string]string{"Idempotency-Key": "unquoted"},
		tool: "orders.pay", args: map[string]any{}, meta: mcp.Meta{"sundial/idempotency-key": 7},
		refused: true, code: "KERNEL_VALIDATION_005"},
	{name: "priority naming no class", path: "/orders", body: `{"name":"pen","amount":2,"currency":"EUR"}`,
		headers: map[string]string{"Sundial-Priority": "urgent"},
		tool:    "orders.create", args: map[string]any{"name": "pen", "amount": 2, "currency": "EUR"},
		meta: mcp.Meta{"sundial/priority": "urgent"}, refused: true, code: "KERNEL_VALIDATION_009"},
}

// TestRefusedExactlyAsOverHTTP: one table of inputs, sent over HTTP and
// as tool calls over Streamable HTTP and stdio, each on a kernel of its
// own, the breaker's rows included. A tool call is refused exactly when
// the HTTP request is, with the same code, status, retry-after and
// failing fields. The only codes that
// differ are the transport's own: a wrong type (MCP_VALIDATION_001), and
// malformed arguments and an unknown tool, which are JSON-RPC errors.
func TestRefusedExactlyAsOverHTTP(t *testing.T) {
	// started: when each kernel, and so its rate limit's windows, started.
	// calls: when each row's call ran, by transport.
	started := map[string]span{}
	calls := map[string]map[string]span{"HTTP": {}, "streamable HTTP": {}, "stdio": {}}
	start := time.Now()
	kh := newKernel(t, newProbe(), nil)
	urlHTTP, _ := serve(t, kh, nil)
	started["HTTP"], start = since(start), time.Now()
	km := newKernel(t, newProbe(), nil)
	urlMCP, _ := serve(t, km, nil)
	started["streamable HTTP"], start = since(start), time.Now()
	ks := newKernel(t, newProbe(), nil)
	_, ms := serve(t, ks, nil)
	started["stdio"] = since(start)
	// The clock of the retry-after of row c over transport: the seconds
	// left are read during the call, from a start known to a span. The
	// kernels start, and the rows run, at different instants, so two
	// transports may round their seconds left differently.
	checkRetry := func(c refusalCase, transport string, retryAfter any) {
		if !c.retry {
			return
		}
		from := started[transport]
		if c.retryFrom != "" {
			from = calls[transport][c.retryFrom]
		}
		if lo, hi, ok := retryWithin(retryAfter, retryClock, from, calls[transport][c.name]); !ok {
			t.Errorf("%s over %s: retryAfter %v, want whole seconds in [%d, %d], what is left of %v",
				c.name, transport, retryAfter, lo, hi, retryClock)
		}
	}
	sessions := map[string]*mcp.ClientSession{"streamable HTTP": connectHTTP(t, urlMCP), "stdio": connectStdio(t, ms)}
	for _, c := range refusalCases {
		start := time.Now()
		h := httpCall(t, urlHTTP, c.path, c.body, c.headers)
		calls["HTTP"][c.name] = since(start)
		took := map[string]time.Duration{"HTTP": time.Since(start)}
		if h.refused != c.refused || h.code != c.code {
			t.Fatalf("%s: HTTP refused=%v code %q, want %v %q", c.name, h.refused, h.code, c.refused, c.code)
		}
		checkRetry(c, "HTTP", h.retryAfter)
		for transport, cs := range sessions {
			start := time.Now()
			m := mcpCall(context.Background(), t, cs, c.tool, c.args, c.meta)
			calls[transport][c.name] = since(start)
			took[transport] = time.Since(start)
			want := c.code
			if c.mcpCode != "" {
				want = c.mcpCode
			}
			got := m.code
			if m.rpcError {
				got = "rpc"
			}
			if m.refused != h.refused || got != want {
				t.Errorf("%s over %s: refused=%v code %q, want %v %q (HTTP: %q)", c.name, transport, m.refused, m.code, h.refused, want, h.code)
				continue
			}
			if m.rpcError {
				continue
			}
			if m.status != h.status && !(c.sameBody && m.status == 200) {
				t.Errorf("%s over %s: status %d, HTTP's %d", c.name, transport, m.status, h.status)
			}
			if len(m.errors) != c.errors || !jsonEqual(m.errors, h.errors) {
				t.Errorf("%s over %s: errors %v, HTTP's %v (want %d)", c.name, transport, m.errors, h.errors, c.errors)
			}
			if (m.retryAfter != nil) != c.retry || (h.retryAfter != nil) != c.retry {
				t.Errorf("%s over %s: retryAfter %v, HTTP's %v", c.name, transport, m.retryAfter, h.retryAfter)
			}
			checkRetry(c, transport, m.retryAfter)
			if c.sameBody && !jsonEqual(m.body, h.body) {
				t.Errorf("%s over %s: output %v, HTTP's %v", c.name, transport, m.body, h.body)
			}
		}
		if c.code == pipeline.CodeTimeout {
			t.Logf("%s: answered after %v", c.name, took) // a figure, not an assertion
		}
	}
}

// TestConcurrencyLimitSharedWithHTTP: tool calls and HTTP requests meet
// the same limits. While a tool call holds orders.wait's one slot, both
// another tool call and an HTTP request are refused, UNAVAILABLE
// KERNEL_UNAVAILABLE_003, with the same status and retry-after.
func TestConcurrencyLimitSharedWithHTTP(t *testing.T) {
	p := newProbe()
	k := newKernel(t, p, nil)
	url, _ := serve(t, k, nil)
	cs := connectHTTP(t, url)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "orders.wait", Arguments: map[string]any{}})
		errc <- err
	}()
	wait(t, p.started, "the first call to start")
	h := httpCall(t, url, "/wait", `{}`, nil)
	m := mcpCall(context.Background(), t, cs, "orders.wait", map[string]any{}, nil)
	if h.code != "KERNEL_UNAVAILABLE_003" || m.code != h.code || m.status != h.status || !jsonEqual(m.retryAfter, h.retryAfter) {
		t.Errorf("while the slot is held: HTTP %+v, MCP %+v; want both KERNEL_UNAVAILABLE_003 alike", h, m)
	}
	cancel()
	wait(t, errc, "the first call to end")
	wait(t, p.ended, "the handler to end")
}

// TestFailureSentence: a failed call's text is one sentence an agent can
// act on, naming the code: "rate limited; retry after 60 seconds". An
// UNEXPECTED failure shows nothing of its cause.
func TestFailureSentence(t *testing.T) {
	k := newKernel(t, newProbe(), nil)
	url, _ := serve(t, k, nil)
	cs := connectHTTP(t, url)
	ctx := context.Background()
	mcpCall(ctx, t, cs, "orders.limited", map[string]any{}, nil)
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "orders.limited", Arguments: map[string]any{}})
	if err != nil || !res.IsError {
		t.Fatalf("second call: %v %v, want a tool error", res, err)
	}
	text := res.Content[0].(*mcp.TextContent).Text
	if !strings.HasPrefix(text, "rate limited; retry after ") || !strings.HasSuffix(text, " seconds (KERNEL_UNAVAILABLE_002).") {
		t.Errorf("text %q, want \"rate limited; retry after N seconds (KERNEL_UNAVAILABLE_002).\"", text)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "orders.create",
		Arguments: map[string]any{"name": "", "amount": 0, "currency": "EUR"}})
	if err != nil {
		t.Fatal(err)
	}
	text = res.Content[0].(*mcp.TextContent).Text
	if fail := mcpCall(ctx, t, cs, "orders.fail", map[string]any{}, nil); strings.Contains(fmt.Sprint(fail), "disk") {
		t.Errorf("an UNEXPECTED failure shows its cause: %+v", fail)
	}
	if !strings.HasPrefix(text, "invalid arguments: /") || !strings.Contains(text, "/amount must be at least 1") ||
		!strings.Contains(text, "/name is required") {
		t.Errorf("text %q, want every failing field named", text)
	}
}

// TestCancelledNotification: a client that gives up on a running tool
// call sends notifications/cancelled; the handler's context ends, and
// the access log records the call as CANCELLED (KERNEL_CANCELLED_001),
// over Streamable HTTP and over stdio.
func TestCancelledNotification(t *testing.T) {
	for _, transport := range []string{"streamable HTTP", "stdio"} {
		t.Run(transport, func(t *testing.T) {
			p := newProbe()
			var log syncBuffer
			k := newKernel(t, p, &log)
			url, m := serve(t, k, nil)
			cs := connectStdio(t, m)
			if transport == "streamable HTTP" {
				cs = connectHTTP(t, url)
			}
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() {
				_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "orders.wait", Arguments: map[string]any{}})
				errc <- err
			}()
			wait(t, p.started, "the handler to start")
			cancelled := time.Now()
			cancel()
			if err := wait(t, p.ended, "the handler's context to end"); !errors.Is(err, context.Canceled) {
				t.Errorf("handler context ended with %v, want context.Canceled", err)
			}
			t.Logf("the handler's context ended %v after the client cancelled", time.Since(cancelled))
			if err := wait(t, errc, "the call to return"); !errors.Is(err, context.Canceled) {
				t.Errorf("CallTool: %v, want context.Canceled", err)
			}
			if err := k.Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for !strings.Contains(log.String(), `"code":"`+pipeline.CodeCanceled+`"`) {
				if time.Now().After(deadline) {
					t.Fatalf("access log %s, want the call recorded as %s", log.String(), pipeline.CodeCanceled)
				}
				time.Sleep(5 * time.Millisecond)
			}
			if !strings.Contains(log.String(), `"msg":"mcp call"`) {
				t.Errorf("log %s, want an mcp call record", log.String())
			}
		})
	}
}

// TestTraceContextAndBaggage: a tool call's _meta traceparent becomes the
// invocation's trace (the Problem's traceId), and its baggage reaches the
// handler. A baggage over 8192 bytes is dropped.
func TestTraceContextAndBaggage(t *testing.T) {
	p := newProbe()
	k := newKernel(t, p, nil)
	url, _ := serve(t, k, nil)
	cs := connectHTTP(t, url)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	res := startWait(t, cs, k, p, 20, mcp.Meta{
		"traceparent": "00-" + traceID + "-00f067aa0ba902b7-01", "baggage": "tenant=acme"})
	if got := wait(t, p.bag, "the handler's baggage"); got != "acme" {
		t.Errorf("handler baggage tenant = %q, want acme", got)
	}
	if a := wait(t, res, "the call's answer"); a.code != pipeline.CodeTimeout || a.traceID != traceID {
		t.Errorf("answer %+v, want %s with traceId %s", a, pipeline.CodeTimeout, traceID)
	}
	// The handler has returned before the next call (orders.wait admits
	// one call at a time).
	if err := k.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Baggage over 8192 bytes is dropped whole.
	res = startWait(t, cs, k, p, 20, mcp.Meta{"baggage": "tenant=acme,pad=" + strings.Repeat("x", 8192)})
	if got := wait(t, p.bag, "the handler's baggage"); got != "" {
		t.Errorf("handler baggage tenant = %q from an oversized baggage, want none", got)
	}
	wait(t, res, "the call's answer")
}

// TestIdempotentReplay: a second tool call with the same
// sundial/idempotency-key in _meta gets the first call's outcome, and its
// result's _meta says so (sundial/reply: Idempotent-Replayed), as the
// HTTP header does; nothing runs again.
func TestIdempotentReplay(t *testing.T) {
	k := newKernel(t, newProbe(), nil)
	url, _ := serve(t, k, nil)
	cs := connectHTTP(t, url)
	meta := mcp.Meta{"sundial/idempotency-key": "key-1"}
	var outs []any
	var replayed []any
	for range 2 {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "orders.pay", Arguments: map[string]any{}, Meta: meta})
		if err != nil || res.IsError {
			t.Fatalf("orders.pay: %v %v", res, err)
		}
		outs = append(outs, res.StructuredContent)
		reply, _ := res.Meta["sundial/reply"].(map[string]any)
		replayed = append(replayed, reply["Idempotent-Replayed"])
	}
	if !jsonEqual(outs[0], outs[1]) || replayed[0] != nil || replayed[1] != "true" {
		t.Errorf("outputs %v, replayed marks %v; want the first output twice, the second marked replayed", outs, replayed)
	}
	third := mcpCall(context.Background(), t, cs, "orders.pay", map[string]any{}, mcp.Meta{"sundial/idempotency-key": "key-2"})
	if third.body["id"] != "pay-2" {
		t.Errorf("a new key: %v, want a new run (pay-2)", third.body)
	}
}

// toolNames returns the names of the tools New(k, o) lists, in order.
func toolNames(t *testing.T, k *kernel.Kernel, o *mcpadapter.Options) string {
	t.Helper()
	url, _ := serve(t, k, o)
	res, err := connectHTTP(t, url).ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	return strings.Join(names, " ")
}

// TestInputNotAnObject: MCP tools take a JSON object, so New fails,
// naming the operation, when an input type is not one.
func TestInputNotAnObject(t *testing.T) {
	reg := operations.NewRegistry()
	if err := operations.Register(reg, operations.Descriptor{ID: "notes.echo"},
		func(_ context.Context, s string) (string, error) { return s, nil }); err != nil {
		t.Fatal(err)
	}
	k, err := kernel.New(kernel.WithRegistry(reg))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mcpadapter.New(k, nil); err == nil || !strings.Contains(err.Error(), "notes.echo") {
		t.Errorf("New with a string input: %v, want an error naming the operation", err)
	}
}
