package systemtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/sundial-go/sundial/adapters/cliadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/samples/shop/app"
	"github.com/sundial-go/sundial/samples/shop/internal/shopcmd"
)

// shopProc is one run of the shop: the test binary run as the shop (see
// runMainEnv), which is the shop's main with the race detector on.
type shopProc struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
	start          time.Time
}

// startShop starts `shop args...` with stdin, in an environment without
// SUNDIAL_ overrides, and env added.
func startShop(t *testing.T, env []string, stdin string, args ...string) *shopProc {
	t.Helper()
	p := &shopProc{cmd: exec.Command(os.Args[0], args...)}
	p.cmd.Env = childEnv(env...)
	p.cmd.Stdin = strings.NewReader(stdin)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	p.start = time.Now()
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start shop %q: %v", args, err)
	}
	return p
}

// wait waits for the process and returns its exit code.
func (p *shopProc) wait(t *testing.T) int {
	t.Helper()
	err := p.cmd.Wait()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("wait for shop %q: %v", p.cmd.Args[1:], err)
	}
	code := p.cmd.ProcessState.ExitCode()
	if code < 0 {
		t.Fatalf("shop %q ended by %v, want an exit code (stderr %q)", p.cmd.Args[1:], p.cmd.ProcessState, p.stderr.String())
	}
	return code
}

// TestCLI runs the shop as a subprocess: one operation per command line,
// in a fresh process each time (so the per-process rate limit of
// orders.create never bites). A 3 s export ended by its deadline or by a
// signal exits 7 or 8 with the outcome's code: it cannot have finished. How
// soon after the deadline or the signal it exits is the in-process
// cliadapter tests', on a synctest clock (TestTimeout, TestSignals).
func TestCLI(t *testing.T) {
	t.Run("timeout exits 7", func(t *testing.T) {
		t.Parallel()
		p := startShop(t, nil, "", "reports", "export", "--delay-ms", "3000", "--timeout", "0.3")
		code := p.wait(t)
		elapsed := time.Since(p.start)
		if code != cliadapter.ExitCodeFor(pipeline.KindTimeout) {
			t.Errorf("shop reports export --delay-ms 3000 --timeout 0.3 exit code = %d, want 7 (stderr %q)", code, p.stderr.String())
		}
		if elapsed < 300*time.Millisecond {
			t.Errorf("shop reports export --delay-ms 3000 --timeout 0.3 ended after %v, before its deadline", elapsed)
		}
		if !strings.Contains(p.stderr.String(), "KERNEL_TIMEOUT_001") {
			t.Errorf("stderr = %q, want KERNEL_TIMEOUT_001", p.stderr.String())
		}
		t.Logf("exit %d after %v", code, elapsed)
	})
	t.Run("timeout capped by MaxTimeoutSeconds", func(t *testing.T) {
		t.Parallel()
		config := filepath.Join(t.TempDir(), "shop.json")
		if err := os.WriteFile(config, []byte(`{"Sundial":{"Kernel":{"MaxTimeoutSeconds":0.3}}}`), 0o600); err != nil {
			t.Fatal(err)
		}
		p := startShop(t, nil, "", "reports", "export", "--delay-ms", "3000", "--timeout", "100", "--config", config)
		code := p.wait(t)
		elapsed := time.Since(p.start)
		if code != cliadapter.ExitCodeFor(pipeline.KindTimeout) || !strings.Contains(p.stderr.String(), "KERNEL_TIMEOUT_001") {
			t.Errorf("shop reports export --timeout 100 with MaxTimeoutSeconds 0.3 = exit %d, stderr %q; want 7 with KERNEL_TIMEOUT_001", code, p.stderr.String())
		}
		if elapsed < 300*time.Millisecond {
			t.Errorf("shop reports export --timeout 100 with MaxTimeoutSeconds 0.3 ended after %v, before the capped deadline", elapsed)
		}
		t.Logf("exit %d after %v", code, elapsed)
	})
	for name, sig := range map[string]syscall.Signal{"SIGINT": syscall.SIGINT, "SIGTERM": syscall.SIGTERM} {
		t.Run(name+" while the export runs exits 8", func(t *testing.T) {
			t.Parallel()
			// The signal goes once the handler runs: one sent while the
			// process starts up may come before its handler is installed.
			mark := filepath.Join(t.TempDir(), "started")
			p := startShop(t, []string{handlerStartedEnv + "=" + mark}, "", "reports", "export", "--delay-ms", "3000")
			for {
				if _, err := os.Stat(mark); err == nil {
					break
				}
				if time.Since(p.start) > time.Minute {
					t.Fatal("the export's handler did not start within a minute")
				}
				time.Sleep(5 * time.Millisecond)
			}
			sent := time.Now()
			if err := p.cmd.Process.Signal(sig); err != nil {
				t.Fatalf("signal %v while the export runs: %v", sig, err)
			}
			code := p.wait(t)
			if code != cliadapter.ExitCodeFor(pipeline.KindCanceled) {
				t.Errorf("shop reports export --delay-ms 3000 after %v: exit code = %d, want 8 (stderr %q)", sig, code, p.stderr.String())
			}
			if !strings.Contains(p.stderr.String(), "KERNEL_CANCELLED_001") {
				t.Errorf("stderr = %q, want KERNEL_CANCELLED_001", p.stderr.String())
			}
			t.Logf("exit %d, %v after the signal", code, time.Since(sent))
		})
	}

	t.Run("outcomes", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			stdin  string
			args   []string
			code   int
			stdout string // exact, or "" for none
			stderr []string
		}{
			{name: "create", args: []string{"orders", "create", "--name", "widget", "--amount", "1"}, code: 0,
				stdout: "{\n  \"id\": \"ord-1\",\n  \"name\": \"widget\",\n  \"amount\": 1\n}\n"},
			{name: "create amount 0", args: []string{"orders", "create", "--name", "widget", "--amount", "0"}, code: 2,
				stderr: []string{`"code":"KERNEL_VALIDATION_007"`, `"errors":[{"field":"--amount","rule":"min","param":"1","message":"must be at least 1."}]`, "shop orders create: VALIDATION KERNEL_VALIDATION_007: Field 'amount': must be at least 1."}},
			{name: "create from stdin, a flag overriding", stdin: `{"name":"gadget","amount":5}`, args: []string{"orders", "create", "--input", "-", "--amount", "7", "--output", "text"}, code: 0,
				stdout: "id      ord-1\nname    gadget\namount  7\n"},
			{name: "timeout abc", args: []string{"reports", "export", "--timeout", "abc"}, code: 2,
				stderr: []string{`shop: invalid value "abc" for --timeout: not a finite number of seconds`}},
			{name: "timeout negative", args: []string{"reports", "export", "--timeout=-1"}, code: 2,
				stderr: []string{`must be greater than 0 seconds`}},
			{name: "amount not a number", args: []string{"orders", "create", "--amount", "one"}, code: 2,
				stderr: []string{`shop: invalid value "one" for --amount: want an integer`}},
			{name: "unknown input field", args: []string{"orders", "create", "--input", `{"nmae":"x"}`}, code: 2,
				stderr: []string{`"code":"KERNEL_VALIDATION_003"`, `"details":{"field":"nmae"}`}},
			{name: "not found", args: []string{"orders", "get", "--id", "ord-9"}, code: 3,
				stderr: []string{`"code":"SHOP_NOT_FOUND_001"`, "Order 'ord-9' does not exist."}},
			{name: "unavailable", args: []string{"billing", "charge", "--amount", "1", "--fail"}, code: 6,
				stderr: []string{`"code":"SHOP_UNAVAILABLE_001"`}},
			{name: "export", args: []string{"reports", "export", "--delay-ms", "10"}, code: 0,
				stdout: "{\n  \"rows\": 101\n}\n"},
			{name: "missing config", args: []string{"reports", "export", "--config", "/nonexistent/shop.json"}, code: 2,
				stderr: []string{"shop: --config /nonexistent/shop.json: no such file or directory"}},
			{name: "unknown command", args: []string{"orders", "delete"}, code: 2,
				stderr: []string{`unknown command "delete" for "shop orders"`}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				p := startShop(t, nil, tc.stdin, tc.args...)
				code := p.wait(t)
				if code != tc.code {
					t.Errorf("shop %q exit code = %d, want %d (stderr %q)", tc.args, code, tc.code, p.stderr.String())
				}
				if got := p.stdout.String(); got != tc.stdout {
					t.Errorf("shop %q stdout = %q, want %q", tc.args, got, tc.stdout)
				}
				for _, want := range tc.stderr {
					if !strings.Contains(p.stderr.String(), want) {
						t.Errorf("shop %q stderr = %q, want it to contain %q", tc.args, p.stderr.String(), want)
					}
				}
				if tc.code == 0 {
					if p.stderr.Len() != 0 {
						t.Errorf("shop %q stderr = %q, want nothing", tc.args, p.stderr.String())
					}
					var v any
					if err := json.Unmarshal(p.stdout.Bytes(), &v); tc.stdout[0] == '{' && err != nil {
						t.Errorf("shop %q stdout is not JSON: %v", tc.args, err)
					}
				}
			})
		}
	})
}

// TestCLIInProcess runs the operation commands through run, as the binary
// does, to check the order JSON decodes to the app's type.
func TestCLIInProcess(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := shopcmd.Run([]string{"orders", "create", "--name", "widget", "--amount", "1"}, strings.NewReader(""), &stdout, &stderr)
	var o app.Order
	if err := json.Unmarshal(stdout.Bytes(), &o); err != nil || code != 0 {
		t.Fatalf("run(orders create) = %d, stdout %q (%v), stderr %q", code, stdout.String(), err, stderr.String())
	}
	if want := (app.Order{ID: "ord-1", Name: "widget", Amount: 1}); o != want {
		t.Errorf("run(orders create) order = %+v, want %+v", o, want)
	}
}

// cliCaller is the conformance table's CLI column: it runs the shop's
// operation commands in-process, `shop <group> <name> --input JSON
// [--timeout SECONDS]`, exactly as the binary parses and reports them, and
// checks that the exit code is the one the outcome table of
// docs/pipeline.md gives for the outcome's kind. All calls of a scenario
// share one kernel: the binary builds a kernel per process, and a scenario
// is the calls of one shop (its orders, its rate limit, its breaker). The
// kernel writes its access log (the CLI adapter writes none) and its own
// records to logs.
type cliCaller struct {
	k     *kernel.Kernel
	reg   *operations.Registry
	probe *probe
	logs  shopLogs
}

func newCLICaller(t *testing.T, env *shopEnv) *cliCaller {
	t.Helper()
	c := &cliCaller{probe: newProbe(), logs: newShopLogs(), reg: env.reg}
	opts := append(env.kernelOptions(),
		kernel.UseAt(pipeline.StageHandle, c.probe),
		kernel.WithLogger(c.logs.Logger()),
		kernel.WithAccessLog(c.logs.Logger()))
	var err error
	if c.k, err = shopcmd.NewKernel("", opts...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Handlers that ignored their context and outlived their answer.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := c.k.Wait(ctx); err != nil {
			t.Error(err)
		}
	})
	return c
}

func (c *cliCaller) started() <-chan string { return c.probe.started }

func (c *cliCaller) statusFor(k pipeline.Kind) string {
	return "exit " + strconv.Itoa(cliadapter.ExitCodeFor(k))
}

func (c *cliCaller) access() accessLog {
	return accessLog{shopLogs: c.logs, msg: "sundial: invocation", traceKey: "trace_id"}
}

func (c *cliCaller) do(t *testing.T, op, input string, timeout time.Duration) answer {
	group, name, _ := strings.Cut(op, ".")
	args := []string{group, name, "--input", input}
	if timeout > 0 {
		args = append(args, "--timeout", strconv.FormatFloat(timeout.Seconds(), 'f', -1, 64))
	}
	return c.run(t, op, args...)
}

// run runs `shop args...` for the operation op and returns what came
// back, with its access record.
func (c *cliCaller) run(t *testing.T, op string, args ...string) answer {
	root := &cobra.Command{Use: "shop"}
	if err := cliadapter.AddCommands(root, c.reg, func() (*kernel.Kernel, error) { return c.k, nil }, cliadapter.WithSignals()); err != nil {
		t.Errorf("CLI commands: %v", err)
		return answer{}
	}
	var stdout, stderr bytes.Buffer
	root.SetArgs(args)
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	log := c.access()
	n := len(log.records())
	start := time.Now()
	exit := cliadapter.Execute(t.Context(), root)
	a := answer{code: "OK", status: "exit " + strconv.Itoa(exit), elapsed: time.Since(start)}
	if exit != 0 {
		line, _, _ := strings.Cut(stderr.String(), "\n")
		var p cliadapter.Problem
		if err := json.Unmarshal([]byte(line), &p); err != nil {
			t.Errorf("shop %q: exit %d, stderr %q without Problem Details", args, exit, stderr.String())
			return a
		}
		if kind, ok := pipelinetest.ParseKind(p.Title); !ok || cliadapter.ExitCodeFor(kind) != exit || p.ExitCode != exit {
			t.Errorf("shop %q: exit code %d for a %s outcome (problem exitCode %d), want %d", args, exit, p.Title, p.ExitCode, cliadapter.ExitCodeFor(kind))
		}
		a.code, a.traceID, a.problem = p.Code, p.TraceID, true
	}
	var ok bool
	if a.access, ok = log.after(n, func(r pipelinetest.Record) bool { return r.Attrs["operation"] == op }); !ok {
		t.Errorf("shop %q: no access record:\n%s", args, c.logs)
	}
	return a
}

func (c *cliCaller) early(t *testing.T) map[string]answer {
	return map[string]answer{
		"--input that is not JSON": c.run(t, "orders.create", "orders", "create", "--input", `{"name":`),
	}
}
