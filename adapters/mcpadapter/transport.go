package mcpadapter

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// retryAfterSessions is the Retry-After of a refused new session, in
// seconds.
const retryAfterSessions = 1

// ServeHTTP serves MCP's Streamable HTTP transport. A request that would
// open a session beyond MaxSessions, or any after Shutdown, gets 503 with
// Retry-After and a JSON-RPC error. Bodies over MaxMessageBytes get 413.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Mcp-Session-Id") == "" && (s.closed.Load() || s.sessions() >= s.opts.MaxSessions) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", strconv.Itoa(retryAfterSessions))
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":null,"error":{"code":-32000,`+
			`"message":"The server has too many MCP sessions; retry after 1 second."}}`)
		return
	}
	defer s.writers.add(r.Header, w)()
	s.http.ServeHTTP(w, r)
}

// writerHeader is the request header by which a tool call finds its
// request's writer. ServeHTTP sets it on every request; a client's own
// value never counts.
const writerHeader = "Sundial-Mcp-Writer"

// writers are the response writers of the HTTP requests in progress.
type writers struct {
	mu   sync.Mutex
	next uint64
	m    map[string]*http.ResponseController
}

// add records w as the writer of the request with header h, and returns
// the function that forgets it.
func (ws *writers) add(h http.Header, w http.ResponseWriter) func() {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.m == nil {
		ws.m = make(map[string]*http.ResponseController)
	}
	ws.next++
	key := strconv.FormatUint(ws.next, 10)
	h.Set(writerHeader, key)
	ws.m[key] = http.NewResponseController(w)
	return func() {
		ws.mu.Lock()
		delete(ws.m, key)
		ws.mu.Unlock()
	}
}

// unblocker returns the function that fails a write blocked on the
// response of the request with header h, as long as the request is in
// progress. It returns nil for a request of no HTTP writer (stdio).
func (ws *writers) unblocker(h http.Header) func() {
	key := h.Get(writerHeader)
	if key == "" {
		return nil
	}
	return func() {
		ws.mu.Lock()
		defer ws.mu.Unlock()
		if rc := ws.m[key]; rc != nil {
			_ = rc.SetWriteDeadline(time.Now())
		}
	}
}

// sessions returns the number of live sessions a client initialized.
// A request of the sessionless protocol (2026-07-28), a server/discover
// included, runs in a transient session of its own for as long as the
// request: it is not counted, and MaxPending bounds its calls.
func (s *Server) sessions() int {
	n := 0
	for ss := range s.srv.Sessions() {
		if ss.ID() != "" && ss.InitializeParams() != nil {
			n++
		}
	}
	return n
}

// ServeStdio serves one MCP session over in and out, newline-delimited
// JSON-RPC, until the client closes in or ctx ends. A line over
// MaxMessageBytes ends the session. An agent host launches a command that
// calls it with the process's standard input and output.
func (s *Server) ServeStdio(ctx context.Context, in io.Reader, out io.Writer) error {
	t := &mcp.IOTransport{Reader: io.NopCloser(in), Writer: nopWriteCloser{out}, MaxLineLength: s.opts.MaxMessageBytes}
	return s.srv.Run(ctx, t)
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
