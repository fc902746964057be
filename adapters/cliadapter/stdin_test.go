package cliadapter

import (
	"errors"
	"io"
	"os"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

// TestStdinBounded runs `--input -` over a pipe whose writer sends late or
// never, in a synctest bubble (exact times): the read of standard input is
// bounded by the effective deadline (--timeout, the operation's
// TimeoutSeconds, the kernel's MaxTimeoutSeconds) and by the first signal,
// which end the call with TIMEOUT (exit 7) or CANCELLED (exit 8) then, and
// the kernel observes it (one access-log record with that code).
func TestStdinBounded(t *testing.T) {
	t.Parallel()
	const never = time.Duration(0)
	for _, tc := range []struct {
		name    string
		config  string
		args    []string
		sendAt  time.Duration // when the writer sends the document and closes; never
		signal  time.Duration // > 0: SIGINT then
		code    int
		errCode string // "": success
		elapsed time.Duration
	}{
		{name: "--timeout", args: []string{"--timeout", "0.2"}, sendAt: never,
			code: exitTimeout, errCode: pipeline.CodeTimeout, elapsed: 200 * time.Millisecond},
		{name: "--timeout before the document arrives", args: []string{"--timeout", "0.2"}, sendAt: 300 * time.Millisecond,
			code: exitTimeout, errCode: pipeline.CodeTimeout, elapsed: 200 * time.Millisecond},
		{name: "operation's TimeoutSeconds",
			config: `{"Sundial":{"Kernel":{"Resilience":{"Operations":{"test.echo":{"TimeoutSeconds":0.2}}}}}}`,
			args:   []string{"--timeout", "1"}, sendAt: never,
			code: exitTimeout, errCode: pipeline.CodeTimeout, elapsed: 200 * time.Millisecond},
		{name: "MaxTimeoutSeconds", config: `{"Sundial":{"Kernel":{"MaxTimeoutSeconds":0.3}}}`,
			args: []string{"--timeout", "100"}, sendAt: never,
			code: exitTimeout, errCode: pipeline.CodeTimeout, elapsed: 300 * time.Millisecond},
		{name: "SIGINT", sendAt: never, signal: 100 * time.Millisecond,
			code: exitCanceled, errCode: pipeline.CodeCanceled, elapsed: 100 * time.Millisecond},
		{name: "SIGINT before --timeout", args: []string{"--timeout", "1"}, sendAt: never, signal: 100 * time.Millisecond,
			code: exitCanceled, errCode: pipeline.CodeCanceled, elapsed: 100 * time.Millisecond},
		{name: "document within --timeout", args: []string{"--timeout", "0.3", "--count", "2"}, sendAt: 100 * time.Millisecond,
			code: exitOK, elapsed: 100 * time.Millisecond},
		{name: "document without a deadline", args: []string{"--count", "2"}, sendAt: 5 * time.Second,
			code: exitOK, elapsed: 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				pr, pw := io.Pipe()
				stop, wrote := make(chan struct{}), make(chan struct{})
				go func() {
					defer close(wrote)
					var send <-chan time.Time
					if tc.sendAt != never {
						send = time.After(tc.sendAt)
					}
					select {
					case <-send:
						_, _ = io.WriteString(pw, `{"name":"a"}`)
						pw.Close()
					case <-stop:
					}
				}()
				// Whatever the outcome, the writer stops and the pipe
				// closes, so that the goroutine left reading it returns
				// before the bubble ends.
				defer func() {
					close(stop)
					<-wrote
					pw.CloseWithError(errors.New("test over"))
					synctest.Wait()
				}()
				s := signals{ch: make(chan os.Signal, 2)}
				if tc.signal > 0 {
					s.at(tc.signal, os.Interrupt)
				}
				access := new(pipelinetest.LogSink)
				opts := []kernel.Option{kernel.WithAccessLog(access.Logger())}
				if tc.config != "" {
					opts = append(opts, kernel.WithConfigJSON([]byte(tc.config)))
				}
				kf, wait := tracked(kernelOn(testRegistry(t), opts...))
				defer wait(t)
				args := append([]string{"test", "echo", "--input", "-"}, tc.args...)
				r := executeOn(t, testRegistry(t), kf, []Option{withSignalChannel(s.ch), withExit(func(int) { t.Error("exit called") })}, pr, args...)
				got := time.Since(start)
				t.Logf("app %q (document at %s, SIGINT at %s): exit %d after %v", args, at(tc.sendAt), at(tc.signal), r.code, got)
				if r.code != tc.code {
					t.Errorf("app %q = exit %d, want %d (stderr %q)", args, r.code, tc.code, r.stderr)
				}
				if got != tc.elapsed {
					t.Errorf("app %q ended after %v, want %v", args, got, tc.elapsed)
				}
				recs := access.Find(pipelinetest.Message("sundial: invocation"))
				if len(recs) != 1 {
					t.Fatalf("app %q access log = %+v, want one record", args, recs)
				}
				if code, _ := recs[0].Attrs["code"].(string); code != tc.errCode {
					t.Errorf("app %q access log code = %q, want %q", args, code, tc.errCode)
				}
				if tc.errCode == "" {
					if want := "{\n  \"name\": \"a\",\n  \"count\": 2\n}\n"; r.stdout != want {
						t.Errorf("app %q stdout = %q, want %q", args, r.stdout, want)
					}
					return
				}
				if p := problemOf(t, r.stderr); p.Code != tc.errCode || p.ExitCode != tc.code {
					t.Errorf("app %q problem = %+v, want %s, exit code %d", args, p, tc.errCode, tc.code)
				}
			})
		})
	}
}

// at formats an offset of TestStdinBounded; 0 is never.
func at(d time.Duration) string {
	if d == 0 {
		return "never"
	}
	return d.String()
}

// TestStdinTimeoutRealClock runs `--input - --timeout 0.2` on the real
// clock with an *os.File standard input (a pipe) whose writer never sends
// nor closes: the command reports TIMEOUT (exit 7) at the deadline instead
// of waiting for stdin; the goroutine left reading returns when the test
// closes the pipe. It is timed on the real clock, so it runs alone.
func TestStdinTimeoutRealClock(t *testing.T) {
	const deadline = 200 * time.Millisecond
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pw.Close()
		pr.Close()
	})
	args := []string{"test", "echo", "--input", "-", "--timeout", "0.2"}
	start := time.Now()
	r := executeOn(t, testRegistry(t), testKernel(t), nil, pr, args...)
	got := time.Since(start)
	t.Logf("app %q with a silent stdin: exit %d after %v", args, r.code, got)
	if r.code != exitTimeout || problemOf(t, r.stderr).Code != pipeline.CodeTimeout {
		t.Errorf("app %q = exit %d, stderr %q; want exit 7 with %s", args, r.code, r.stderr, pipeline.CodeTimeout)
	}
	if got < deadline || got > deadline+800*time.Millisecond {
		t.Errorf("app %q ended after %v, want at the deadline %v (+ up to 800ms)", args, got, deadline)
	}
}
