package systemtest

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/samples/shop/internal/shopcmd"
)

// mcpCaller calls the shop's operations as tools, over Streamable HTTP at
// the HTTP port's /mcp, with the MCP Go SDK's client. The caller's
// deadline is the call's _meta "sundial/timeoutMs"; the client's context
// has none, so the server ends the call. A failure's outcome code and
// HTTP status are its structuredContent's (Problem Details).
type mcpCaller struct {
	s    *shopServer
	once sync.Once
	cs   *mcp.ClientSession
	err  error
}

func newMCPCaller(t *testing.T, env *shopEnv) *mcpCaller {
	return &mcpCaller{s: startShopHTTP(t, shopcmd.ServeOptions{KernelOptions: env.kernelOptions()})}
}

// session returns the caller's session, connecting on the first call.
func (c *mcpCaller) session(t *testing.T) *mcp.ClientSession {
	c.once.Do(func() {
		hc := &http.Client{Transport: &http.Transport{}}
		client := mcp.NewClient(&mcp.Implementation{Name: "conformance", Version: "1"}, nil)
		c.cs, c.err = client.Connect(t.Context(), &mcp.StreamableClientTransport{
			Endpoint: c.s.url + "/mcp", HTTPClient: hc, MaxRetries: -1}, nil)
		if c.err == nil {
			// Registered after the shop's: it runs first.
			t.Cleanup(func() { c.cs.Close(); hc.CloseIdleConnections() })
		}
	})
	if c.err != nil {
		t.Errorf("connecting to %s/mcp: %v", c.s.url, c.err)
		return nil
	}
	return c.cs
}

func (c *mcpCaller) started() <-chan string { return c.s.probe.started }

func (c *mcpCaller) statusFor(k pipeline.Kind) string { return strconv.Itoa(httpadapter.StatusFor(k)) }

func (c *mcpCaller) access() accessLog {
	return accessLog{shopLogs: c.s.logs, msg: "mcp call", traceKey: "traceId"}
}

func (c *mcpCaller) do(t *testing.T, op, input string, timeout time.Duration) answer {
	t.Helper()
	meta := mcp.Meta{}
	if timeout > 0 {
		meta["sundial/timeoutMs"] = timeout.Milliseconds()
	}
	return c.call(t, op, json.RawMessage(input), meta)
}

// call calls the tool op with the arguments and _meta given, and returns
// what came back, with its access record.
func (c *mcpCaller) call(t *testing.T, op string, args any, meta mcp.Meta) answer {
	t.Helper()
	cs := c.session(t)
	if cs == nil {
		return answer{}
	}
	log := c.access()
	n := len(log.records())
	start := time.Now()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: op, Arguments: args, Meta: meta})
	a := answer{code: "OK", status: "ok", elapsed: time.Since(start)}
	switch {
	case err != nil:
		t.Errorf("tools/call %s: %v", op, err)
		return a
	case res.IsError:
		raw, _ := json.Marshal(res.StructuredContent)
		var problem struct {
			Title   string `json:"title"`
			Status  int    `json:"status"`
			Code    string `json:"code"`
			TraceID string `json:"traceId"`
		}
		if err := json.Unmarshal(raw, &problem); err != nil || problem.Code == "" {
			t.Errorf("tools/call %s: isError without Problem Details: %s", op, raw)
		}
		a.code, a.traceID, a.problem = problem.Code, problem.TraceID, true
		a.status = strconv.Itoa(problem.Status)
		if kind, ok := pipelinetest.ParseKind(problem.Title); !ok || httpadapter.StatusFor(kind) != problem.Status {
			t.Errorf("tools/call %s: status %d for a %s outcome", op, problem.Status, problem.Title)
		}
	}
	var ok bool
	if a.access, ok = log.after(n, func(r pipelinetest.Record) bool { return r.Attrs["operation"] == op }); !ok {
		t.Errorf("tools/call %s: no access record:\n%s", op, c.s.logs)
	}
	return a
}

func (c *mcpCaller) early(t *testing.T) map[string]answer {
	t.Helper()
	// Refusals of the adapter before the invocation: a malformed deadline,
	// and an argument of the wrong JSON type.
	return map[string]answer{
		"malformed sundial/timeoutMs": c.call(t, "reports.export", json.RawMessage(`{"delayMs":0}`),
			mcp.Meta{"sundial/timeoutMs": "in five seconds"}),
		"argument of the wrong type": c.call(t, "orders.create", json.RawMessage(`{"name":7,"amount":1}`), nil),
	}
}
