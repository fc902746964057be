// Package redistest starts a real redis-server for tests: on a free
// loopback port, with persistence off, stopped when the test ends. Faults
// are real too: [Server.Kill] sends SIGKILL, [Server.Restart] starts the
// server again on the same port, [Server.Pause] runs CLIENT PAUSE.
//
// When redis-server is not on PATH, the test fails with the command that
// installs it: `make deps`, or apt-get install redis-server. Outside CI
// (CI unset) the test is skipped instead. So `go test` in one package works
// on a laptop without Redis. `make test` installs it first.
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Server is one redis-server process owned by a test.
type Server struct {
	tb    testing.TB // nil for a node of a launched Cluster
	bin   string
	dir   string
	port  int
	bus   int      // a cluster node's cluster bus port
	extra []string // arguments after the defaults (cluster mode)

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited (its one Wait returned)
}

// Start starts a redis-server on a free 127.0.0.1 port and registers its
// end with tb.Cleanup.
func Start(tb testing.TB) *Server {
	tb.Helper()
	s := &Server{tb: tb, bin: lookPath(tb), dir: tb.TempDir()}
	if err := s.startOnFreePort(func() error { s.port = freePort(tb); return nil }); err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	tb.Cleanup(s.stop)
	return s
}

// lookPath returns redis-server's path, or ends the test: failed when CI
// is set, else skipped.
func lookPath(tb testing.TB) string {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		msg := "redistest: redis-server not found; run `make deps` (or: apt-get install -y redis-server)"
		if os.Getenv("CI") != "" {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	return bin
}

// Addr is host:port of the server.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// startOnFreePort starts the server on the port pick chooses. When the
// server exits at once, another process took the port between pick and
// the server's bind. It then tries again with a new port, at most three
// times.
func (s *Server) startOnFreePort(pick func() error) error {
	var err error
	for range 3 {
		if err = pick(); err != nil {
			return err
		}
		if err = s.start(); !errors.Is(err, errExited) {
			return err
		}
	}
	return err
}

// errExited is start's error when the server exits before it answers.
var errExited = errors.New("redis-server exited at start")

func (s *Server) start() error {
	args := append([]string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--protected-mode", "yes", "--loglevel", "warning",
		"--enable-debug-command", "local",
	}, s.extra...)
	cmd := exec.Command(s.bin, args...)
	out := &tailBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := s.do("PING"); err == nil {
			return nil
		}
		select {
		case <-exited:
			s.stop()
			return fmt.Errorf("%w on %s: %s", errExited, s.Addr(), out)
		case <-time.After(10 * time.Millisecond):
		}
	}
	s.stop()
	return fmt.Errorf("redis-server on %s did not answer PING within 10s: %s", s.Addr(), out)
}

func (s *Server) stop() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		_ = cmd.Process.Kill()
		<-exited
	}
}

// tailBuffer keeps the last 2 KiB a server wrote (for an error message).
type tailBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > 2048 {
		t.b = t.b[len(t.b)-2048:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}

// Kill ends the server with SIGKILL and waits for it to exit.
func (s *Server) Kill() { s.stop() }

// Restart starts the server again on the same port (after [Server.Kill]);
// its data is gone. It is for a server of [Start], not a cluster's node.
func (s *Server) Restart() {
	s.tb.Helper()
	s.stop()
	if err := s.start(); err != nil {
		s.tb.Fatalf("redistest: restart: %v", err)
	}
}

// Pause runs CLIENT PAUSE for d: the server accepts connections and
// commands but answers none until d has passed. It is for a server of
// [Start], not a cluster's node.
func (s *Server) Pause(d time.Duration) {
	s.tb.Helper()
	if _, err := s.do("CLIENT", "PAUSE", strconv.FormatInt(d.Milliseconds(), 10), "ALL"); err != nil {
		s.tb.Fatalf("redistest: CLIENT PAUSE: %v", err)
	}
}

// Do sends one command over a fresh connection and returns its reply. A
// bulk string's reply is its value ("" for nil). Any other reply is its
// first line without the type byte (for an array, the count). Do is meant
// for setup and inspection (FLUSHALL, KEYS, GET), not for load.
func (s *Server) Do(args ...string) (string, error) { return s.do(args...) }

func (s *Server) do(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", s.Addr())
	if err != nil {
		return "", err
	}
	defer c.Close()
	dl, _ := ctx.Deadline()
	_ = c.SetDeadline(dl)
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	rd := bufio.NewReader(c)
	line, err := rd.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", fmt.Errorf("empty reply")
	}
	switch line[0] {
	case '-':
		return "", fmt.Errorf("redis: %s", line[1:])
	case '$': // a bulk string: its value, "" for a nil one
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(rd, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return line[1:], nil
}

func freePort(tb testing.TB) int {
	tb.Helper()
	p, err := listenFree()
	if err != nil {
		tb.Fatalf("redistest: free port: %v", err)
	}
	return p
}

// listenFree returns a free 127.0.0.1 port.
func listenFree() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
