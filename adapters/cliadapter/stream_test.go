package cliadapter

import (
	"context"
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// These tests run streaming operations' commands through the kernel
// (kernel.Op.Stream).

type watchIn struct {
	Count int  `json:"count"`
	Wait  bool `json:"wait"`
}

type numIn struct {
	N int `json:"n"`
}

type numOut struct {
	Total int `json:"total"`
}

// watchProbe is what feed.watch tells of a call with Wait set, before
// it returns: how many of its Sends succeeded, then its context's cause.
type watchProbe struct {
	sent  chan int
	ended chan error
}

func newWatchProbe() *watchProbe {
	return &watchProbe{sent: make(chan int, 4), ended: make(chan error, 4)}
}

// streamRegistry registers feed.watch (a server stream of Count
// messages, then waiting for its context when Wait), nums.sum (a client
// stream) and nums.double (a bidi stream). p gets what feed.watch tells
// when Wait is set.
func streamRegistry(t *testing.T, p *watchProbe) *operations.Registry {
	t.Helper()
	reg := operations.NewRegistry()
	err := errors.Join(
		operations.RegisterServerStream(reg, operations.Descriptor{ID: "feed.watch"},
			func(ctx context.Context, in watchIn, s *operations.Sender[numOut]) error {
				sent := 0
				if in.Wait {
					// Whichever way the handler returns, by its own wait or
					// by a Send that the caller's signal ended first (the
					// line written, the signal's cancellation seen by Send
					// before the write's completion: either may win), its
					// successful Sends and its context's cause are told.
					defer func() {
						<-ctx.Done()
						p.sent <- sent
						p.ended <- context.Cause(ctx)
					}()
				}
				for i := 1; i <= in.Count; i++ {
					if err := s.Send(numOut{i}); err != nil {
						return err
					}
					sent++
				}
				if in.Wait {
					<-ctx.Done()
					return ctx.Err()
				}
				return nil
			}),
		operations.RegisterClientStream(reg, operations.Descriptor{ID: "nums.sum"},
			func(_ context.Context, r *operations.Receiver[numIn]) (numOut, error) {
				total := 0
				for {
					in, err := r.Recv()
					if err == io.EOF {
						return numOut{total}, nil
					}
					if err != nil {
						return numOut{}, err
					}
					total += in.N
				}
			}),
		operations.RegisterBidiStream(reg, operations.Descriptor{ID: "nums.double"},
			func(_ context.Context, r *operations.Receiver[numIn], s *operations.Sender[numOut]) error {
				for {
					in, err := r.Recv()
					if err == io.EOF {
						return nil
					}
					if err != nil {
						return err
					}
					if err := s.Send(numOut{2 * in.N}); err != nil {
						return err
					}
				}
			}),
	)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// lineWriter is a stdout that records each write and flush, and tells
// of each line on lines.
type lineWriter struct {
	mu      sync.Mutex
	b       strings.Builder
	writes  int
	flushes int
	lines   chan struct{}
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes++
	w.b.Write(p)
	return len(p), nil
}

func (w *lineWriter) Flush() error {
	w.mu.Lock()
	w.flushes++
	w.mu.Unlock()
	select {
	case w.lines <- struct{}{}:
	default:
	}
	return nil
}

func (w *lineWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// runStream runs `app args...` over the stream registry, with stdin and
// the signal channel sigs.
func runStream(t *testing.T, p *watchProbe, sigs chan os.Signal, stdin string, out *lineWriter, args ...string) (int, string) {
	t.Helper()
	return runStreamContext(context.Background(), t, p, sigs, stdin, out, args...)
}

// runStreamContext is runStream with the command's context ctx.
func runStreamContext(ctx context.Context, t *testing.T, p *watchProbe, sigs chan os.Signal, stdin string, out *lineWriter, args ...string) (int, string) {
	t.Helper()
	reg := streamRegistry(t, p)
	root := &cobra.Command{Use: "app"}
	kf := func() (*kernel.Kernel, error) {
		return kernel.New(kernel.WithRegistry(reg), kernel.WithConfigJSON([]byte(`{"Sundial": {"Kernel": {"MaxTimeoutSeconds": 30}}}`)))
	}
	opts := []Option{WithSignals(), withSignalChannel(sigs), withExit(func(code int) { t.Errorf("exit(%d)", code) })}
	if err := AddCommands(root, reg, kf, opts...); err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	root.SetArgs(args)
	root.SetIn(strings.NewReader(stdin))
	root.SetOut(out)
	root.SetErr(&stderr)
	return Execute(ctx, root), stderr.String()
}

// TestStreamCommands: a server stream writes one JSON line a message to
// stdout, each written and flushed alone; a client stream reads stdin's
// lines and writes its reply; a bidi stream answers line by line.
func TestStreamCommands(t *testing.T) {
	sigs := make(chan os.Signal, 1)
	out := &lineWriter{lines: make(chan struct{}, 8)}
	code, stderr := runStream(t, nil, sigs, "", out, "feed", "watch", "--count", "3")
	if code != 0 || out.String() != "{\"total\":1}\n{\"total\":2}\n{\"total\":3}\n" || out.writes != 3 || out.flushes != 3 {
		t.Fatalf("feed watch: exit %d, stdout %q (%d writes, %d flushes), stderr %q; want 3 lines, each flushed",
			code, out.String(), out.writes, out.flushes, stderr)
	}
	out = &lineWriter{lines: make(chan struct{}, 8)}
	code, stderr = runStream(t, nil, sigs, "{\"n\":1}\n\n{\"n\":2}\n", out, "nums", "sum")
	if code != 0 || strings.Join(strings.Fields(out.String()), "") != `{"total":3}` {
		t.Fatalf("nums sum: exit %d, stdout %q, stderr %q", code, out.String(), stderr)
	}
	out = &lineWriter{lines: make(chan struct{}, 8)}
	code, stderr = runStream(t, nil, sigs, "{\"n\":1}\n{\"n\":5}\n", out, "nums", "double")
	if code != 0 || out.String() != "{\"total\":2}\n{\"total\":10}\n" {
		t.Fatalf("nums double: exit %d, stdout %q, stderr %q", code, out.String(), stderr)
	}
	out = &lineWriter{lines: make(chan struct{}, 8)}
	code, _ = runStream(t, nil, sigs, "", out, "nums", "sum", "--input", "{}")
	if code != ExitCodeFor(pipeline.KindValidation) {
		t.Fatalf("nums sum --input: exit %d, want %d", code, ExitCodeFor(pipeline.KindValidation))
	}
	out = &lineWriter{lines: make(chan struct{}, 8)}
	code, _ = runStream(t, nil, sigs, "{\"n\":1}\n{\"n\":\"x\"}\n", out, "nums", "sum")
	if code != ExitCodeFor(pipeline.KindValidation) {
		t.Fatalf("nums sum with a bad line: exit %d, want %d", code, ExitCodeFor(pipeline.KindValidation))
	}
}

// TestStreamCommandOutcomes: the deadline mid-stream leaves the lines
// written, then exits 7 with TIMEOUT on stderr; a signal mid-stream ends
// the handler's context and exits 8.
func TestStreamCommandOutcomes(t *testing.T) {
	p := newWatchProbe()
	sigs := make(chan os.Signal, 1)
	// On a loaded machine the 400 ms can pass before the handler has sent
	// its two lines: before the kernel starts it (it then does not run
	// it), or before its Send. The command then ends in TIMEOUT with fewer
	// lines, and is run again with ten times the deadline, at most the
	// 30 s of runStream's MaxTimeoutSeconds, three tries in all.
	const (
		lines      = "{\"total\":1}\n{\"total\":2}\n"
		maxTimeout = 30 * time.Second
	)
	var cause error // how the context of the handler that sent both lines ended
	for try, d := 1, 400*time.Millisecond; ; try, d = try+1, min(10*d, maxTimeout) {
		out := &lineWriter{lines: make(chan struct{}, 8)}
		// The command ends at its deadline; the bound, 20 s past it, is
		// for one that does not. It cancels the command's context rather
		// than give it a deadline, which the kernel would take for the
		// caller's.
		ctx, cancel := context.WithCancel(context.Background())
		bound := time.AfterFunc(d+20*time.Second, cancel)
		code, stderr := runStreamContext(ctx, t, p, sigs, "", out, "feed", "watch", "--count", "2", "--wait",
			"--timeout", strconv.FormatFloat(d.Seconds(), 'g', -1, 64))
		expired := !bound.Stop()
		cancel()
		if expired {
			t.Fatalf("the command did not end within 20 s of its %v deadline", d)
		}
		// The command returns once the stream has ended, and the stream
		// ends once its handler has returned: a handler that started has
		// told its successful Sends, then its context's end, by now.
		sent, ran := 0, false
		select {
		case sent = <-p.sent:
			ran, cause = true, <-p.ended
		default:
		}
		if code == exitTimeout && out.String() != lines && strings.HasPrefix(lines, out.String()) &&
			problemOf(t, stderr).Code == pipeline.CodeTimeout {
			// Each successful Send wrote its line first. A Send that the
			// deadline ended may still have written its own: its write
			// runs apart, and Send returns at the stream's end.
			written := strings.Count(out.String(), "\n")
			if written < sent || written > sent+1 {
				t.Fatalf("stdout holds %d lines (%q) for the handler's %d successful Sends; want as many, or one more from the Send the deadline ended", written, out.String(), sent)
			}
			if try == 3 {
				t.Fatalf("the deadline passed before the handler sent its two lines in three tries (the last %v): stdout %q", d, out.String())
			}
			if ran {
				t.Logf("the %v deadline passed before the handler sent its lines (stdout %q): once more, with %v", d, out.String(), min(10*d, maxTimeout))
			} else {
				t.Logf("the %v deadline passed before the handler started: once more, with %v", d, min(10*d, maxTimeout))
			}
			continue
		}
		if code != exitTimeout || out.String() != lines || problemOf(t, stderr).Code != pipeline.CodeTimeout {
			t.Fatalf("exit %d, stdout %q, stderr %q; want 2 lines, then exit 7 TIMEOUT", code, out.String(), stderr)
		}
		if !ran {
			t.Fatal("the command wrote both lines, but its handler told nothing")
		}
		break
	}
	if !errors.Is(cause, context.DeadlineExceeded) {
		t.Fatalf("the handler's context ended with %v, want the deadline", cause)
	}

	out := &lineWriter{lines: make(chan struct{}, 8)}
	go func() {
		select {
		case <-out.lines:
			sigs <- os.Interrupt
		case <-time.After(30 * time.Second):
		}
	}()
	code, stderr := runStream(t, p, sigs, "", out, "feed", "watch", "--count", "1", "--wait")
	if code != exitCanceled || out.String() != "{\"total\":1}\n" || problemOf(t, stderr).Code != pipeline.CodeCanceled {
		t.Fatalf("exit %d, stdout %q, stderr %q; want 1 line, then exit 8 CANCELLED", code, out.String(), stderr)
	}
	var sig *signalError
	if cause := handlerEnded(t, p.ended); !errors.As(cause, &sig) {
		t.Fatalf("the handler's context ended with %v, want the signal", cause)
	}
}

// handlerEnded returns the cause ended gets, failing t if none comes
// within 30 s.
func handlerEnded(t *testing.T, ended <-chan error) error {
	t.Helper()
	select {
	case cause := <-ended:
		return cause
	case <-time.After(30 * time.Second):
		t.Fatal("the handler's context did not end within 30s of the command's")
		return nil
	}
}
