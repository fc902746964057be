package systemtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/samples/shop/internal/shopcmd"
)

// npmTool returns the command line of script in the npm package pkg
// (under @modelcontextprotocol), and the node_modules directory that
// holds it (see npmPackage).
func npmTool(t *testing.T, pkg, script string) (argv []string, modules string) {
	t.Helper()
	node, modules := npmPackage(t, filepath.Join("@modelcontextprotocol", pkg, script))
	return []string{node, filepath.Join(modules, "@modelcontextprotocol", pkg, script)}, modules
}

// npmPackage returns node and the node_modules directory holding path, a
// package or a file in one, which .ci/deps installs under the user cache
// directory. It is a failure in CI when node or path is missing, a skip
// elsewhere.
func npmPackage(t *testing.T, path string) (node, modules string) {
	t.Helper()
	cache, err := os.UserCacheDir()
	node, nerr := exec.LookPath("node")
	modules = filepath.Join(cache, "sundial-npm", "node_modules")
	if _, serr := os.Stat(filepath.Join(modules, path)); err != nil || nerr != nil || serr != nil {
		msg := "npm " + filepath.ToSlash(path) + " is not installed under " + modules + "; run `make deps`"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return node, modules
}

// inspectorCLI returns the command line of the MCP inspector's CLI and
// the directory to run it in.
func inspectorCLI(t *testing.T) (argv []string, dir string) {
	t.Helper()
	// The CLI reads its own package.json at "../package.json" relative to
	// its module, but checks that path's existence relative to its working
	// directory: run it in node_modules, where both resolve.
	return npmTool(t, "inspector-cli", filepath.Join("build", "index.js"))
}

// inspect runs the inspector CLI with args and decodes its JSON output.
func inspect(t *testing.T, argv []string, dir string, args ...string) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], append(argv[1:], args...)...)
	cmd.Dir, cmd.Env = dir, childEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("inspector %q: %v; stdout %s; stderr %s", args, err, stdout.String(), stderr.String())
	}
	var out map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("inspector %q: output %s is not JSON: %v", args, stdout.String(), err)
	}
	return out
}

// TestShopMCPWithInspector: the MCP inspector's CLI, a client nobody here
// wrote, lists the shop's tools and calls them, over stdio (`shop mcp`,
// launched by the inspector) and over Streamable HTTP (`shop serve`, at
// /mcp). A valid order succeeds, its structured output checked by the
// inspector's SDK against the tool's outputSchema; a bad one is a tool
// error whose structured content is the Problem Details with every
// failing field.
func TestShopMCPWithInspector(t *testing.T) {
	argv, dir := inspectorCLI(t)
	s := startServe(t, shopcmd.ServeOptions{})
	targets := map[string][]string{
		"stdio":           {os.Args[0], "mcp"},
		"streamable HTTP": {s.url + "/mcp", "--transport", "http"},
	}
	for name, target := range targets {
		t.Run(name, func(t *testing.T) {
			list := inspect(t, argv, dir, append(target, "--method", "tools/list")...)
			var names []string
			tools, _ := list["tools"].([]any)
			for _, tool := range tools {
				m, _ := tool.(map[string]any)
				names = append(names, m["name"].(string))
				if m["description"] == "" || m["inputSchema"] == nil {
					t.Errorf("tool %v lacks a description or an inputSchema", m)
				}
			}
			if got := strings.Join(names, " "); got != "billing.charge orders.create orders.get orders.watch reports.export" {
				t.Errorf("tools %q, want the shop's four unary operations and its server stream", got)
			}
			ok := inspect(t, argv, dir, append(target, "--method", "tools/call", "--tool-name", "orders.create",
				"--tool-arg", "name=pen", "--tool-arg", "amount=2")...)
			sc, _ := ok["structuredContent"].(map[string]any)
			if ok["isError"] == true || sc["name"] != "pen" || sc["amount"] != float64(2) {
				t.Errorf("orders.create: %v, want the order", ok)
			}
			bad := inspect(t, argv, dir, append(target, "--method", "tools/call", "--tool-name", "orders.create",
				"--tool-arg", `name=""`, "--tool-arg", "amount=0")...)
			problem, _ := bad["structuredContent"].(map[string]any)
			details, _ := problem["details"].(map[string]any)
			if errs, _ := details["errors"].([]any); bad["isError"] != true || problem["code"] != "KERNEL_VALIDATION_007" || len(errs) != 2 {
				t.Errorf("a bad order: %v, want isError with KERNEL_VALIDATION_007 and both fields", bad)
			}
		})
	}
}

// TestShutdownClosesMCPSessions: a connected MCP client holds an open
// event stream (its standalone GET). On SIGTERM the shop closes the MCP
// sessions before the HTTP server's Shutdown, which then finds no busy
// connection: serve returns cleanly, well within the grace period.
func TestShutdownClosesMCPSessions(t *testing.T) {
	const grace = 5 * time.Second
	s := startServe(t, shopcmd.ServeOptions{Grace: grace})
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: s.url + "/mcp", HTTPClient: hc, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "orders.create",
		Arguments: map[string]any{"name": "pen", "amount": 1}}); err != nil {
		t.Fatal(err)
	}
	err, took := s.stop(t, grace)
	if err != nil || took >= grace {
		t.Errorf("serve returned %v after %v, want a clean shutdown within the %v grace", err, took, grace)
	}
	t.Logf("shutdown with an open MCP session took %v", took)
}

// TestShopMCPCancelled: an agent host launches `shop mcp` and calls
// reports.export for 3 s, then gives up. Its SDK client sends
// notifications/cancelled; the handler's context ends and it returns long
// before its 3 s, and the shop's access log on stderr records the call as
// CANCELLED (KERNEL_CANCELLED_001).
func TestShopMCPCancelled(t *testing.T) {
	dir := t.TempDir()
	mark, hlog := filepath.Join(dir, "started"), filepath.Join(dir, "handlers")
	cmd := exec.Command(os.Args[0], "mcp")
	cmd.Env = childEnv(handlerStartedEnv+"="+mark, handlerLogEnv+"="+hlog)
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "reports.export", Arguments: map[string]any{"delayMs": 3000}})
		errc <- err
	}()
	deadline := time.Now().Add(time.Minute)
	for _, err := os.Stat(mark); err != nil; _, err = os.Stat(mark) {
		if time.Now().After(deadline) {
			t.Fatal("the export's handler did not start within a minute")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancelled := time.Now()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("CallTool: %v, want context.Canceled", err)
	}
	var run []string
	for run == nil {
		b, _ := os.ReadFile(hlog)
		if f := strings.Fields(string(b)); len(f) >= 3 && f[0] == "reports.export" {
			run = f
		} else if time.Now().After(deadline) {
			t.Fatalf("no handler run recorded; stderr %s", stderr.String())
		} else {
			time.Sleep(10 * time.Millisecond)
		}
	}
	start, _ := strconv.ParseInt(run[1], 10, 64)
	end, _ := strconv.ParseInt(run[2], 10, 64)
	if ran := time.Duration(end - start); ran >= 2*time.Second {
		t.Errorf("the handler ran %v, want it cut short of its 3 s by the cancellation", ran)
	}
	t.Logf("the handler returned %v after the client cancelled", time.Duration(end-cancelled.UnixNano()))
	for !strings.Contains(stderr.String(), `"code":"KERNEL_CANCELLED_001"`) {
		if time.Now().After(deadline) {
			t.Fatalf("stderr %s, want the call's access log record with KERNEL_CANCELLED_001", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := cs.Close(); err != nil {
		t.Errorf("closing the session (the shop's stdin): %v", err)
	}
}

// conformanceScenarios are the MCP conformance suite's server scenarios
// that apply to a server of operations: the others call the suite's own
// fixed tools, resources and prompts (docs/mcp.md lists them).
var conformanceScenarios = []string{"server-initialize", "ping", "tools-list",
	"server-sse-multiple-streams", "server-sse-polling"}

// conformanceResult matches the suite's summary line.
var conformanceResult = regexp.MustCompile(`Passed: (\d+)/(\d+), (\d+) failed`)

// TestShopMCPConformance runs the MCP conformance suite (npm
// @modelcontextprotocol/conformance) against the shop's MCP endpoint: no
// applicable scenario has a failed check. server-sse-polling has only
// SHOULD checks (stream resumption), which warn.
func TestShopMCPConformance(t *testing.T) {
	argv, _ := npmTool(t, "conformance", filepath.Join("dist", "index.js"))
	s := startServe(t, shopcmd.ServeOptions{})
	for _, scenario := range conformanceScenarios {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, argv[0], append(argv[1:], "server", "--url", s.url+"/mcp", "--scenario", scenario)...)
		cmd.Env, cmd.Dir = childEnv(), t.TempDir()
		out, err := cmd.CombinedOutput()
		cancel()
		m := conformanceResult.FindSubmatch(out)
		if m == nil {
			t.Errorf("%s: no summary (%v): %s", scenario, err, out)
			continue
		}
		passed, _ := strconv.Atoi(string(m[1]))
		if string(m[3]) != "0" || (passed == 0 && scenario != "server-sse-polling") {
			t.Errorf("%s: %s: %s", scenario, m[0], out)
		}
	}
}

// TestShopMCPWatchOrders: the shop's server stream orders.watch is a tool
// of `shop serve`. The SDK's client creates two orders, then watches with
// a progress token and a deadline of 1.5 s: one progress notification
// per order, in order, then an isError result, KERNEL_TIMEOUT_001, that
// carries both orders.
//
// On a loaded machine the deadline can pass before the kernel starts the
// stream's handler: it then sends nothing, and the result is a TIMEOUT
// without messages. The kernel's access log tells (the record of a stream
// that opened has its stream_end): the watch is then made again with ten
// times the deadline, at most 20 s (orders.watch's MaxAgeSeconds, 25 s
// less up to a tenth, would end a longer one first), three tries in all.
func TestShopMCPWatchOrders(t *testing.T) {
	access := newShopLogs()
	s := startServe(t, shopcmd.ServeOptions{KernelOptions: []kernel.Option{kernel.WithAccessLog(access.Logger())}})
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	got := make(chan *mcp.ProgressNotificationParams, 16)
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) { got <- r.Params }})
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: s.url + "/mcp", HTTPClient: hc, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	// The calls' bound: three tries of the watch take 36.5 s at most.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, name := range []string{"pen", "ink"} {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "orders.create",
			Arguments: map[string]any{"name": name, "amount": 1}})
		if err != nil || res.IsError {
			t.Fatalf("orders.create %s: %v %v", name, res, err)
		}
	}
	type watchBody struct {
		Code     string `json:"code"`
		Count    int    `json:"count"`
		Messages []struct {
			Seq   int `json:"seq"`
			Order struct {
				Name string `json:"name"`
			} `json:"order"`
		} `json:"messages"`
	}
	watched := func(r pipelinetest.Record) bool {
		return r.Message == "sundial: invocation" && r.Attrs["operation"] == "orders.watch"
	}
	var (
		res  *mcp.CallToolResult
		raw  []byte
		body watchBody
		jerr error // body's decoding
	)
	for try, d := 1, 1500*time.Millisecond; ; try, d = try+1, min(10*d, 20*time.Second) {
		n := len(access.Find(watched))
		p := &mcp.CallToolParams{Name: "orders.watch", Arguments: map[string]any{},
			Meta: mcp.Meta{"sundial/timeoutMs": d.Milliseconds()}}
		p.SetProgressToken("watch-1")
		if res, err = cs.CallTool(ctx, p); err != nil {
			t.Fatal(err)
		}
		raw, _ = json.Marshal(res.StructuredContent)
		body = watchBody{}
		jerr = json.Unmarshal(raw, &body)
		// The kernel writes the call's record before the result leaves.
		var recs []pipelinetest.Record
		for end := time.Now().Add(3 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if recs = access.Find(watched); len(recs) > n || time.Now().After(end) {
				break
			}
		}
		if len(recs) != n+1 {
			t.Fatalf("orders.watch (deadline %v): %d records of it in the kernel's access log, want %d", d, len(recs), n+1)
		}
		if _, opened := recs[n].Attrs["stream_end"]; opened {
			break
		}
		if jerr != nil || !res.IsError || body.Code != "KERNEL_TIMEOUT_001" || body.Count != 0 {
			t.Fatalf("orders.watch (deadline %v): isError %v, %s, and its stream never opened; want its TIMEOUT", d, res.IsError, raw)
		}
		if try == 3 {
			t.Fatalf("orders.watch's handler did not start before its deadline in 3 tries (the last %v)", d)
		}
		t.Logf("orders.watch's handler did not start before its %v deadline: once more, with %v", d, min(10*d, 20*time.Second))
	}
	if jerr != nil || !res.IsError || body.Code != "KERNEL_TIMEOUT_001" ||
		body.Count != 2 || len(body.Messages) != 2 || body.Messages[1].Order.Name != "ink" {
		t.Fatalf("orders.watch: isError %v, %s; want KERNEL_TIMEOUT_001 with both orders", res.IsError, raw)
	}
	for i, name := range []string{"pen", "ink"} {
		select {
		case n := <-got:
			var ev struct {
				Seq   int `json:"seq"`
				Order struct {
					Name string `json:"name"`
				} `json:"order"`
			}
			if json.Unmarshal([]byte(n.Message), &ev) != nil || n.ProgressToken != "watch-1" ||
				n.Progress != float64(i+1) || ev.Seq != i+1 || ev.Order.Name != name {
				t.Errorf("notification %d: %+v, want order %s, seq %d, token watch-1", i+1, n, name, i+1)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no progress notification %d", i+1)
		}
	}
}
