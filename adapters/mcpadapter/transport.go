package mcpadapter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	sdkjson "github.com/segmentio/encoding/json"
)

// retryAfterSessions is the Retry-After of a refused new session, in
// seconds.
const retryAfterSessions = 1

// ServeHTTP serves MCP's Streamable HTTP transport. A request that would
// open a session beyond MaxSessions, or any after Shutdown, gets 503 with
// Retry-After and a JSON-RPC error. Bodies over MaxMessageBytes get 413.
//
// An initialize request without a session ID takes a place under
// MaxSessions before the SDK sees it. Its session holds the place once
// it has initialized; on every other path the place is given back when
// the request ends. An initialize the SDK runs after its request ended
// opens no session. So initializes that arrive together open at most
// MaxSessions sessions. Another request without a session ID only needs
// a free place.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	r.Header.Del(placeHeader) // a client's own value never counts
	if r.Header.Get("Mcp-Session-Id") == "" {
		place, ok := s.admit(r)
		if !ok {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", strconv.Itoa(retryAfterSessions))
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":null,"error":{"code":-32000,`+
				`"message":"The server has too many MCP sessions; retry after 1 second."}}`)
			return
		}
		if place != "" {
			r.Header.Set(placeHeader, place)
			defer s.free(place)
		}
	}
	if r.Method == http.MethodPost {
		s.posts.Add(1)
		defer s.posts.Add(-1)
	}
	defer s.writers.add(r.Header, w)()
	s.http.ServeHTTP(w, r)
}

// placeHeader is the request header by which an initialize finds the
// place it took under MaxSessions.
const placeHeader = "Sundial-Mcp-Place"

// places are the places under MaxSessions taken by initialize requests
// whose session has not initialized yet. capMu guards them.
type places struct {
	next  uint64
	taken map[string]struct{}
}

// free gives back place, if its session has not taken it over.
func (s *Server) free(place string) {
	s.capMu.Lock()
	defer s.capMu.Unlock()
	delete(s.places.taken, place)
}

// admit reports whether a request without a session ID may be served. An
// initialize takes a place: admit returns its key. The count is the
// live sessions plus the places taken, so no session counts twice.
func (s *Server) admit(r *http.Request) (place string, ok bool) {
	if s.full() {
		return "", false // refused before its body is read
	}
	initialize := r.Method == http.MethodPost && s.initializes(r)
	s.capMu.Lock()
	defer s.capMu.Unlock()
	if s.fullLocked() {
		return "", false
	}
	if !initialize {
		return "", true
	}
	if s.places.taken == nil {
		s.places.taken = make(map[string]struct{})
	}
	s.places.next++
	place = strconv.FormatUint(s.places.next, 10)
	s.places.taken[place] = struct{}{}
	return place, true
}

// full reports whether no place is free under MaxSessions, or Shutdown
// has begun.
func (s *Server) full() bool {
	s.capMu.Lock()
	defer s.capMu.Unlock()
	return s.fullLocked()
}

// fullLocked is full with capMu held.
func (s *Server) fullLocked() bool {
	return s.closed.Load() || s.sessions()+len(s.places.taken) >= s.opts.MaxSessions
}

// initializes reports whether r's body holds an initialize request. It
// reads at most MaxMessageBytes+1 bytes, and puts them back before the
// rest of the body. A body it cannot read or parse is no initialize: the
// SDK refuses it, and opens no session.
func (s *Server) initializes(r *http.Request) bool {
	b, err := io.ReadAll(io.LimitReader(r.Body, int64(s.opts.MaxMessageBytes)+1))
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b), r.Body), r.Body}
	if err != nil || len(b) > s.opts.MaxMessageBytes {
		return false
	}
	// The SDK reads a batch, else one message; each message's "method"
	// matched by case, as here.
	var msgs []sdkjson.RawMessage
	if sdkUnmarshal(b, &msgs) != nil {
		msgs = []sdkjson.RawMessage{b}
	}
	for _, m := range msgs {
		var msg struct {
			Method string `json:"method"`
		}
		if sdkUnmarshal(m, &msg) == nil && msg.Method == "initialize" {
			return true
		}
	}
	return false
}

// sdkUnmarshal decodes JSON as the SDK does: keys match fields by case.
func sdkUnmarshal(b []byte, v any) error {
	d := sdkjson.NewDecoder(bytes.NewReader(b))
	d.DontMatchCaseInsensitiveStructFields()
	return d.Decode(v)
}

// errPlaceGone refuses an initialize whose request gave back its place.
var errPlaceGone = errors.New("mcpadapter: the initialize request ended before its session opened")

// admitSession is the middleware by which an initialize's session takes
// over its request's place. capMu is held while the session initializes,
// so the session and its place never count twice, nor neither.
func (s *Server) admitSession(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		extra := req.GetExtra()
		if method != "initialize" || extra == nil || extra.Header.Get(placeHeader) == "" {
			return next(ctx, method, req)
		}
		place := extra.Header.Get(placeHeader)
		s.capMu.Lock()
		defer s.capMu.Unlock()
		if _, ok := s.places.taken[place]; !ok {
			// Its request ended first and gave the place back, which another
			// may hold now. The SDK still runs a message its request left.
			return nil, errPlaceGone
		}
		res, err := next(ctx, method, req)
		if ss, ok := req.GetSession().(*mcp.ServerSession); ok && ss != nil && ss.InitializeParams() != nil {
			delete(s.places.taken, place) // the session counts itself
		}
		return res, err
	}
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
//
// A request's answer counts as owed from the request's arrival until its
// line is written: Shutdown waits for it, as for an HTTP request's.
func (s *Server) ServeStdio(ctx context.Context, in io.Reader, out io.Writer) error {
	a := &stdioAnswers{s: s}
	defer a.settle()
	t := &mcp.IOTransport{Reader: io.NopCloser(in), Writer: answerWriter{out, a}, MaxLineLength: s.opts.MaxMessageBytes}
	ss, err := s.srv.Connect(ctx, t, nil)
	if err != nil {
		return err
	}
	s.stdio.Store(ss, a)
	defer s.stdio.Delete(ss)
	ended := make(chan error, 1)
	go func() { ended <- ss.Wait() }()
	select {
	case <-ctx.Done():
		_ = ss.Close()
		<-ended
		return ctx.Err()
	case err := <-ended:
		return err
	}
}

// stdioAnswers counts the answers one stdio session owes.
type stdioAnswers struct {
	s    *Server
	owed atomic.Int64
}

// owe records a request that awaits its answer.
func (a *stdioAnswers) owe() {
	a.owed.Add(1)
	a.s.owed.Add(1)
}

// paid records n answers written. A count never drops below zero.
func (a *stdioAnswers) paid(n int64) {
	for n > 0 {
		o := a.owed.Load()
		d := min(o, n)
		if d == 0 {
			return
		}
		if a.owed.CompareAndSwap(o, o-d) {
			a.s.owed.Add(-d)
			return
		}
	}
}

// settle forgets the answers of a session that ended: none will be
// written.
func (a *stdioAnswers) settle() { a.s.owed.Add(-a.owed.Swap(0)) }

// answerWriter is a stdio session's output. The SDK writes one message,
// or one batch, per Write: each answer in it is paid once written.
type answerWriter struct {
	w io.Writer
	a *stdioAnswers
}

func (w answerWriter) Write(b []byte) (int, error) {
	n, err := w.w.Write(b)
	w.a.paid(answers(b))
	return n, err
}

func (answerWriter) Close() error { return nil }

// answers returns the number of JSON-RPC responses in one line the SDK
// wrote: a message or a batch.
func answers(line []byte) int64 {
	line = bytes.TrimSpace(line)
	msgs := []json.RawMessage{line}
	if len(line) > 0 && line[0] == '[' && json.Unmarshal(line, &msgs) != nil {
		return 0
	}
	var n int64
	for _, m := range msgs {
		if msg, err := jsonrpc.DecodeMessage(m); err == nil {
			if _, ok := msg.(*jsonrpc.Response); ok {
				n++
			}
		}
	}
	return n
}

// oweStdio is the middleware by which a stdio session's request owes its
// answer. A notification is answered by nothing.
func (s *Server) oweStdio(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if !strings.HasPrefix(method, "notifications/") {
			if a, ok := s.stdio.Load(req.GetSession()); ok {
				a.(*stdioAnswers).owe()
			}
		}
		return next(ctx, method, req)
	}
}
