package cliadapter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/spf13/cobra"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sundial-go/sundial/adapters/internal/outcome"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

type echoIn struct {
	Name  string `json:"name"`
	Count int    `json:"count"`
}

type sleepIn struct {
	DelayMs int `json:"delayMs"`
}

type failIn struct {
	Kind         string `json:"kind"`
	RetryAfterMs int    `json:"retryAfterMs"`
}

// nilErr is a foreign error type whose Error method reads its receiver: a
// typed nil of it panics when printed.
type nilErr struct{ msg string }

func (e *nilErr) Error() string { return e.msg }

// badJSON is an output whose encoding panics.
type badJSON struct{}

func (badJSON) MarshalJSON() ([]byte, error) { panic("secret encoder text") }

// testRegistry registers the operations the command tests run:
//
//   - test.echo returns its input;
//   - test.sleep works delayMs, stopping when its context ends;
//   - test.stubborn works delayMs ignoring its context (a handler that
//     does not cooperate with cancellation);
//   - test.fail fails with the kind named by its input, with the
//     retry-after retryAfterMs when it is set (PANIC panics, PLAIN returns
//     a foreign error with internal text, NIL a nil *pipeline.Error and
//     NILFOREIGN a nil *nilErr, both as non-nil errors);
//   - other.ping answers "pong";
//   - other.badjson answers a value whose JSON encoding panics.
func testRegistry(t testing.TB) *operations.Registry {
	t.Helper()
	reg := operations.NewRegistry()
	errs := []error{
		operations.Register(reg, operations.Descriptor{ID: "test.echo", Summary: "Echo the input."},
			func(_ context.Context, in echoIn) (echoIn, error) { return in, nil }),
		operations.Register(reg, operations.Descriptor{ID: "test.sleep", Summary: "Sleep, stopping on cancellation."},
			func(ctx context.Context, in sleepIn) (sleepIn, error) {
				select {
				case <-time.After(time.Duration(in.DelayMs) * time.Millisecond):
					return in, nil
				case <-ctx.Done():
					return sleepIn{}, ctx.Err()
				}
			}),
		operations.Register(reg, operations.Descriptor{ID: "test.stubborn", Summary: "Sleep, ignoring cancellation."},
			func(_ context.Context, in sleepIn) (sleepIn, error) {
				time.Sleep(time.Duration(in.DelayMs) * time.Millisecond)
				return in, nil
			}),
		operations.Register(reg, operations.Descriptor{ID: "test.fail", Summary: "Fail with a kind."},
			func(_ context.Context, in failIn) (struct{}, error) {
				switch in.Kind {
				case "":
					return struct{}{}, nil
				case "PANIC":
					panic("secret panic text")
				case "PLAIN":
					return struct{}{}, errors.New("secret database password")
				case "NIL":
					var e *pipeline.Error
					return struct{}{}, e
				case "NILFOREIGN":
					var e *nilErr
					return struct{}{}, e
				}
				k, _ := pipelinetest.ParseKind(in.Kind)
				e := pipeline.NewError(k, "TEST_"+in.Kind, "failed as "+in.Kind).WithDetail("kind", in.Kind)
				if in.RetryAfterMs > 0 {
					e = e.WithRetryAfter(time.Duration(in.RetryAfterMs) * time.Millisecond)
				}
				return struct{}{}, e
			}),
		operations.Register(reg, operations.Descriptor{ID: "other.ping", Summary: "Ping."},
			func(context.Context, struct{}) (string, error) { return "pong", nil }),
		operations.Register(reg, operations.Descriptor{ID: "other.badjson", Summary: "Answer what does not encode."},
			func(context.Context, struct{}) (badJSON, error) { return badJSON{}, nil }),
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return reg
}

// testKernel returns a kernelFunc building a kernel over testRegistry and
// the given config documents.
func testKernel(t testing.TB, configs ...string) kernelFunc {
	var opts []kernel.Option
	for _, c := range configs {
		if c != "" {
			opts = append(opts, kernel.WithConfigJSON([]byte(c)))
		}
	}
	return kernelOn(testRegistry(t), opts...)
}

// kernelOn returns a kernelFunc building a kernel over reg with opts.
func kernelOn(reg *operations.Registry, opts ...kernel.Option) kernelFunc {
	return func() (*kernel.Kernel, error) {
		return kernel.New(append([]kernel.Option{kernel.WithRegistry(reg)}, opts...)...)
	}
}

// tracked wraps kf and returns, with it, a function that waits until every
// invocation still running on a kernel it built has returned: the
// stragglers a handler that ignores its context leaves behind. A synctest
// bubble must end with none.
func tracked(kf kernelFunc) (kernelFunc, func(testing.TB)) {
	var (
		mu sync.Mutex
		ks []*kernel.Kernel
	)
	track := func() (*kernel.Kernel, error) {
		k, err := kf()
		if k != nil {
			mu.Lock()
			ks = append(ks, k)
			mu.Unlock()
		}
		return k, err
	}
	wait := func(t testing.TB) {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		for _, k := range ks {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			err := k.Wait(ctx)
			cancel()
			if err != nil {
				t.Errorf("stragglers: %v", err)
			}
		}
	}
	return track, wait
}

type result struct {
	code           int
	stdout, stderr string
}

// execute runs `app args...` on a fresh command tree over testRegistry,
// without OS signal handling unless opts say otherwise.
func execute(t testing.TB, kf kernelFunc, opts []Option, stdin string, args ...string) result {
	t.Helper()
	return executeOn(t, testRegistry(t), kf, opts, strings.NewReader(stdin), args...)
}

// executeOn runs `app args...` on a fresh command tree over reg, reading
// standard input from stdin.
func executeOn(t testing.TB, reg *operations.Registry, kf kernelFunc, opts []Option, stdin io.Reader, args ...string) result {
	t.Helper()
	root := &cobra.Command{Use: "app"}
	if err := AddCommands(root, reg, kf, append([]Option{WithSignals()}, opts...)...); err != nil {
		t.Fatalf("AddCommands: %v", err)
	}
	var stdout, stderr bytes.Buffer
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	code := Execute(context.Background(), root)
	return result{code, stdout.String(), stderr.String()}
}

// problemOf decodes the Problem Details line of stderr.
func problemOf(t *testing.T, stderr string) Problem {
	t.Helper()
	var line string
	for l := range strings.Lines(stderr) {
		if strings.HasPrefix(l, "{") {
			line = l
			break
		}
	}
	var p Problem
	if err := json.Unmarshal([]byte(line), &p); err != nil {
		t.Fatalf("stderr's first line %q is not Problem Details JSON: %v", line, err)
	}
	return p
}

func TestCommandTree(t *testing.T) {
	t.Parallel()
	kf := testKernel(t)
	for _, tc := range []struct {
		name     string
		args     []string
		code     int
		stdout   []string
		stderr   []string
		noStdout bool
	}{
		{name: "operation help", args: []string{"test", "echo", "--help"},
			stdout: []string{"Echo the input.", "test.echo", "--name string", "--count int", "--input", "--timeout seconds", "--output format", "7 TIMEOUT, 8 CANCELLED", "9 UNPROCESSABLE (an idempotency key reused with another input)"}},
		{name: "group help", args: []string{"test"},
			stdout: []string{"Operations test.*: echo, fail, sleep, stubborn.", "echo", "stubborn"}},
		{name: "root help lists groups", args: []string{"--help"},
			stdout: []string{"other", "Operations other.*: badjson, ping.", "test"}},
		{name: "unknown command in group", args: []string{"test", "ehco"}, code: 2, noStdout: true,
			stderr: []string{`app: unknown command "ehco" for "app test"; did you mean echo?`, "Run 'app test --help' for usage."}},
		{name: "unknown flag", args: []string{"test", "echo", "--nmae", "a"}, code: 2, noStdout: true,
			stderr: []string{"unknown flag: --nmae", "Run 'app test echo --help' for usage."}},
		{name: "flag of the wrong type", args: []string{"test", "echo", "--count", "two"}, code: 2, noStdout: true,
			stderr: []string{`invalid value "two" for --count: want an integer`}},
		{name: "positional argument", args: []string{"test", "echo", "extra"}, code: 2, noStdout: true,
			stderr: []string{`unknown command "extra" for "app test echo"`}},
		{name: "timeout not a number", args: []string{"test", "echo", "--timeout", "abc"}, code: 2, noStdout: true,
			stderr: []string{`invalid value "abc" for --timeout: not a finite number of seconds`}},
		{name: "timeout zero", args: []string{"test", "echo", "--timeout", "0"}, code: 2, noStdout: true,
			stderr: []string{`invalid value "0" for --timeout: must be greater than 0 seconds`}},
		{name: "timeout negative", args: []string{"test", "echo", "--timeout=-1"}, code: 2, noStdout: true,
			stderr: []string{`invalid value "-1" for --timeout: must be greater than 0 seconds`}},
		{name: "timeout NaN", args: []string{"test", "echo", "--timeout", "NaN"}, code: 2, noStdout: true,
			stderr: []string{`invalid value "NaN" for --timeout`}},
		{name: "timeout on the group", args: []string{"test", "--timeout", "x", "echo"}, code: 2, noStdout: true,
			stderr: []string{`invalid value "x" for --timeout`}},
		{name: "output format", args: []string{"test", "echo", "--output", "yaml"}, code: 2, noStdout: true,
			stderr: []string{`invalid value "yaml" for --output: output format "yaml" is not "json" or "text"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := execute(t, kf, nil, "", tc.args...)
			if r.code != tc.code {
				t.Errorf("app %q exit code = %d, want %d (stderr %q)", tc.args, r.code, tc.code, r.stderr)
			}
			for _, want := range tc.stdout {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("app %q stdout lacks %q:\n%s", tc.args, want, r.stdout)
				}
			}
			for _, want := range tc.stderr {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("app %q stderr lacks %q:\n%s", tc.args, want, r.stderr)
				}
			}
			if tc.noStdout && r.stdout != "" {
				t.Errorf("app %q stdout = %q, want nothing", tc.args, r.stdout)
			}
		})
	}
}

func TestResults(t *testing.T) {
	t.Parallel()
	kf := testKernel(t)
	for _, tc := range []struct {
		name   string
		stdin  string
		args   []string
		stdout string
	}{
		{"flags", "", []string{"test", "echo", "--name", "a", "--count", "2"}, "{\n  \"name\": \"a\",\n  \"count\": 2\n}\n"},
		{"input", "", []string{"test", "echo", "--input", `{"name":"b","count":3}`}, "{\n  \"name\": \"b\",\n  \"count\": 3\n}\n"},
		{"flag overrides input", "", []string{"test", "echo", "--input", `{"name":"b","count":3}`, "--count", "4"}, "{\n  \"name\": \"b\",\n  \"count\": 4\n}\n"},
		{"stdin", `{"name":"c"}`, []string{"test", "echo", "--input", "-"}, "{\n  \"name\": \"c\",\n  \"count\": 0\n}\n"},
		{"text", "", []string{"test", "echo", "--name", "tab\there", "--count", "5", "--output", "text"}, "name   tab\\there\ncount  5\n"},
		{"text on group", "", []string{"test", "--output", "text", "echo", "--name", "d"}, "name   d\ncount  0\n"},
		{"empty output", "", []string{"test", "fail"}, "{}\n"},
		{"empty output text", "", []string{"test", "fail", "--output", "text"}, ""},
		{"scalar output json", "", []string{"other", "ping"}, "\"pong\"\n"},
		{"scalar output text", "", []string{"other", "ping", "--output", "text"}, "pong\n"},
		{"with timeout", "", []string{"test", "sleep", "--delay-ms", "1", "--timeout", "10"}, "{\n  \"delayMs\": 1\n}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := execute(t, kf, nil, tc.stdin, tc.args...)
			if r.code != 0 || r.stdout != tc.stdout || r.stderr != "" {
				t.Errorf("app %q = exit %d, stdout %q, stderr %q; want exit 0, stdout %q, no stderr", tc.args, r.code, r.stdout, r.stderr, tc.stdout)
			}
		})
	}
}

func TestFailureExitCodes(t *testing.T) {
	t.Parallel()
	kf := testKernel(t)
	for _, k := range pipelinetest.Kinds() {
		if k == pipeline.KindOK {
			continue
		}
		t.Run(k.String(), func(t *testing.T) {
			r := execute(t, kf, nil, "", "test", "fail", "--kind", k.String())
			if want := ExitCodeFor(k); r.code != want {
				t.Errorf("fail --kind %s exit code = %d, want %d", k, r.code, want)
			}
			if r.stdout != "" {
				t.Errorf("fail --kind %s stdout = %q, want nothing", k, r.stdout)
			}
			p := problemOf(t, r.stderr)
			want := Problem{Type: "urn:sundial:error:TEST_" + k.String(), Title: k.String(), Detail: "failed as " + k.String(),
				Code: "TEST_" + k.String(), Operation: "test.fail", ExitCode: ExitCodeFor(k), Details: map[string]any{"kind": k.String()}}
			if k == pipeline.KindUnexpected {
				want.Detail, want.Details = pipeline.UnexpectedMessage, map[string]any{}
			}
			if !equalJSON(p, want) {
				t.Errorf("fail --kind %s problem = %+v, want %+v", k, p, want)
			}
			line := "app test fail: " + k.String() + " TEST_" + k.String() + ": " + want.Detail + "\n"
			if !strings.HasSuffix(r.stderr, line) {
				t.Errorf("fail --kind %s stderr = %q, want it to end with the line %q", k, r.stderr, line)
			}
		})
	}
}

func equalJSON(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

func TestFailureReports(t *testing.T) {
	t.Parallel()
	kf := testKernel(t)
	for _, tc := range []struct {
		name    string
		args    []string
		code    int
		errCode string
		details map[string]any
		stderr  string // exact stderr with --output text, or a substring
	}{
		{name: "plain error", args: []string{"test", "fail", "--kind", "PLAIN"}, code: 1, errCode: pipeline.CodeUnexpected, details: map[string]any{}},
		{name: "panic", args: []string{"test", "fail", "--kind", "PANIC"}, code: 1, errCode: pipeline.CodeUnexpected, details: map[string]any{}},
		{name: "typed-nil *pipeline.Error", args: []string{"test", "fail", "--kind", "NIL"}, code: 1, errCode: pipeline.CodeUnexpected, details: map[string]any{}},
		{name: "typed-nil foreign error", args: []string{"test", "fail", "--kind", "NILFOREIGN"}, code: 1, errCode: pipeline.CodeUnexpected, details: map[string]any{}},
		{name: "output that does not encode", args: []string{"other", "badjson"}, code: 1, errCode: pipeline.CodeUnexpected, details: map[string]any{}},
		{name: "retry-after", args: []string{"test", "fail", "--kind", "UNAVAILABLE", "--retry-after-ms", "1500"}, code: 6,
			errCode: "TEST_UNAVAILABLE", details: map[string]any{"kind": "UNAVAILABLE", "retryAfter": 2}},
		{name: "retry-after of UNEXPECTED", args: []string{"test", "fail", "--kind", "UNEXPECTED", "--retry-after-ms", "1500"}, code: 1,
			errCode: "TEST_UNEXPECTED", details: map[string]any{}},
		{name: "retry-after text", args: []string{"test", "fail", "--kind", "UNAVAILABLE", "--retry-after-ms", "100", "--output", "text"}, code: 6,
			stderr: "app test fail: UNAVAILABLE TEST_UNAVAILABLE: failed as UNAVAILABLE\n  kind: UNAVAILABLE\n  retryAfter: 1\n"},
		{name: "malformed input", args: []string{"test", "echo", "--input", `{"name":`}, code: 2, errCode: codeMalformedInput, details: map[string]any{}},
		{name: "unknown input field", args: []string{"test", "echo", "--input", `{"nmae":"a"}`}, code: 2, errCode: operations.CodeUnknownField, details: map[string]any{"field": "nmae"}},
		{name: "input of the wrong type", args: []string{"test", "echo", "--input", `{"count":"x"}`}, code: 2, errCode: codeWrongInput, details: map[string]any{"field": "count"}},
		{name: "trailing input", args: []string{"test", "echo", "--input", `{} {}`}, code: 2, errCode: codeMalformedInput, details: map[string]any{}},
		{name: "text", args: []string{"test", "fail", "--kind", "NOT_FOUND", "--output", "text"}, code: 3,
			stderr: "app test fail: NOT_FOUND TEST_NOT_FOUND: failed as NOT_FOUND\n  kind: NOT_FOUND\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := execute(t, kf, nil, "", tc.args...)
			if r.code != tc.code {
				t.Errorf("app %q exit code = %d, want %d", tc.args, r.code, tc.code)
			}
			if r.stdout != "" {
				t.Errorf("app %q stdout = %q, want nothing", tc.args, r.stdout)
			}
			if strings.Contains(r.stderr, "secret") {
				t.Errorf("app %q stderr leaks internal text: %q", tc.args, r.stderr)
			}
			if tc.stderr != "" {
				if r.stderr != tc.stderr {
					t.Errorf("app %q stderr = %q, want %q", tc.args, r.stderr, tc.stderr)
				}
				return
			}
			p := problemOf(t, r.stderr)
			if p.Code != tc.errCode || p.ExitCode != tc.code || !equalJSON(p.Details, tc.details) {
				t.Errorf("app %q problem = %+v, want code %s, exit code %d, details %v", tc.args, p, tc.errCode, tc.code, tc.details)
			}
		})
	}
}

func TestKernelError(t *testing.T) {
	t.Parallel()
	var nilForeign *nilErr
	for _, kf := range []kernelFunc{
		func() (*kernel.Kernel, error) { return nil, nil },
		func() (*kernel.Kernel, error) { return nil, nilForeign },
	} {
		if r := execute(t, kf, nil, "", "test", "echo"); r.code != 2 || !strings.HasPrefix(r.stderr, "app: cliadapter: the kernel function returned") {
			t.Errorf("app test echo with a nil kernel = exit %d, stderr %q; want exit 2 saying so", r.code, r.stderr)
		}
	}
	kf := func() (*kernel.Kernel, error) { return nil, errors.New("kernel: config file: no such file") }
	r := execute(t, kf, nil, "", "test", "echo")
	if r.code != 2 || !strings.Contains(r.stderr, "app: kernel: config file: no such file") {
		t.Errorf("app test echo with a failing kernel = exit %d, stderr %q; want exit 2 naming the error", r.code, r.stderr)
	}
	if r := execute(t, kf, nil, "", "test", "echo", "--count", "two"); r.code != 2 || !strings.Contains(r.stderr, `invalid value "two" for --count: want an integer`) ||
		strings.Contains(r.stderr, "config file") {
		t.Errorf("app test echo --count two with a failing kernel = exit %d, stderr %q; want exit 2 naming the flag, not the kernel", r.code, r.stderr)
	}
	prefixed := func() (*kernel.Kernel, error) { return nil, errors.New("app: already prefixed") }
	if r := execute(t, prefixed, nil, "", "test", "echo"); !strings.HasPrefix(r.stderr, "app: already prefixed\n") {
		t.Errorf("stderr = %q, want the root's name once", r.stderr)
	}
	r = execute(t, testKernel(t, `{"Sundial":{"Kernel":{"MaxTimeoutSeconds":-1}}}`), nil, "", "test", "echo")
	if r.code != 2 || !strings.Contains(r.stderr, "MaxTimeoutSeconds") {
		t.Errorf("app test echo with a bad config = exit %d, stderr %q; want exit 2 naming the key", r.code, r.stderr)
	}
}

func TestAddCommandsErrors(t *testing.T) {
	t.Parallel()
	root := &cobra.Command{Use: "app"}
	root.AddCommand(&cobra.Command{Use: "test"})
	if err := AddCommands(root, testRegistry(t), testKernel(t)); err == nil || !strings.Contains(err.Error(), `"test"`) {
		t.Errorf("AddCommands with a clashing group = %v, want an error naming the group", err)
	}
	if n := len(root.Commands()); n != 1 {
		t.Errorf("after a failed AddCommands root has %d commands, want 1", n)
	}
	if err := AddCommands(nil, testRegistry(t), testKernel(t)); err == nil {
		t.Error("AddCommands(nil root) = nil, want an error")
	}
}

// settleBound bounds how late after the deadline (or a signal) the answer
// to a handler that ignores its context leaves: the kernel's settle window
// (a few milliseconds) and some slack.
const settleBound = 10 * time.Millisecond

// The deadline tests run in a synctest bubble: the clock is fake, so the
// times asserted are exact (for a handler that ignores its context: within
// the kernel's settle window).

func TestTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		op      string // default "sleep"
		config  string
		args    []string
		elapsed time.Duration
	}{
		{name: "--timeout", args: []string{"--timeout", "0.3"}, elapsed: 300 * time.Millisecond},
		{name: "capped by MaxTimeoutSeconds", config: `{"Sundial":{"Kernel":{"MaxTimeoutSeconds":0.5}}}`,
			args: []string{"--timeout", "100"}, elapsed: 500 * time.Millisecond},
		{name: "capped by the operation's TimeoutSeconds",
			config: `{"Sundial":{"Kernel":{"Resilience":{"Operations":{"test.sleep":{"TimeoutSeconds":0.2}}}}}}`,
			args:   []string{"--timeout", "1"}, elapsed: 200 * time.Millisecond},
		{name: "no --timeout: MaxTimeoutSeconds", config: `{"Sundial":{"Kernel":{"MaxTimeoutSeconds":1.5}}}`,
			elapsed: 1500 * time.Millisecond},
		{name: "handler ignoring its context: --timeout", op: "stubborn", args: []string{"--timeout", "0.3"},
			elapsed: 300 * time.Millisecond},
		{name: "handler ignoring its context: TimeoutSeconds", op: "stubborn",
			config:  `{"Sundial":{"Kernel":{"Resilience":{"Operations":{"test.stubborn":{"TimeoutSeconds":0.2}}}}}}`,
			elapsed: 200 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				op, late := "sleep", time.Duration(0)
				if tc.op != "" {
					op, late = tc.op, settleBound
				}
				kf, wait := tracked(testKernel(t, tc.config))
				defer wait(t)
				start := time.Now()
				args := append([]string{"test", op, "--delay-ms", "3000"}, tc.args...)
				r := execute(t, kf, nil, "", args...)
				if r.code != exitTimeout || problemOf(t, r.stderr).Code != pipeline.CodeTimeout {
					t.Errorf("app %q = exit %d, stderr %q; want exit 7 with %s", args, r.code, r.stderr, pipeline.CodeTimeout)
				}
				if got := time.Since(start); got < tc.elapsed || got > tc.elapsed+late {
					t.Errorf("app %q ended after %v, want %v (+ up to %v)", args, got, tc.elapsed, late)
				}
			})
		})
	}
}

// signals feeds signals to a command at given offsets from the start.
type signals struct {
	ch chan os.Signal
}

func (s signals) at(d time.Duration, sig os.Signal) {
	go func() {
		time.Sleep(d)
		s.ch <- sig
	}()
}

func TestSignals(t *testing.T) {
	t.Parallel()
	type send struct {
		at  time.Duration
		sig os.Signal
	}
	for _, tc := range []struct {
		name     string
		op       string
		args     []string
		buildFor time.Duration // > 0: building the kernel takes that long
		sends    []send
		code     int
		errCode  string
		elapsed  time.Duration
		stubborn bool  // the answer may leave up to settleBound later
		exits    []int // withExit calls
	}{
		{name: "SIGINT cancels", op: "sleep", sends: []send{{200 * time.Millisecond, os.Interrupt}},
			code: 8, errCode: pipeline.CodeCanceled, elapsed: 200 * time.Millisecond},
		{name: "SIGTERM cancels", op: "sleep", sends: []send{{50 * time.Millisecond, syscall.SIGTERM}},
			code: 8, errCode: pipeline.CodeCanceled, elapsed: 50 * time.Millisecond},
		{name: "SIGINT before the deadline", op: "sleep", args: []string{"--timeout", "0.3"}, sends: []send{{200 * time.Millisecond, os.Interrupt}},
			code: 8, errCode: pipeline.CodeCanceled, elapsed: 200 * time.Millisecond},
		{name: "stubborn handler: canceled at the signal", op: "stubborn", sends: []send{{100 * time.Millisecond, os.Interrupt}},
			code: 8, errCode: pipeline.CodeCanceled, elapsed: 100 * time.Millisecond, stubborn: true},
		{name: "stubborn handler: SIGINT after the deadline fired", op: "stubborn", args: []string{"--timeout", "0.3"},
			sends: []send{{301 * time.Millisecond, os.Interrupt}},
			code:  7, errCode: pipeline.CodeTimeout, elapsed: 300 * time.Millisecond, stubborn: true},
		// The second signal's exit is tested where the command waits on
		// after the first (TestSignalStopsWaiting).
		{name: "signal while building the kernel ends at once", op: "sleep", buildFor: 300 * time.Millisecond,
			sends: []send{{100 * time.Millisecond, os.Interrupt}},
			code:  8, elapsed: 100 * time.Millisecond},
		{name: "no signal", op: "sleep", code: 0, elapsed: 1000 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				s := signals{ch: make(chan os.Signal, 2)}
				for _, snd := range tc.sends {
					s.at(snd.at, snd.sig)
				}
				var mu sync.Mutex
				var exits []int
				exit := func(code int) {
					mu.Lock()
					defer mu.Unlock()
					exits = append(exits, code)
				}
				kf, wait := tracked(testKernel(t))
				defer wait(t)
				build := kf
				if tc.buildFor > 0 {
					build = func() (*kernel.Kernel, error) {
						time.Sleep(tc.buildFor)
						return kf()
					}
				}
				args := append([]string{"test", tc.op, "--delay-ms", "1000"}, tc.args...)
				r := executeOn(t, testRegistry(t), build, []Option{withSignalChannel(s.ch), withExit(exit)}, strings.NewReader(""), args...)
				if r.code != tc.code {
					t.Errorf("app %q with signals %v = exit %d, want %d (stderr %q)", args, tc.sends, r.code, tc.code, r.stderr)
				}
				if tc.errCode != "" && problemOf(t, r.stderr).Code != tc.errCode {
					t.Errorf("app %q with signals %v stderr = %q, want %s", args, tc.sends, r.stderr, tc.errCode)
				}
				late := time.Duration(0)
				if tc.stubborn {
					late = settleBound
				}
				if got := time.Since(start); got < tc.elapsed || got > tc.elapsed+late {
					t.Errorf("app %q with signals %v ended after %v, want %v (+ up to %v)", args, tc.sends, got, tc.elapsed, late)
				}
				if tc.buildFor > 0 {
					time.Sleep(tc.buildFor) // the build left behind ends, and its kernel is closed
					if !strings.Contains(r.stderr, "stopped while starting") {
						t.Errorf("stderr = %q, want it to say the command stopped while starting", r.stderr)
					}
				}
				synctest.Wait()
				mu.Lock()
				defer mu.Unlock()
				if !equalJSON(exits, tc.exits) {
					t.Errorf("app %q with signals %v: exit called with %v, want %v", args, tc.sends, exits, tc.exits)
				}
			})
		})
	}
}

// TestContextIgnoringHandlerAnswersAtDeadline runs, on the real clock, an
// operation whose handler ignores its context and blocks until the test
// ends: the command must report TIMEOUT (exit 7) at the deadline, not when
// the handler returns. It is timed on the real clock, so it runs alone
// (not in parallel with other tests).
func TestContextIgnoringHandlerAnswersAtDeadline(t *testing.T) {
	for _, tc := range []struct {
		name string
		// set returns the kernel's configuration ("": none) and the
		// command's flags that give the call the deadline d.
		set func(d time.Duration) (config string, args []string)
	}{
		{"TimeoutSeconds", func(d time.Duration) (string, []string) {
			return fmt.Sprintf(`{"Sundial":{"Kernel":{"Resilience":{"Operations":{"slow.block":{"TimeoutSeconds":%g}}}}}}`, d.Seconds()), nil
		}},
		{"--timeout", func(d time.Duration) (string, []string) {
			return "", []string{"--timeout", strconv.FormatFloat(d.Seconds(), 'g', -1, 64)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The handler is released when the test ends, or a few seconds
			// after the deadline should the command wait for it (the
			// failure this test is about), so that the test fails rather
			// than hangs.
			release := make(chan struct{})
			var once sync.Once
			free := func() { once.Do(func() { close(release) }) }
			started := make(chan time.Time, 1)
			reg := operations.NewRegistry()
			err := operations.Register(reg, operations.Descriptor{ID: "slow.block", Summary: "Block until released, ignoring the context."},
				func(context.Context, struct{}) (struct{}, error) {
					started <- time.Now()
					<-release
					return struct{}{}, nil
				})
			if err != nil {
				t.Fatal(err)
			}
			var k *kernel.Kernel
			t.Cleanup(func() {
				free()
				if k == nil {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := k.Wait(ctx); err != nil {
					t.Errorf("the blocked handler did not return once released: %v", err)
				}
			})
			// On a loaded machine the 200 ms can pass before the kernel
			// starts the handler, and it then does not run it: the command
			// is run again with ten times the deadline, three tries in all.
			for try, d := 1, 200*time.Millisecond; ; try, d = try+1, 10*d {
				config, flags := tc.set(d)
				opts := []kernel.Option{kernel.WithRegistry(reg)}
				if config != "" {
					opts = append(opts, kernel.WithConfigJSON([]byte(config)))
				}
				kf := func() (*kernel.Kernel, error) {
					k, err = kernel.New(opts...)
					return k, err
				}
				watchdog := time.AfterFunc(d+5*time.Second, free)
				start := time.Now()
				args := append([]string{"slow", "block"}, flags...)
				r := executeOn(t, reg, kf, nil, strings.NewReader(""), args...)
				end := time.Now()
				watchdog.Stop()
				if r.code != exitTimeout || problemOf(t, r.stderr).Code != pipeline.CodeTimeout {
					t.Fatalf("app %q = exit %d, stderr %q; want exit 7 with %s", args, r.code, r.stderr, pipeline.CodeTimeout)
				}
				if at, ran := pipelinetest.HandlerStarted(t, started, k.Running); ran {
					if got := end.Sub(at); got > d+100*time.Millisecond {
						t.Errorf("app %q answered %v after the handler started, want within %v", args, got, d+100*time.Millisecond)
					}
					if got := end.Sub(start); got < d {
						t.Errorf("app %q answered after %v, before the deadline %v", args, got, d)
					}
					return
				}
				if try == 3 {
					t.Fatalf("app %q: the handler never ran, its deadline passed before the kernel started it in three tries", args)
				}
				t.Logf("app %q: the deadline passed before the handler started: once more, with ten times the deadline", args)
			}
		})
	}
}

// TestTypedNilErrorsWithLoggers runs handlers that return a typed nil as
// their error, ours and a foreign one whose Error method panics, with the
// kernel's logger and access log on: UNEXPECTED (exit 1), never a panic.
func TestTypedNilErrorsWithLoggers(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"NIL", "NILFOREIGN"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			logs, access := new(pipelinetest.LogSink), new(pipelinetest.LogSink)
			kf := kernelOn(testRegistry(t), kernel.WithLogger(logs.Logger()), kernel.WithAccessLog(access.Logger()))
			r := execute(t, kf, nil, "", "test", "fail", "--kind", kind)
			if r.code != exitUnexpected {
				t.Errorf("fail --kind %s exit code = %d, want %d (stderr %q)", kind, r.code, exitUnexpected, r.stderr)
			}
			p := problemOf(t, r.stderr)
			want := Problem{Type: outcome.TypePrefix + pipeline.CodeUnexpected, Title: "UNEXPECTED", Detail: pipeline.UnexpectedMessage,
				Code: pipeline.CodeUnexpected, Operation: "test.fail", ExitCode: exitUnexpected, Details: map[string]any{}}
			if !equalJSON(p, want) {
				t.Errorf("fail --kind %s problem = %+v, want %+v", kind, p, want)
			}
			recs := access.Find(pipelinetest.Message("sundial: invocation"))
			if len(recs) != 1 || recs[0].Attrs["kind"] != "UNEXPECTED" || recs[0].Attrs["code"] != pipeline.CodeUnexpected {
				t.Errorf("fail --kind %s access log = %+v, want one UNEXPECTED record", kind, recs)
			}
		})
	}
}

// TestRejectionsObserved checks that calls the adapter turns away before
// the operation runs — an input that does not decode, a malformed flag or
// argument — go through the kernel like calls that run: each has exactly
// one access-log record and a trace ID, which the Problem Details report.
func TestRejectionsObserved(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		args    []string
		code    int
		errCode string // the observed code
		usage   bool   // a usage error: no Problem Details
		none    bool   // nothing is observed
	}{
		{name: "malformed input", args: []string{"test", "echo", "--input", `{"name":`}, code: 2, errCode: codeMalformedInput},
		{name: "input of the wrong type", args: []string{"test", "echo", "--input", `{"count":"x"}`}, code: 2, errCode: codeWrongInput},
		{name: "empty input", args: []string{"test", "echo", "--input", ""}, code: 2, errCode: codeMalformedInput},
		{name: "flag of the wrong type", args: []string{"test", "echo", "--count", "two"}, code: 2, errCode: codeUsage, usage: true},
		{name: "unknown flag", args: []string{"test", "echo", "--nmae", "a"}, code: 2, errCode: codeUsage, usage: true},
		{name: "malformed --timeout", args: []string{"test", "--timeout", "x", "echo"}, code: 2, errCode: codeUsage, usage: true},
		{name: "positional argument", args: []string{"test", "echo", "extra"}, code: 2, errCode: codeUsage, usage: true},
		{name: "success", args: []string{"test", "echo", "--input", `{"name":"a"}`, "--count", "1"}, code: 0},
		{name: "help", args: []string{"test", "echo", "--help"}, none: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tp := sdktrace.NewTracerProvider()
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			access := new(pipelinetest.LogSink)
			kf := kernelOn(testRegistry(t), kernel.WithTracerProvider(tp), kernel.WithAccessLog(access.Logger()))
			r := execute(t, kf, nil, "", tc.args...)
			if r.code != tc.code {
				t.Errorf("app %q exit code = %d, want %d (stderr %q)", tc.args, r.code, tc.code, r.stderr)
			}
			recs := access.Find(pipelinetest.Message("sundial: invocation"))
			if tc.none {
				if len(recs) != 0 {
					t.Errorf("app %q access log = %+v, want no record", tc.args, recs)
				}
				return
			}
			if len(recs) != 1 {
				t.Fatalf("app %q access log = %+v, want one record", tc.args, recs)
			}
			rec := recs[0]
			if code, _ := rec.Attrs["code"].(string); rec.Attrs["operation"] != "test.echo" || rec.Attrs["protocol"] != "cli" || code != tc.errCode {
				t.Errorf("app %q access log record = %v, want operation test.echo, protocol cli, code %q", tc.args, rec.Attrs, tc.errCode)
			}
			traceID, _ := rec.Attrs["trace_id"].(string)
			if len(traceID) != 32 {
				t.Errorf("app %q access log trace_id = %q, want a trace ID", tc.args, traceID)
			}
			if tc.errCode == "" || tc.usage {
				return
			}
			if p := problemOf(t, r.stderr); p.Code != tc.errCode || p.TraceID != traceID {
				t.Errorf("app %q problem = %+v, want code %s and traceId %s", tc.args, p, tc.errCode, traceID)
			}
		})
	}
}

// TestTextTraceID checks that --output text reports the trace ID after the
// details.
func TestTextTraceID(t *testing.T) {
	t.Parallel()
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	r := execute(t, kernelOn(testRegistry(t), kernel.WithTracerProvider(tp)), nil, "", "test", "fail", "--kind", "CONFLICT", "--output", "text")
	head := "app test fail: CONFLICT TEST_CONFLICT: failed as CONFLICT\n  kind: CONFLICT\n  traceId: "
	id, ok := strings.CutPrefix(r.stderr, head)
	if r.code != exitConflict || !ok || len(strings.TrimSuffix(id, "\n")) != 32 || !strings.HasSuffix(id, "\n") {
		t.Errorf("fail --kind CONFLICT --output text = exit %d, stderr %q; want exit %d, %q and a trace ID", r.code, r.stderr, exitConflict, head)
	}
}

// TestRequest checks what the kernel is handed: the operation, protocol
// CLI, the decoded input and --timeout as the caller's deadline.
func TestRequest(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		args     []string
		deadline time.Duration // 0: no caller deadline
	}{
		{name: "no --timeout", args: []string{"--name", "a", "--count", "2"}},
		{name: "--timeout", args: []string{"--input", `{"name":"a","count":2}`, "--timeout", "0.5"}, deadline: 500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := new(pipelinetest.Recorder)
				kf := kernelOn(testRegistry(t), kernel.UseAt(pipeline.StageHandle, rec))
				start := time.Now()
				r := execute(t, kf, nil, "", append([]string{"test", "echo"}, tc.args...)...)
				if r.code != 0 {
					t.Fatalf("exit code = %d, want 0 (stderr %q)", r.code, r.stderr)
				}
				c, ok := rec.Last()
				if !ok {
					t.Fatal("the operation's pipeline did not run")
				}
				inv := c.Invocation
				if inv.OperationID() != "test.echo" || inv.Protocol() != pipeline.ProtocolCLI {
					t.Errorf("invocation of %s over %s, want test.echo over cli", inv.OperationID(), inv.Protocol())
				}
				if in, ok := inv.Input().(*echoIn); !ok || *in != (echoIn{Name: "a", Count: 2}) {
					t.Errorf("input = %#v, want &echoIn{Name: \"a\", Count: 2}", inv.Input())
				}
				d, ok := pipelinetest.CallerDeadline(inv)
				switch {
				case tc.deadline == 0 && ok:
					t.Errorf("caller deadline = %v, want none", d)
				case tc.deadline > 0 && (!ok || !d.Equal(start.Add(tc.deadline)) || inv.Timing().Source != pipeline.DeadlineCaller):
					t.Errorf("caller deadline = %v, %v (source %v), want start + %v (caller)", d, ok, inv.Timing().Source, tc.deadline)
				}
			})
		})
	}
}

// panicUnwrap is an error whose Unwrap panics.
type panicUnwrap struct{}

func (panicUnwrap) Error() string { return "panicUnwrap" }
func (panicUnwrap) Unwrap() error { panic("unwrap") }

func TestExitCode(t *testing.T) {
	t.Parallel()
	var nilExit *ExitError
	var nilForeign *nilErr
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{
		{"nil", nil, exitOK},
		{"exit error", &ExitError{Code: exitConflict}, exitConflict},
		{"wrapped exit error", fmt.Errorf("run: %w", &ExitError{Code: exitTimeout}), exitTimeout},
		{"nil *ExitError", nilExit, exitUnexpected},
		{"typed-nil foreign error", nilForeign, exitUnexpected},
		{"usage error", errors.New("unknown flag"), exitValidation},
		{"Unwrap panics", panicUnwrap{}, exitValidation},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := exitCode(tc.err); got != tc.want {
				t.Errorf("exitCode(%v) = %d, want %d", pipeline.ErrorText(tc.err), got, tc.want)
			}
		})
	}
	if s := nilExit.Error(); s == "" {
		t.Error("(*ExitError)(nil).Error() is empty")
	}
	if s := (&ExitError{Code: 1, Err: nilForeign}).Error(); !strings.Contains(s, "nilErr") {
		t.Errorf("ExitError{Err: (*nilErr)(nil)}.Error() = %q, want the type named", s)
	}
}

// TestExecuteForeignErrors runs commands of the tree, not built by
// AddCommands, that fail with errors that cannot be printed.
func TestExecuteForeignErrors(t *testing.T) {
	t.Parallel()
	var nilForeign *nilErr
	for _, tc := range []struct {
		name   string
		err    error
		code   int
		stderr string
	}{
		{"typed-nil foreign error", nilForeign, exitUnexpected, "app: *cliadapter.nilErr (its Error method panicked)\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := &cobra.Command{Use: "app"}
			root.AddCommand(&cobra.Command{Use: "run", RunE: func(*cobra.Command, []string) error { return tc.err }})
			var stderr bytes.Buffer
			root.SetArgs([]string{"run"})
			root.SetOut(io.Discard)
			root.SetErr(&stderr)
			if code := Execute(context.Background(), root); code != tc.code || stderr.String() != tc.stderr {
				t.Errorf("Execute = %d, stderr %q; want %d, %q", code, stderr.String(), tc.code, tc.stderr)
			}
		})
	}
}
