package mcpadapter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
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
// A request's answer counts as owed from the moment the SDK reads the
// request until its line is written: Shutdown waits for it, as for an
// HTTP request's.
func (s *Server) ServeStdio(ctx context.Context, in io.Reader, out io.Writer) error {
	a := &stdioAnswers{s: s}
	defer a.settle()
	limit := s.opts.MaxMessageBytes // set by New: the SDK's bound and the reader's agree
	r := &callReader{r: in, a: a, limit: limit}
	t := &mcp.IOTransport{Reader: io.NopCloser(r), Writer: answerWriter{out, a}, MaxLineLength: limit}
	ss, err := s.srv.Connect(ctx, t, nil)
	if err != nil {
		return err
	}
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

// owe records n requests that await their answer.
func (a *stdioAnswers) owe(n int64) {
	a.owed.Add(n)
	a.s.owed.Add(n)
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
	var n int64
	for _, m := range messages(line) {
		if _, ok := m.(*jsonrpc.Response); ok {
			n++
		}
	}
	return n
}

// callReader is a stdio session's input. It follows the JSON values the
// SDK's decoder reads, and each request among them owes its answer. The
// SDK answers every request it reads, and writes no other answer. So the
// answers owed and written pair up, whatever the SDK refuses unhandled.
type callReader struct {
	r     io.Reader
	a     *stdioAnswers
	limit int    // the SDK's bound on a message
	val   []byte // the top-level value being read
	depth int    // of objects and arrays, in val
	str   bool   // in a string
	esc   bool   // after a backslash in a string
}

func (c *callReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.follow(p[:n])
	return n, err
}

// follow reads p, the next bytes of the input. A value over the limit is
// not kept: the SDK ends the session on it. Nor is anything outside an
// object or array, which the SDK refuses alike.
func (c *callReader) follow(p []byte) {
	for _, b := range p {
		if c.depth == 0 {
			if b == '{' || b == '[' {
				c.depth, c.str, c.esc = 1, false, false
				c.val = append(c.val[:0], b)
			}
			continue
		}
		if len(c.val) <= c.limit {
			c.val = append(c.val, b)
		}
		switch {
		case c.esc:
			c.esc = false
		case c.str:
			c.esc, c.str = b == '\\', b != '"'
		case b == '"':
			c.str = true
		case b == '{' || b == '[':
			c.depth++
		case b == '}' || b == ']':
			if c.depth--; c.depth == 0 {
				if len(c.val) <= c.limit {
					c.a.owe(requests(c.val))
				}
				c.val = c.val[:0]
				if cap(c.val) > callReaderKeep {
					c.val = nil
				}
			}
		}
	}
}

// callReaderKeep is the most bytes a callReader keeps for the next value.
const callReaderKeep = 64 << 10

// requests returns the number of JSON-RPC requests that await an answer
// in one value the SDK reads: a message or a batch.
func requests(v []byte) int64 {
	var n int64
	for _, m := range messages(v) {
		if req, ok := m.(*jsonrpc.Request); ok && req.IsCall() {
			n++
		}
	}
	return n
}

// messages decodes the JSON-RPC messages of one value: a message or a
// batch. It leaves out what does not decode.
func messages(v []byte) []jsonrpc.Message {
	v = bytes.TrimSpace(v)
	raws := []json.RawMessage{v}
	if len(v) > 0 && v[0] == '[' && json.Unmarshal(v, &raws) != nil {
		return nil
	}
	var msgs []jsonrpc.Message
	for _, r := range raws {
		if m, err := jsonrpc.DecodeMessage(r); err == nil {
			msgs = append(msgs, m)
		}
	}
	return msgs
}
