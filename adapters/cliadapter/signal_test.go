//go:build unix

package cliadapter

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sundial-go/sundial/kernel"
)

// TestNotifyOSSignal sends real signals to the test process: the first
// cancels the context with a *signalError cause, the second calls
// onSecond, and after stop the signal is no longer caught.
func TestNotifyOSSignal(t *testing.T) {
	second := make(chan os.Signal, 1)
	in := notify(context.Background(), func(sig os.Signal) { second <- sig }, syscall.SIGUSR1)
	defer in.stop()

	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	select {
	case <-in.ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("context not canceled 10 s after SIGUSR1")
	}
	var se *signalError
	if cause := context.Cause(in.ctx); !errors.As(cause, &se) || se.Signal != syscall.SIGUSR1 {
		t.Errorf("context.Cause = %v, want *signalError for SIGUSR1", cause)
	}
	if !errors.Is(in.ctx.Err(), context.Canceled) {
		t.Errorf("ctx.Err() = %v, want context.Canceled (a cancellation, not a deadline)", in.ctx.Err())
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	select {
	case sig := <-second:
		if sig != syscall.SIGUSR1 {
			t.Errorf("onSecond(%v), want SIGUSR1", sig)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("onSecond not called 10 s after the second SIGUSR1")
	}
	in.stop()
	in.stop() // idempotent
}

func TestNotifyWithoutSignals(t *testing.T) {
	t.Parallel()
	parent, cancel := context.WithCancel(context.Background())
	in := notify(parent, func(os.Signal) { t.Error("onSecond called") })
	if in.ctx.Err() != nil {
		t.Fatalf("ctx.Err() = %v before anything happened", in.ctx.Err())
	}
	cancel()
	<-in.ctx.Done()
	in.stop()
}

func TestWatchStopBeforeSignal(t *testing.T) {
	t.Parallel()
	ch := make(chan os.Signal, 1)
	in := watch(context.Background(), ch, func(os.Signal) { t.Error("onSecond called") }, func() {})
	in.stop()
	if !errors.Is(context.Cause(in.ctx), context.Canceled) {
		t.Errorf("after stop, cause = %v, want context.Canceled", context.Cause(in.ctx))
	}
	ch <- os.Interrupt // nobody watches any more: not a second signal
}

// TestSignalWhileBuildingTheKernel: a signal while the kernel function
// still runs (a config slow to read, a store slow to answer) ends the
// command at once, exit 8, saying so and running nothing; the kernel the
// function returns later is closed.
func TestSignalWhileBuildingTheKernel(t *testing.T) {
	sigs := make(chan os.Signal, 1)
	building, release := make(chan struct{}), make(chan struct{})
	built := make(chan *kernel.Kernel, 1)
	kf := func() (*kernel.Kernel, error) {
		close(building)
		<-release
		k, err := testKernel(t)()
		built <- k
		return k, err
	}
	go func() {
		<-building
		sigs <- syscall.SIGTERM
	}()
	args := []string{"test", "echo", "--name", "x"}
	opts := []Option{withSignalChannel(sigs), withExit(func(code int) { t.Errorf("exit(%d) called", code) })}
	// Without the signal's effect, the build ends after a while, and the
	// call runs on a canceled context instead of not at all.
	var once sync.Once
	stopBuild := func() { once.Do(func() { close(release) }) }
	timer := time.AfterFunc(5*time.Second, stopBuild)
	defer timer.Stop()
	r := executeOn(t, testRegistry(t), kf, opts, nil, args...)
	stopBuild()
	if r.code != exitCanceled || r.stdout != "" || !strings.Contains(r.stderr, "app test echo: stopped while starting") ||
		!strings.Contains(r.stderr, "nothing ran") {
		t.Errorf("app %q with a signal while building the kernel = exit %d, stdout %q, stderr %q; want exit 8, "+
			"saying it stopped while starting", args, r.code, r.stdout, r.stderr)
	}
	k := <-built
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := k.Reload(); errors.Is(err, kernel.ErrClosed) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the kernel built after the signal was not closed")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestKernelFunctionPanicReachesTheCaller: a kernel function that panics
// panics on the goroutine that executes the command, where the
// application can recover it, as it would calling the function itself.
func TestKernelFunctionPanicReachesTheCaller(t *testing.T) {
	kf := func() (*kernel.Kernel, error) { panic("no kernel today") }
	defer func() {
		if v := recover(); v != "no kernel today" {
			t.Errorf("recovered %v, want the kernel function's panic", v)
		}
	}()
	r := executeOn(t, testRegistry(t), kf, nil, nil, "test", "echo", "--name", "x")
	t.Errorf("the command returned (exit %d, stderr %q), want the kernel function's panic", r.code, r.stderr)
}
