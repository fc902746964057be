package httpadapter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sundial-go/sundial/adapters/internal/ndjson"
	"github.com/sundial-go/sundial/adapters/internal/outcome"
	"github.com/sundial-go/sundial/adapters/internal/streamctx"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/pipeline"
)

// This file frames a streamed HTTP response as SSE or NDJSON, reads an
// NDJSON request body, and writes a stream's outcome in-band.

// The media types of a streamed response.
const (
	contentTypeSSE    = "text/event-stream"
	contentTypeNDJSON = "application/x-ndjson"
)

// outcomeWriteTimeout bounds the write of a stream's outcome, so that a
// caller who stopped reading cannot hold the handler's goroutine.
const outcomeWriteTimeout = 5 * time.Second

// wantsSSE reports whether the Accept header prefers text/event-stream to
// application/x-ndjson. Without a preference the stream is NDJSON.
func wantsSSE(accept []string) bool {
	sse, ndjson := 0.0, -1.0
	for _, v := range accept {
		for part := range strings.SplitSeq(v, ",") {
			mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err != nil {
				continue
			}
			q := 1.0
			if s, ok := params["q"]; ok {
				if q, err = strconv.ParseFloat(s, 64); err != nil {
					continue
				}
			}
			switch mt {
			case contentTypeSSE:
				sse = max(sse, q)
			case contentTypeNDJSON:
				ndjson = max(ndjson, q)
			}
		}
	}
	return sse > 0 && sse > ndjson
}

// errAborted is what a Send or Recv returns once the stream has ended.
var errAborted = errors.New("httpadapter: the stream has ended")

// httpRaw is a streamed HTTP response, framed as SSE or NDJSON, and for
// a client stream the NDJSON request body. It is the transport's
// stream.Raw. A mutex orders Send, Heartbeat and the outcome.
type httpRaw struct {
	w   *echo.Response
	rc  *http.ResponseController
	sse bool

	mu  sync.Mutex // guards seq, buf and the response's writes
	seq int64      // the SSE id of the last message
	buf bytes.Buffer
	enc *json.Encoder

	writing, aborted atomic.Bool
	// ended is set by Abort, and stays: the connection's failures after it
	// are the stream's end, not the caller leaving.
	ended atomic.Bool

	limit  int64                               // the largest body line
	body   *ndjson.Reader                      // a client stream's body; nil: none
	decode func([]byte) (any, *pipeline.Error) // one body line to an input
	// h2 is the request's context over HTTP/2; nil over HTTP/1.x.
	h2 context.Context
}

func newHTTPRaw(w *echo.Response, sse bool) *httpRaw {
	// The controller of echo's writer: echo's Flush makes a controller
	// each call.
	r := &httpRaw{w: w, rc: http.NewResponseController(w.Writer), sse: sse}
	r.enc = json.NewEncoder(&r.buf)
	return r
}

// started reports whether the response is committed: a message or a
// heartbeat went out, and the outcome must go in-band.
func (r *httpRaw) started() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.w.Committed
}

// write writes b and flushes it, committing the response first. The
// caller holds r.mu.
func (r *httpRaw) write(b []byte) error {
	r.writing.Store(true)
	defer r.writing.Store(false)
	if r.aborted.Load() { // after writing is set: Abort sees one or the other
		return errAborted
	}
	if !r.w.Committed {
		h := r.w.Header()
		if r.sse {
			h.Set(echo.HeaderContentType, contentTypeSSE)
		} else {
			h.Set(echo.HeaderContentType, contentTypeNDJSON)
		}
		h.Set("Cache-Control", "no-store")
		h.Set("X-Accel-Buffering", "no") // proxies such as nginx: do not buffer
		h.Del(echo.HeaderContentLength)
		r.w.WriteHeader(http.StatusOK)
	}
	if _, err := r.w.Writer.Write(b); err != nil {
		return err
	}
	return r.rc.Flush()
}

// Send writes one message: an SSE event with the next id, or an NDJSON
// line.
func (r *httpRaw) Send(m any) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf.Reset()
	if r.sse {
		r.seq++
		r.buf.WriteString("id: ")
		r.buf.Write(strconv.AppendInt(r.buf.AvailableBuffer(), r.seq, 10))
		r.buf.WriteString("\nevent: message\ndata: ")
	}
	if err := r.enc.Encode(m); err != nil { // one line: JSON escapes newlines
		return err
	}
	if r.sse {
		r.buf.WriteByte('\n')
	}
	return r.write(r.buf.Bytes())
}

// Heartbeat writes an SSE comment, or an empty NDJSON line.
func (r *httpRaw) Heartbeat() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sse {
		return r.write([]byte(":\n\n"))
	}
	return r.write([]byte("\n"))
}

// Recv reads one line of a client stream's NDJSON body and decodes it.
func (r *httpRaw) Recv() (any, int, error) {
	if r.body == nil || r.aborted.Load() {
		return nil, 0, io.EOF
	}
	line, err := r.body.Next()
	if errors.Is(err, ndjson.ErrTooLong) {
		return nil, 0, messageTooLarge(r.limit)
	}
	if err != nil {
		r.awaitReset(err)
		return nil, 0, err
	}
	return decodeMessage(r.decode, line)
}

// awaitReset waits, after a body read failed with err, for the request's
// context to end when err is an HTTP/2 stream error: a caller's reset
// reaches the body before net/http's HTTP/2 server cancels the context,
// and the kernel must see the caller leave, not a transport failure.
// net/http closes a body with a stream error only as it closes the
// stream, which then cancels the context.
func (r *httpRaw) awaitReset(err error) {
	if r.h2 != nil && !r.ended.Load() && strings.HasPrefix(err.Error(), "stream error: ") {
		streamctx.AwaitEnd(r.h2)
	}
}

// decodeMessage decodes one of the caller's messages for Raw.Recv.
func decodeMessage(decode func([]byte) (any, *pipeline.Error), b []byte) (any, int, error) {
	in, perr := decode(b)
	if perr != nil {
		return nil, len(b), perr // not a typed nil: perr is set
	}
	return in, len(b), nil
}

// abortGrace is how long Abort lets a write in progress finish. A caller
// who reads takes it at once, and the outcome can follow it; a blocked
// write fails, and the connection with it.
const abortGrace = 100 * time.Millisecond

// Abort makes a blocked write, within abortGrace, or body read return.
func (r *httpRaw) Abort(error) {
	r.ended.Store(true)
	r.aborted.Store(true)
	if r.writing.Load() {
		_ = r.rc.SetWriteDeadline(time.Now().Add(abortGrace))
	}
	if r.body != nil {
		_ = r.rc.SetReadDeadline(aLongTimeAgo)
	}
}

// finish writes the stream's outcome in-band: an SSE outcome event, or
// an NDJSON {"outcome": ...} line. A retry-after is also SSE's retry
// field, so that EventSource waits as long before it reconnects.
func (r *httpRaw) finish(err error, instance, traceID string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.aborted.Store(false) // the outcome goes out whatever ended the stream
	_ = r.rc.SetWriteDeadline(time.Now().Add(outcomeWriteTimeout))
	body := outcomeJSON(err, instance, traceID)
	r.buf.Reset()
	if r.sse {
		r.buf.WriteString("event: outcome\n")
		if s, ok := outcome.RetryAfterSeconds(pipeline.AsError(err)); ok && err != nil {
			r.buf.WriteString("retry: ")
			r.buf.Write(strconv.AppendInt(r.buf.AvailableBuffer(), s*1000, 10))
			r.buf.WriteByte('\n')
		}
		r.buf.WriteString("data: ")
		r.buf.Write(body)
		r.buf.WriteString("\n\n")
	} else {
		r.buf.Write(outcomeLine(body))
		r.buf.WriteByte('\n')
	}
	return r.write(r.buf.Bytes())
}

// outcomeJSON is a stream's outcome as JSON: the Problem Details of a
// failure, or on success a Problem-shaped object with title "OK",
// status 200 and an empty code.
func outcomeJSON(err error, instance, traceID string) []byte {
	var p *Problem
	if err != nil {
		e := pipeline.AsError(err)
		p = newProblem(e, StatusFor(e.Kind()), instance, traceID)
	} else {
		p = &Problem{Title: pipeline.KindOK.String(), Status: http.StatusOK, Instance: instance,
			TraceID: traceID, Details: emptyDetails}
	}
	b, jerr := json.Marshal(p)
	if jerr != nil {
		p.Details = emptyDetails
		b, _ = json.Marshal(p)
	}
	return b
}

// outcomeLine wraps an outcome as NDJSON's and WebSocket's last message.
func outcomeLine(body []byte) []byte {
	b := make([]byte, 0, len(body)+12)
	b = append(b, `{"outcome":`...)
	b = append(b, body...)
	return append(b, '}')
}

func messageTooLarge(limit int64) *pipeline.Error {
	return pipeline.NewError(pipeline.KindValidation, codeBodyTooLarge,
		"A message of the stream is larger than "+strconv.FormatInt(limit, 10)+" bytes.").
		WithDetail("limit", limit)
}

// streamTransport is a stream's transport as the route serves it.
type streamTransport interface {
	// Send, Recv and Abort are the kernel's stream.Raw.
	Send(m any) error
	Recv() (m any, size int, err error)
	Abort(cause error)
	// started reports whether the outcome must go in-band.
	started() bool
	// finish writes the outcome in-band and ends the transport's stream.
	finish(err error, instance, traceID string) error
}

// openHTTP returns the SSE or NDJSON stream of c's response, and for a
// client stream (body set) its NDJSON request body. For a client stream
// it lifts the server's read and write timeouts for the connection at
// once, for a server stream once its request is read: the stream's own
// clocks bound it. A server timeout would otherwise end a long stream,
// and Go's server would cancel the request as if the caller had left.
func openHTTP(c echo.Context, limit int64, body bool, decode func([]byte) (any, *pipeline.Error)) *httpRaw {
	r := newHTTPRaw(c.Response(), wantsSSE(c.Request().Header.Values(echo.HeaderAccept)))
	if body {
		r.liftDeadlines()
		r.limit, r.decode = limit, decode
		r.body = ndjson.NewReader(c.Request().Body, int(min(limit, math.MaxInt32)))
		if c.Request().ProtoMajor == 2 {
			r.h2 = c.Request().Context()
		}
	}
	return r
}

// liftDeadlines lifts the server's read and write timeouts for the
// stream's connection. A server stream's request is read first, under
// the server's ReadTimeout, as a unary call's body is.
func (r *httpRaw) liftDeadlines() {
	_ = r.rc.SetReadDeadline(time.Time{})
	_ = r.rc.SetWriteDeadline(time.Time{})
}

// callerContext returns the stream's parent: ctx's values, ended when
// the caller leaves before a clock or bound ended the stream.
func (r *httpRaw) callerContext(ctx context.Context) (context.Context, func()) {
	return streamctx.Follow(ctx, r.ended.Load)
}

// endStream writes a stream's outcome o and its access log record.
// Before the first byte, a failure is answered as a unary call's: its
// status, Problem Details and Retry-After. Otherwise the outcome goes
// in-band.
func (x *exchange) endStream(t streamTransport, o kernel.Outcome) {
	if o.Err != nil && !t.started() {
		if o.Invocation != nil {
			x.sendReply(o.Invocation)
		}
		x.fail(pipeline.AsError(o.Err), o.TraceID)
		return
	}
	werr := t.finish(o.Err, x.c.Request().URL.Path, o.TraceID)
	var e *pipeline.Error
	if o.Err != nil {
		e = pipeline.AsError(o.Err)
	}
	status := x.c.Response().Status
	if _, ws := t.(*wsRaw); ws {
		status = http.StatusSwitchingProtocols
	}
	x.log(status, e, o.TraceID, werr)
}
