package cliadapter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/spf13/cobra"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

type echoIn struct {
	Name  string `json:"name"`
	Count int    `json:"count"`
}

type sleepIn struct {
	DelayMs int `json:"delayMs"`
}

type failIn struct {
	Kind string `json:"kind"`
}

// testRegistry registers the operations the command tests run:
//
//   - test.echo returns its input;
//   - test.sleep works delayMs, stopping when its context ends;
//   - test.stubborn works delayMs ignoring its context (a handler that
//     does not cooperate with cancellation);
//   - test.fail fails with the kind named by its input (PANIC panics,
//     PLAIN returns a foreign error with internal text);
//   - other.ping answers "pong".
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
				}
				k, _ := pipeline.ParseKind(in.Kind)
				return struct{}{}, pipeline.NewError(k, "TEST_"+in.Kind, "failed as "+in.Kind).WithDetail("kind", in.Kind)
			}),
		operations.Register(reg, operations.Descriptor{ID: "other.ping", Summary: "Ping."},
			func(context.Context, struct{}) (string, error) { return "pong", nil }),
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return reg
}

// testKernel returns a KernelFunc building a kernel over testRegistry and
// the given config documents.
func testKernel(t testing.TB, configs ...string) KernelFunc {
	return func() (*kernel.Kernel, error) {
		opts := []kernel.Option{kernel.WithRegistry(testRegistry(t))}
		for _, c := range configs {
			if c == "" {
				continue
			}
			opts = append(opts, kernel.WithConfigJSON([]byte(c)))
		}
		return kernel.New(opts...)
	}
}

type result struct {
	code           int
	stdout, stderr string
}

// execute runs `app args...` on a fresh command tree, without OS signal
// handling unless opts say otherwise.
func execute(t testing.TB, kf KernelFunc, opts []Option, stdin string, args ...string) result {
	t.Helper()
	root := &cobra.Command{Use: "app"}
	if err := AddCommands(root, testRegistry(t), kf, append([]Option{WithSignals()}, opts...)...); err != nil {
		t.Fatalf("AddCommands: %v", err)
	}
	var stdout, stderr bytes.Buffer
	root.SetArgs(args)
	root.SetIn(strings.NewReader(stdin))
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
			stdout: []string{"Echo the input.", "test.echo", "--name string", "--count int", "--input", "--timeout seconds", "--output format", "7 TIMEOUT, 8 CANCELLED"}},
		{name: "group help", args: []string{"test"},
			stdout: []string{"Operations test.*: echo, fail, sleep, stubborn.", "echo", "stubborn"}},
		{name: "root help lists groups", args: []string{"--help"},
			stdout: []string{"other", "Operations other.*: ping.", "test"}},
		{name: "unknown command in group", args: []string{"test", "ehco"}, code: 2, noStdout: true,
			stderr: []string{`app: unknown command "ehco" for "app test"; did you mean echo?`, "Run 'app test --help' for usage."}},
		{name: "unknown flag", args: []string{"test", "echo", "--nmae", "a"}, code: 2, noStdout: true,
			stderr: []string{"unknown flag: --nmae", "Run 'app test echo --help' for usage."}},
		{name: "flag of the wrong type", args: []string{"test", "echo", "--count", "two"}, code: 2, noStdout: true,
			stderr: []string{`invalid argument "two" for "--count" flag`}},
		{name: "positional argument", args: []string{"test", "echo", "extra"}, code: 2, noStdout: true,
			stderr: []string{`unknown command "extra" for "app test echo"`}},
		{name: "timeout not a number", args: []string{"test", "echo", "--timeout", "abc"}, code: 2, noStdout: true,
			stderr: []string{`invalid argument "abc" for "--timeout" flag: not a finite number of seconds`}},
		{name: "timeout zero", args: []string{"test", "echo", "--timeout", "0"}, code: 2, noStdout: true,
			stderr: []string{`invalid argument "0" for "--timeout" flag: must be greater than 0 seconds`}},
		{name: "timeout negative", args: []string{"test", "echo", "--timeout=-1"}, code: 2, noStdout: true,
			stderr: []string{`invalid argument "-1" for "--timeout" flag: must be greater than 0 seconds`}},
		{name: "timeout NaN", args: []string{"test", "echo", "--timeout", "NaN"}, code: 2, noStdout: true,
			stderr: []string{`invalid argument "NaN" for "--timeout" flag`}},
		{name: "timeout on the group", args: []string{"test", "--timeout", "x", "echo"}, code: 2, noStdout: true,
			stderr: []string{`invalid argument "x" for "--timeout" flag`}},
		{name: "output format", args: []string{"test", "echo", "--output", "yaml"}, code: 2, noStdout: true,
			stderr: []string{`invalid argument "yaml" for "--output" flag: cliadapter: output format "yaml" is not "json" or "text"`}},
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
	for _, k := range pipeline.Kinds() {
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
		{name: "malformed input", args: []string{"test", "echo", "--input", `{"name":`}, code: 2, errCode: CodeMalformedInput, details: map[string]any{}},
		{name: "unknown input field", args: []string{"test", "echo", "--input", `{"nmae":"a"}`}, code: 2, errCode: CodeWrongInput, details: map[string]any{"field": "nmae"}},
		{name: "input of the wrong type", args: []string{"test", "echo", "--input", `{"count":"x"}`}, code: 2, errCode: CodeWrongInput, details: map[string]any{"field": "count"}},
		{name: "trailing input", args: []string{"test", "echo", "--input", `{} {}`}, code: 2, errCode: CodeMalformedInput, details: map[string]any{}},
		{name: "text", args: []string{"test", "fail", "--kind", "NOT_FOUND", "--output", "text"}, code: 3,
			stderr: "app test fail: NOT_FOUND TEST_NOT_FOUND: failed as NOT_FOUND\n  kind: NOT_FOUND\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := execute(t, kf, nil, "", tc.args...)
			if r.code != tc.code {
				t.Errorf("app %q exit code = %d, want %d", tc.args, r.code, tc.code)
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
	kf := func() (*kernel.Kernel, error) { return nil, errors.New("kernel: config file: no such file") }
	r := execute(t, kf, nil, "", "test", "echo")
	if r.code != 2 || !strings.Contains(r.stderr, "app: kernel: config file: no such file") {
		t.Errorf("app test echo with a failing kernel = exit %d, stderr %q; want exit 2 naming the error", r.code, r.stderr)
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

// The deadline tests run in a synctest bubble: the clock is fake, so the
// times asserted are exact.

func TestTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				args := append([]string{"test", "sleep", "--delay-ms", "3000"}, tc.args...)
				r := execute(t, testKernel(t, tc.config), nil, "", args...)
				if r.code != ExitTimeout || !strings.Contains(r.stderr, pipeline.CodeTimeout) {
					t.Errorf("app %q = exit %d, stderr %q; want exit 7 with %s", args, r.code, r.stderr, pipeline.CodeTimeout)
				}
				if got := time.Since(start); got != tc.elapsed {
					t.Errorf("app %q ended after %v, want %v", args, got, tc.elapsed)
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
		name    string
		op      string
		args    []string
		sends   []send
		code    int
		errCode string
		elapsed time.Duration
		exits   []int // WithExit calls
	}{
		{name: "SIGINT cancels", op: "sleep", sends: []send{{200 * time.Millisecond, os.Interrupt}},
			code: 8, errCode: pipeline.CodeCancelled, elapsed: 200 * time.Millisecond},
		{name: "SIGTERM cancels", op: "sleep", sends: []send{{50 * time.Millisecond, syscall.SIGTERM}},
			code: 8, errCode: pipeline.CodeCancelled, elapsed: 50 * time.Millisecond},
		{name: "SIGINT before the deadline", op: "sleep", args: []string{"--timeout", "0.3"}, sends: []send{{200 * time.Millisecond, os.Interrupt}},
			code: 8, errCode: pipeline.CodeCancelled, elapsed: 200 * time.Millisecond},
		{name: "SIGINT after the deadline fired", op: "stubborn", args: []string{"--timeout", "0.3"}, sends: []send{{500 * time.Millisecond, os.Interrupt}},
			code: 7, errCode: pipeline.CodeTimeout, elapsed: 1000 * time.Millisecond},
		{name: "stubborn handler: cancelled when it returns", op: "stubborn", sends: []send{{100 * time.Millisecond, os.Interrupt}},
			code: 8, errCode: pipeline.CodeCancelled, elapsed: 1000 * time.Millisecond},
		{name: "second signal exits at once", op: "stubborn", sends: []send{{100 * time.Millisecond, os.Interrupt}, {250 * time.Millisecond, os.Interrupt}},
			code: 8, errCode: pipeline.CodeCancelled, elapsed: 1000 * time.Millisecond, exits: []int{8}},
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
				var exitAt time.Duration
				exit := func(code int) {
					mu.Lock()
					defer mu.Unlock()
					exits, exitAt = append(exits, code), time.Since(start)
				}
				args := append([]string{"test", tc.op, "--delay-ms", "1000"}, tc.args...)
				r := execute(t, testKernel(t), []Option{withSignalChannel(s.ch), WithExit(exit)}, "", args...)
				if r.code != tc.code {
					t.Errorf("app %q with signals %v = exit %d, want %d (stderr %q)", args, tc.sends, r.code, tc.code, r.stderr)
				}
				if tc.errCode != "" && problemOf(t, r.stderr).Code != tc.errCode {
					t.Errorf("app %q with signals %v stderr = %q, want %s", args, tc.sends, r.stderr, tc.errCode)
				}
				if got := time.Since(start); got != tc.elapsed {
					t.Errorf("app %q with signals %v ended after %v, want %v", args, tc.sends, got, tc.elapsed)
				}
				synctest.Wait()
				mu.Lock()
				defer mu.Unlock()
				if !equalJSON(exits, tc.exits) {
					t.Errorf("app %q with signals %v: exit called with %v, want %v", args, tc.sends, exits, tc.exits)
				}
				if len(tc.exits) > 0 {
					if last := tc.sends[len(tc.sends)-1].at; exitAt != last {
						t.Errorf("exit called after %v, want at the second signal, %v", exitAt, last)
					}
					if !strings.Contains(r.stderr, "app test stubborn: interrupt again, exiting at once") {
						t.Errorf("stderr = %q, want the second-signal line", r.stderr)
					}
				}
			})
		})
	}
}
