package httpadapter_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sundial-go/sundial/adapters/httpadapter"
)

// A request with both Content-Length and Transfer-Encoding: chunked is a
// request smuggling vector: a front end that frames it by Content-Length
// and the server, which frames it by Transfer-Encoding, disagree on where
// the next request starts. RFC 9112 §6.1: the server MUST close the
// connection after responding to it. Each case sends such a request with a
// second one behind it on the same loopback connection and checks that the
// first is answered, with Connection: close, and that the connection then
// ends without the second ever being served — on every path the adapter
// serves, and on an application route of the echo instance it is mounted
// on. The control case (Content-Length alone) shows that the same bytes do
// get a second request served when the framing is unambiguous.
func TestContentLengthWithChunkedClosesTheConnection(t *testing.T) {
	const smuggled = "GET /items/7 HTTP/1.1\r\nHost: x\r\n\r\n"
	chunked := func(body string) string {
		return fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)
	}
	tests := []struct {
		name     string
		head     string // request line and headers but the framing ones, each line ending in \r\n
		body     string
		te       bool // Transfer-Encoding: chunked besides Content-Length
		status   int
		calls    int64 // operation handler entries expected
		closes   bool
		answered int // responses expected on the connection
	}{
		{"operation route", "POST /items HTTP/1.1\r\nHost: x\r\n", `{"name":"a"}`, true, 201, 1, true, 1},
		{"operation route, answered before the body is read", "POST /items HTTP/1.1\r\nHost: x\r\nSundial-Deadline: garbage\r\n", `{"name":"a"}`, true, 400, 0, true, 1},
		{"host endpoint (Wrap)", "GET /healthz HTTP/1.1\r\nHost: x\r\n", `{}`, true, 200, 0, true, 1},
		{"no route (404)", "POST /nope HTTP/1.1\r\nHost: x\r\n", `{}`, true, 404, 0, true, 1},
		{"wrong method (405)", "PUT /items HTTP/1.1\r\nHost: x\r\n", `{}`, true, 405, 0, true, 1},
		{"application route", "GET /raw HTTP/1.1\r\nHost: x\r\n", `{}`, true, 200, 0, true, 1},
		{"control: Content-Length alone", "POST /items HTTP/1.1\r\nHost: x\r\n", `{"name":"a"}`, false, 201, 2, false, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			app := newTestApp()
			s := startServer(t, app, serverOpts{routes: func(e *echo.Echo, a *httpadapter.Adapter) {
				e.GET("/healthz", a.Wrap(func(c echo.Context) error { return c.String(200, "ok") }))
				e.GET("/raw", func(c echo.Context) error { return c.String(200, "raw") })
			}})
			var raw string
			if tt.te {
				body := chunked(tt.body)
				// The length a front end framing by Content-Length would
				// use: the chunked body and the smuggled request are one
				// body to it.
				raw = tt.head + fmt.Sprintf("Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n", len(body)+len(smuggled)) + body + smuggled
			} else {
				raw = tt.head + fmt.Sprintf("Content-Length: %d\r\n\r\n", len(tt.body)) + tt.body + smuggled
			}
			conn, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			start := time.Now()
			conn.SetDeadline(start.Add(5 * time.Second))
			if _, err := io.WriteString(conn, raw); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(conn)
			var statuses []int
			var saysClose bool // Connection: close (ReadResponse moves it to Close)
			for range tt.answered {
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("response %d: %v (after %v)", len(statuses)+1, err, time.Since(start))
				}
				if _, err := io.Copy(io.Discard, resp.Body); err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if statuses = append(statuses, resp.StatusCode); len(statuses) == 1 {
					saysClose = resp.Close
				}
			}
			if statuses[0] != tt.status {
				t.Errorf("first response: status %d, want %d", statuses[0], tt.status)
			}
			if tt.answered == 2 && statuses[1] != 200 {
				t.Errorf("second response: status %d, want 200", statuses[1])
			}
			// What follows on the connection: for the ambiguous request, the
			// server's FIN and nothing before it; for the control, nothing
			// (the connection stays open for a next request).
			wait := 2 * time.Second
			if !tt.closes {
				wait = 300 * time.Millisecond
			}
			conn.SetReadDeadline(time.Now().Add(wait))
			rest, err := io.ReadAll(br)
			closed := err == nil // io.ReadAll reads to EOF
			timedOut := errors.Is(err, os.ErrDeadlineExceeded)
			if err != nil && !timedOut {
				closed = true // a reset is a close too
			}
			t.Logf("%s: responses %v, Connection: close %v, %d more bytes, connection closed %v after %v, handler entries %d",
				tt.name, statuses, saysClose, len(rest), closed, time.Since(start).Round(time.Millisecond), app.calls.Load())
			if len(rest) > 0 {
				t.Errorf("more was served on the connection: %q", rest)
			}
			if closed != tt.closes {
				t.Errorf("connection closed = %v, want %v (read error %v)", closed, tt.closes, err)
			}
			if saysClose != tt.closes {
				t.Errorf("first response: Connection: close = %v, want %v", saysClose, tt.closes)
			}
			if n := app.calls.Load(); n != tt.calls {
				t.Errorf("operation handlers ran %d times, want %d", n, tt.calls)
			}
			for _, rec := range s.logs.records("http request") {
				if rec.Attrs["path"] == "/items/7" && tt.te {
					t.Errorf("the smuggled request was served: %v", rec.Attrs)
				}
			}
		})
	}
}
