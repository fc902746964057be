package httpadapter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/sundial-go/sundial/adapters/internal/outclock"
)

// WithStreamClocks gives each stream the Transport sends two clocks of a
// served stream's. A stream is a request whose Accept names
// text/event-stream or application/x-ndjson, or whose body is
// application/x-ndjson. idle ends it when no message was sent or received
// for that long: TIMEOUT, KERNEL_TIMEOUT_003. The clock starts when the
// request goes out, so it bounds the wait for the answer too. sendStall
// ends it when the server stops reading the request body for that long:
// CANCELLED, KERNEL_CANCELLED_002. The blocked call, RoundTrip or a read
// of the response body, returns the outcome. 0 turns a clock off.
//
// A response message is an SSE event with data, or a non-empty NDJSON
// line: SSE comments and empty lines are heartbeats and do not count.
// For any other response, each byte counts. A request message is each
// write of its body.
func WithStreamClocks(idle, sendStall time.Duration) TransportOption {
	return transportOptionFunc(func(t *Transport) { t.idle, t.stall = max(idle, 0), max(sendStall, 0) })
}

// isStreamRequest reports whether req asks for a stream, or sends one.
func isStreamRequest(req *http.Request) bool {
	for _, v := range req.Header.Values("Accept") {
		v = strings.ToLower(v)
		if strings.Contains(v, contentTypeSSE) || strings.Contains(v, contentTypeNDJSON) {
			return true
		}
	}
	mt, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type"))
	return mt == contentTypeNDJSON
}

// sendStream sends a stream through send, under the Transport's clocks.
// The clocks end with the response body, or with the call's failure.
func (t *Transport) sendStream(r *http.Request, send func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	if t.idle == 0 && t.stall == 0 {
		return send(r)
	}
	ctx, stop := context.WithCancelCause(r.Context())
	k := outclock.Start(t.idle, t.stall, stop)
	context.AfterFunc(ctx, k.Stop)
	r = r.WithContext(ctx)
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = &clockedBody{ReadCloser: r.Body, k: k}
	}
	if get := r.GetBody; get != nil { // the base transport may send the body again
		r.GetBody = func() (io.ReadCloser, error) {
			b, err := get()
			if err != nil || b == nil || b == http.NoBody {
				return b, err
			}
			return &clockedBody{ReadCloser: b, k: k}, nil
		}
	}
	resp, err := send(r)
	if err != nil {
		stop(nil)
		return nil, outclock.Outcome(ctx, err)
	}
	resp.Body = &clockedResponse{rc: resp.Body, ctx: ctx, stop: stop, k: k, f: framingOf(resp)}
	return resp, nil
}

// clockedBody is a request body under the send-stall clock. The
// transport writes what one Read returned before it reads again: from a
// Read that returned bytes to the next, a send is under way.
type clockedBody struct {
	io.ReadCloser
	k    *outclock.Clocks
	sent bool // the last Read returned bytes
}

func (b *clockedBody) Read(p []byte) (int, error) {
	b.k.Sending(false)
	if b.sent {
		b.k.Touch()
	}
	n, err := b.ReadCloser.Read(p)
	b.sent = n > 0
	if b.sent {
		b.k.Sending(true)
	}
	return n, err
}

// Close ends the send under way: the transport is done with the body.
func (b *clockedBody) Close() error {
	b.k.Sending(false)
	return b.ReadCloser.Close()
}

// clockedResponse is a response body under the idle clock: each message
// restarts it. A read that fails because a clock or the deadline ended the
// call returns that outcome.
type clockedResponse struct {
	rc   io.ReadCloser
	ctx  context.Context
	stop context.CancelCauseFunc
	k    *outclock.Clocks
	f    framing
}

func (b *clockedResponse) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if b.f.feed(p[:n]) {
		b.k.Touch()
	}
	switch {
	case err == nil:
	case errors.Is(err, io.EOF):
		b.stop(nil)
	default:
		if out := outclock.Outcome(b.ctx, err); out != err {
			return n, out
		}
		if errors.Is(b.ctx.Err(), context.DeadlineExceeded) && !errors.Is(err, context.DeadlineExceeded) {
			return n, fmt.Errorf("httpadapter: the deadline passed while the response was read: %w (%w)",
				context.DeadlineExceeded, err)
		}
	}
	return n, err
}

func (b *clockedResponse) Close() error {
	err := b.rc.Close()
	b.stop(nil)
	return err
}

// framing finds the messages in a response's bytes, as they come.
type framing interface {
	// feed reads the next bytes and reports whether a message ended in them.
	feed(b []byte) bool
}

// framingOf returns the framing of resp's content type: SSE events,
// NDJSON lines, or bytes.
func framingOf(resp *http.Response) framing {
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch mt {
	case contentTypeSSE:
		return &sseFraming{}
	case contentTypeNDJSON:
		return &ndjsonFraming{}
	}
	return byteFraming{}
}

type byteFraming struct{}

func (byteFraming) feed(b []byte) bool { return len(b) > 0 }

// ndjsonFraming counts each line with a byte other than space: an empty
// line is a heartbeat.
type ndjsonFraming struct{ content bool }

func (f *ndjsonFraming) feed(b []byte) bool {
	ended := false
	for _, c := range b {
		switch c {
		case '\n':
			ended = ended || f.content
			f.content = false
		case ' ', '\t', '\r':
		default:
			f.content = true
		}
	}
	return ended
}

// sseFraming counts each event that has a data field, as the event
// stream's parser dispatches it: a comment line (":") is a heartbeat.
// Lines end with CRLF, LF or CR.
type sseFraming struct {
	line   []byte // the current line's first bytes, up to len("data:")
	n      int    // the current line's length
	data   bool   // the current event has a data field
	lastCR bool
}

func (f *sseFraming) feed(b []byte) bool {
	ended := false
	for _, c := range b {
		if c == '\n' && f.lastCR {
			f.lastCR = false
			continue
		}
		f.lastCR = c == '\r'
		if c != '\n' && c != '\r' {
			if len(f.line) < len("data:") {
				f.line = append(f.line, c)
			}
			f.n++
			continue
		}
		if f.n == 0 {
			ended = ended || f.data
			f.data = false
		} else if l := string(f.line); l == "data" || l == "data:" {
			f.data = true
		}
		f.line, f.n = f.line[:0], 0
	}
	return ended
}

// readFirst reads resp's body until its first message ends, when resp
// is a stream, and keeps what it read for the caller. It returns the
// failure of that read. So an attempt through a dependency succeeds only
// with a message, and a stream is retried only before its first one.
func readFirst(resp *http.Response) error {
	f := framingOf(resp)
	if _, ok := f.(byteFraming); ok {
		return nil // not a stream: the answer is the message
	}
	var buf bytes.Buffer
	p := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(p)
		buf.Write(p[:n])
		if f.feed(p[:n]) {
			resp.Body = &prefixed{Reader: io.MultiReader(&buf, resp.Body), c: resp.Body}
			return nil
		}
		if errors.Is(err, io.EOF) {
			resp.Body = &prefixed{Reader: &buf, c: resp.Body}
			return nil // the stream ended with no message: an answer all the same
		}
		if err != nil {
			resp.Body.Close()
			return err
		}
		if buf.Len() > maxFirstMessage {
			resp.Body.Close()
			return fmt.Errorf("httpadapter: the stream's first message is over %d bytes", maxFirstMessage)
		}
	}
}

// maxFirstMessage bounds what readFirst keeps.
const maxFirstMessage = 4 << 20

// prefixed is a body whose first bytes were read already.
type prefixed struct {
	io.Reader
	c    io.Closer
	once sync.Once
}

func (b *prefixed) Close() error {
	var err error
	b.once.Do(func() { err = b.c.Close() })
	return err
}
