//go:build linux

package systemtest

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// maxStartupRSS bounds the resident memory of a shop refusing its
// --config.
const maxStartupRSS = 64 << 20

// waitBounded waits for p, killing it (and failing) if it has not ended
// after a minute: far beyond any schedule, a process that never ends.
func (p *shopProc) waitBounded(t *testing.T) (code int, took time.Duration) {
	t.Helper()
	timer := time.AfterFunc(time.Minute, func() { _ = p.cmd.Process.Kill() })
	defer timer.Stop()
	code = p.wait(t)
	return code, time.Since(p.start)
}

// watchRSS samples the peak resident memory of p's program (VmHWM in
// /proc, Linux) until it ends, and returns a function giving the last
// sample, in bytes. The rusage of a child is no measure: Go starts it
// with vfork, so its peak includes the test process's.
func (p *shopProc) watchRSS() (peak func() int64) {
	var last atomic.Int64
	path := fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			if b, err := os.ReadFile(path); err == nil {
				if i := bytes.Index(b, []byte("VmHWM:")); i >= 0 {
					var kb int64
					if _, err := fmt.Sscan(string(b[i+len("VmHWM:"):]), &kb); err == nil {
						last.Store(kb << 10)
					}
				}
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	return func() int64 {
		close(stop)
		<-done
		return last.Load()
	}
}

// TestConfigFlagRefusesWhatItCannotRead runs the built shop, an operation
// command and serve, with --config naming what no config file is: a
// device that never ends (/dev/zero, /dev/urandom) and a 1 GiB sparse
// file. Each is refused at once with an error naming the flag, exit 2,
// without reading it: the process stays under 64 MB resident.
func TestConfigFlagRefusesWhatItCannotRead(t *testing.T) {
	bin := buildShop(t)
	huge := filepath.Join(t.TempDir(), "huge.json")
	if err := os.WriteFile(huge, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(huge, 1<<30); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"/dev/zero": "not a regular file", "/dev/urandom": "not a regular file", huge: "larger than"}
	commands := [][]string{{"orders", "get", "--id", "x"}, {"serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"}}
	for file, why := range files {
		for _, args := range commands {
			args := append(append([]string{}, args...), "--config", file)
			p := startBuilt(t, bin, args...)
			peak := p.watchRSS()
			code, took := p.waitBounded(t)
			rss := peak()
			t.Logf("shop %s: exit %d after %v, max RSS %d MB; stderr %q", strings.Join(args, " "), code, took, rss>>20, p.stderr.String())
			if want := "shop: --config " + file + ": " + why; code != 2 || !strings.Contains(p.stderr.String(), want) {
				t.Errorf("shop %q = exit %d, stderr %q; want exit 2 saying %q", args, code, p.stderr.String(), want)
			}
			if rss > maxStartupRSS {
				t.Errorf("shop %q reached %d MB resident, want under %d MB", args, rss>>20, maxStartupRSS>>20)
			}
		}
	}
}

// TestSignalDuringStartup sends SIGTERM to the built shop while its
// kernel is still being built: the Redis of a cluster-scoped limit
// accepts the connection and never answers, which holds the start-up
// for its 2 s bound. The signal ends the process at once: serve exits 0
// without having served, an operation command exits 8 with nothing run.
func TestSignalDuringStartup(t *testing.T) {
	bin := buildShop(t)
	for _, tc := range []struct {
		args     []string
		wantCode int
		wantErr  string
	}{
		{[]string{"serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"}, 0, "stopped while starting; not serving"},
		{[]string{"orders", "get", "--id", "x"}, 8, "shop orders get: stopped while starting"},
	} {
		accepted := muteRedis(t)
		args := append(append([]string{}, tc.args...), "--config", accepted.config)
		p := startBuilt(t, bin, args...)
		select {
		case <-accepted.conns:
		case <-time.After(time.Minute):
			_ = p.cmd.Process.Kill()
			t.Fatalf("shop %q never connected to Redis", args)
		}
		sent := time.Now()
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		code, _ := p.waitBounded(t)
		took := time.Since(sent)
		t.Logf("shop %s: SIGTERM while connecting to Redis: exit %d %v after the signal; stderr %q",
			strings.Join(tc.args, " "), code, took, p.stderr.String())
		if code != tc.wantCode || !strings.Contains(p.stderr.String(), tc.wantErr) ||
			strings.Contains(p.stdout.String(), "serving") || strings.Contains(p.stderr.String(), "KERNEL_") {
			t.Errorf("shop %q with SIGTERM during start-up = exit %d, stdout %q, stderr %q; want exit %d saying %q, nothing served or run",
				args, code, p.stdout.String(), p.stderr.String(), tc.wantCode, tc.wantErr)
		}
	}
}

// mutedRedis is a TCP listener that accepts connections and never
// answers, and a config file whose cluster-scoped limit uses it as Redis.
type mutedRedis struct {
	config string
	conns  chan net.Conn
}

// muteRedis starts a mutedRedis, closed with t.
func muteRedis(t *testing.T) mutedRedis {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := mutedRedis{config: filepath.Join(t.TempDir(), "cluster.json"), conns: make(chan net.Conn, 64)}
	var held []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c) // held open, never answered
			select {
			case m.conns <- c:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		for _, c := range held {
			c.Close()
		}
	})
	doc := `{"Sundial":{"Kernel":{"Redis":{"Address":"` + ln.Addr().String() + `"},
		"Resilience":{"Operations":{"orders.get":{"PermitLimit":100,"WindowSeconds":1,"Scope":"cluster"}}}}}}`
	if err := os.WriteFile(m.config, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return m
}

// buildShop builds the shop binary without the race detector, so that its
// resident memory is the shop's own, not the race runtime's.
func buildShop(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "shop")
	out, err := exec.Command("go", "build", "-o", bin, "..").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startBuilt starts the built binary bin with args, in the environment
// childEnv gives.
func startBuilt(t *testing.T, bin string, args ...string) *shopProc {
	t.Helper()
	p := &shopProc{cmd: exec.Command(bin, args...)}
	p.cmd.Env = childEnv()
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	p.start = time.Now()
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start shop %q: %v", args, err)
	}
	return p
}
