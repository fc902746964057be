//go:build unix

package cliadapter

import (
	"io"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sundial-go/sundial/pipeline"
)

// readingReader closes reading on its first Read, then reads from r.
type readingReader struct {
	r       io.Reader
	once    sync.Once
	reading chan struct{}
}

func (n *readingReader) Read(p []byte) (int, error) {
	n.once.Do(func() { close(n.reading) })
	return n.r.Read(p)
}

// TestStdinSignalRealClock sends a real signal (SIGUSR1, watched in place
// of SIGINT) to the test process once `--input -` is reading a pipe whose
// writer never sends nor closes: the command reports CANCELLED (exit 8) at
// once instead of waiting for stdin. It signals the process, so it runs
// alone.
func TestStdinSignalRealClock(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pw.Close()
		pr.Close()
	})
	stdin := &readingReader{r: pr, reading: make(chan struct{})}
	sent := make(chan time.Time, 1)
	go func() {
		<-stdin.reading
		sent <- time.Now()
		if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
			t.Error(err)
		}
	}()
	args := []string{"test", "echo", "--input", "-", "--timeout", "30"}
	opts := []Option{WithSignals(syscall.SIGUSR1), withExit(func(code int) { t.Errorf("exit(%d) called: a second signal", code) })}
	r := executeOn(t, testRegistry(t), testKernel(t), opts, stdin, args...)
	end := time.Now()
	if r.code != exitCanceled || problemOf(t, r.stderr).Code != pipeline.CodeCanceled {
		t.Errorf("app %q with SIGUSR1 while reading stdin = exit %d, stderr %q; want exit 8 with %s", args, r.code, r.stderr, pipeline.CodeCanceled)
	}
	select {
	case at := <-sent:
		got := end.Sub(at)
		t.Logf("app %q: SIGUSR1 while reading a silent stdin: exit %d %v after the signal", args, r.code, got)
		if got > time.Second {
			t.Errorf("app %q ended %v after the signal, want within 1s", args, got)
		}
	default:
		t.Errorf("app %q never read its stdin", args)
	}
}
