package httpadapter_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sundial-go/sundial/adapters/httpadapter"
)

// Go's HTTP/1 server does not send a response while the request body has
// unread bytes: before it writes the header it reads up to 256 KiB of
// what is left, to keep the connection for a next request. A client that
// sends its headers and then dribbles the body would get no answer — on
// every path that answers without reading the body to its end — and its
// connection would hold Server.Shutdown for as long as it dribbles.
//
// Each case opens slowBodyConns loopback connections that announce a
// 1000-byte body and send one byte of it every 100 ms (100 s in all), and
// checks that every one gets its answer and the server's close within a
// second, and that Shutdown, with all of them still dribbling, returns at
// once.
func TestSlowBodyIsNotWaitedOn(t *testing.T) {
	const (
		slowBodyConns = 50
		within        = time.Second
	)
	tests := []struct {
		name   string
		head   string // request line and headers but Content-Length, each line ending in \r\n
		status int
		bare   bool // served by an echo instance the adapter is not mounted on: Wrap and HTTPErrorHandler alone
	}{
		{"no route (404)", "POST /nope HTTP/1.1\r\nHost: x\r\n", 404, false},
		{"wrong method (405)", "PUT /items HTTP/1.1\r\nHost: x\r\n", 405, false},
		{"host endpoint (Wrap)", "GET /healthz HTTP/1.1\r\nHost: x\r\n", 200, false},
		{"host endpoint (Wrap), malformed deadline", "GET /healthz HTTP/1.1\r\nHost: x\r\nSundial-Deadline: garbage\r\n", 400, false},
		{"operation, malformed deadline", "POST /work HTTP/1.1\r\nHost: x\r\nSundial-Deadline: garbage\r\n", 400, false},
		{"operation, body over the limit (413)", "POST /items HTTP/1.1\r\nHost: x\r\n", 413, false},
		{"application route", "POST /raw HTTP/1.1\r\nHost: x\r\n", 200, false},
		{"application route, error", "POST /teapot HTTP/1.1\r\nHost: x\r\n", 418, false},
		{"not mounted: host endpoint (Wrap)", "GET /healthz HTTP/1.1\r\nHost: x\r\n", 200, true},
		{"not mounted: no route (HTTPErrorHandler)", "POST /nope HTTP/1.1\r\nHost: x\r\n", 404, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			app := newTestApp()
			s := startServer(t, app, serverOpts{
				adapter: []httpadapter.Option{httpadapter.WithBodyLimit(512)},
				routes: func(e *echo.Echo, a *httpadapter.Adapter) {
					e.GET("/healthz", a.Wrap(func(c echo.Context) error { return c.String(200, "ok") }))
					e.POST("/raw", func(c echo.Context) error { return c.String(200, "raw") })
					e.POST("/teapot", func(c echo.Context) error { return echo.NewHTTPError(418) })
				},
			})
			if tt.bare {
				e := echo.New()
				e.HideBanner, e.HidePort = true, true
				e.HTTPErrorHandler = s.adapter.HTTPErrorHandler
				e.GET("/healthz", s.adapter.Wrap(func(c echo.Context) error { return c.String(200, "ok") }))
				s = serveEcho(t, e)
			}
			addr := strings.TrimPrefix(s.url, "http://")
			stop := make(chan struct{})
			var dribblers sync.WaitGroup
			type result struct {
				status   int
				answered time.Duration // -1: no answer
				closed   time.Duration // -1: not closed
				err      error
			}
			results := make([]result, slowBodyConns)
			var readers sync.WaitGroup
			start := time.Now()
			for i := range slowBodyConns {
				conn, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				if _, err := io.WriteString(conn, tt.head+"Content-Length: 1000\r\n\r\n"); err != nil {
					t.Fatal(err)
				}
				dribblers.Go(func() {
					tick := time.NewTicker(100 * time.Millisecond)
					defer tick.Stop()
					for range 1000 {
						select {
						case <-stop:
							return
						case <-tick.C:
						}
						if _, err := conn.Write([]byte{'x'}); err != nil {
							return // the server closed the connection
						}
					}
				})
				readers.Go(func() {
					res := result{answered: -1, closed: -1}
					defer func() { results[i] = res }()
					conn.SetReadDeadline(start.Add(3 * time.Second))
					br := bufio.NewReader(conn)
					resp, err := http.ReadResponse(br, nil)
					if err != nil {
						res.err = err
						return
					}
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err != nil {
						res.err = err
						return
					}
					res.status, res.answered = resp.StatusCode, time.Since(start)
					rest, err := io.ReadAll(br)
					if errors.Is(err, os.ErrDeadlineExceeded) {
						res.err = fmt.Errorf("connection still open: %w", err)
						return
					}
					if len(rest) > 0 {
						res.err = fmt.Errorf("%d bytes after the response", len(rest))
					}
					res.closed = time.Since(start) // EOF or reset: closed either way
				})
			}
			readers.Wait()
			// Every connection still dribbles (or was closed by the server):
			// Shutdown must not wait for any of them.
			shutStart := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			shutErr := s.http.Shutdown(ctx)
			cancel()
			shutdown := time.Since(shutStart)
			close(stop)
			dribblers.Wait()

			var answered, closed int
			var maxAnswer, maxClose time.Duration
			var firstErr error
			statuses := map[int]int{}
			for _, r := range results {
				if r.err != nil && firstErr == nil {
					firstErr = r.err
				}
				if r.answered >= 0 {
					answered++
					statuses[r.status]++
					maxAnswer = max(maxAnswer, r.answered)
				}
				if r.closed >= 0 {
					closed++
					maxClose = max(maxClose, r.closed)
				}
			}
			t.Logf("%s: %d connections dribbling a 1000-byte body at 10 B/s: %d answered (statuses %v), max %v; %d closed by the server, max %v; Shutdown took %v (err %v)",
				tt.name, slowBodyConns, answered, statuses, maxAnswer.Round(time.Millisecond),
				closed, maxClose.Round(time.Millisecond), shutdown.Round(time.Millisecond), shutErr)
			if answered != slowBodyConns || maxAnswer > within {
				t.Errorf("%d of %d answered, the slowest after %v; want all within %v (first error: %v)",
					answered, slowBodyConns, maxAnswer, within, firstErr)
			}
			if statuses[tt.status] != answered {
				t.Errorf("statuses %v, want all %d", statuses, tt.status)
			}
			if closed != slowBodyConns || maxClose > within {
				t.Errorf("%d of %d connections closed by the server, the last after %v; want all within %v (first error: %v)",
					closed, slowBodyConns, maxClose, within, firstErr)
			}
			if shutErr != nil || shutdown > within {
				t.Errorf("Shutdown took %v (err %v); want it within %v", shutdown, shutErr, within)
			}
		})
	}
}

// The other side of TestSlowBodyIsNotWaitedOn: a body read to its end —
// by an operation, a host endpoint or an application route — leaves the
// connection open for the next request, and so does a request without a
// body answered without reading anything.
func TestReadBodyKeepsTheConnection(t *testing.T) {
	app := newTestApp()
	s := startServer(t, app, serverOpts{routes: func(e *echo.Echo, a *httpadapter.Adapter) {
		e.POST("/healthz", a.Wrap(func(c echo.Context) error {
			b, err := io.ReadAll(c.Request().Body)
			if err != nil {
				return err
			}
			return c.String(200, string(b))
		}))
		e.POST("/echo", func(c echo.Context) error {
			b, err := io.ReadAll(c.Request().Body)
			if err != nil {
				return err
			}
			return c.String(200, string(b))
		})
	}})
	const body = `{"name":"a"}`
	reqs := []struct {
		head   string
		body   string
		status int
	}{
		{"POST /items HTTP/1.1\r\nHost: x\r\n", body, 201},
		{"POST /healthz HTTP/1.1\r\nHost: x\r\n", body, 200},
		{"POST /echo HTTP/1.1\r\nHost: x\r\n", body, 200},
		{"GET /nope HTTP/1.1\r\nHost: x\r\n", "", 404},
		{"POST /items HTTP/1.1\r\nHost: x\r\nSundial-Deadline: garbage\r\n", "", 400},
		{"POST /items HTTP/1.1\r\nHost: x\r\n", body, 201},
	}
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(conn)
	for i, rq := range reqs {
		raw := rq.head + fmt.Sprintf("Content-Length: %d\r\n\r\n", len(rq.body)) + rq.body
		if _, err := io.WriteString(conn, raw); err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d (%q): %v", i+1, rq.head, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != rq.status || resp.Close {
			t.Errorf("request %d (%q): status %d, Connection: close %v; want %d on a kept connection",
				i+1, rq.head, resp.StatusCode, resp.Close, rq.status)
		}
	}
	t.Logf("%d requests answered on one connection, none closing it", len(reqs))
}
