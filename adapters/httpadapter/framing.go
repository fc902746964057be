package httpadapter

import (
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
)

// A request that carries both Content-Length and Transfer-Encoding:
// chunked is a request smuggling vector: a front end that frames it by
// Content-Length and this server, which frames it by the chunked coding,
// disagree on where the next request on the connection starts. RFC 9112
// §6.1 lets a server either reject it or process it by Transfer-Encoding
// alone, and requires in both cases that it close the connection after
// responding.
//
// Go's HTTP/1 server processes it by Transfer-Encoding alone — and erases
// the evidence before any handler runs: it deletes both headers from
// Request.Header, sets ContentLength to -1 and TransferEncoding to
// ["chunked"], exactly as for a request that sent no Content-Length, and
// keeps the connection open for whatever follows the last chunk. A handler
// cannot tell the two apart, so rejecting with 400 would reject every
// chunked request. The adapter therefore answers every HTTP/1.x request
// with a chunked body, whatever its outcome, with Connection: close, and
// Go's server closes the connection after the response: the bytes after
// the body are never read as a request. The cost falls on chunked request
// bodies only (a client that streams a body of unknown length): they
// reconnect for their next request. Requests framed by Content-Length, and
// HTTP/2, keep their connection.

// closeAfterChunked sets Connection: close on the response to an HTTP/1.x
// request whose body is chunked (see above). It is called before anything
// is written.
func closeAfterChunked(c echo.Context) {
	if r := c.Request(); r.ProtoMajor == 1 && len(r.TransferEncoding) > 0 {
		c.Response().Header().Set(echo.HeaderConnection, "close")
	}
}

// A response written before the request body was read to its end waits
// on that body. Go's HTTP/1 server, to keep the connection for a next
// request, reads up to 256 KiB of what is left of the body before it
// writes the response header (so a handler's response sits in its buffer
// meanwhile), and after the handler it closes the body, which reads up to
// 256 KiB again — unless the response says Connection: close. A client
// that sends its headers and then dribbles the body would get no answer
// for as long as it dribbles, on every path that answers without reading
// the body: echo's 404 and 405, a host endpoint, an operation's
// rejection before its body is read (a malformed deadline header, a
// Content-Length over the limit), an application route; and the
// connection, busy, would hold Server.Shutdown as long.
//
// The adapter therefore watches the body of every HTTP/1.x request that
// has one (watchBody): a response whose header is written before the body
// was read to its end says Connection: close, so that the server neither
// reads the body before sending it nor keeps the connection; and when the
// handler has returned with the body unread (settleBody), the connection's
// read deadline is set in the past, so that the server's closing of the
// body fails at once instead of reading on, and the connection is closed
// as soon as the response is out. Requests whose body was read to its end
// (every operation that gets to decode its input) and requests without a
// body keep their connection. HTTP/2 is left alone: its server never
// waits on an unread body, and Connection: close there would make it
// drain the whole connection. So is a request that asks for a protocol
// Upgrade: a handler that takes over the connection owns its deadlines.

// watchedBody is a request body that records whether it was read to its
// end.
type watchedBody struct {
	io.ReadCloser
	r    *http.Request // the request whose Body it is
	resp *echo.Response
	eof  atomic.Bool // read from the goroutine that writes the header
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof.Store(true)
	}
	return n, err
}

// beforeHeader is called by echo just before the response header is
// written: a body not read to its end closes the connection.
func (b *watchedBody) beforeHeader() {
	if !b.eof.Load() {
		b.resp.Header().Set(echo.HeaderConnection, "close")
	}
}

// unwatch gives the request its own body back (Go's server looks at its
// type after the handler), unless something has replaced it since.
func (b *watchedBody) unwatch() {
	if b != nil && b.r.Body == b {
		b.r.Body = b.ReadCloser
	}
}

// bodyWatchKey is the echo context key of the request's *watchedBody.
const bodyWatchKey = "sundial.httpadapter.bodyWatch"

// mayWaitOnBody reports whether the server would wait on the unread
// body of r: an HTTP/1.x request with a body, not asking for an Upgrade.
func mayWaitOnBody(r *http.Request) bool {
	return r.ProtoMajor == 1 && r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 &&
		len(r.Header["Upgrade"]) == 0
}

// watchBody watches the body of c's request (see above) and returns the
// watch. The caller settles it (settleBody) and unwatches it after its
// handler. It is nil when there is nothing to watch. It is nil too when
// Mount's Pre middleware already watches the body and settles it.
func watchBody(c echo.Context) *watchedBody {
	r := c.Request()
	if !mayWaitOnBody(r) {
		return nil
	}
	if w, _ := c.Get(bodyWatchKey).(*watchedBody); w != nil {
		return nil
	}
	w := &watchedBody{ReadCloser: r.Body, r: r, resp: c.Response()}
	r.Body = w
	c.Set(bodyWatchKey, w)
	w.resp.Before(w.beforeHeader)
	return w
}

// aLongTimeAgo is a read deadline that has passed.
var aLongTimeAgo = time.Unix(1, 0)

// settleBody is called when c's handler has returned, before the server
// sends the response. The request's body may not have been read to its
// end, or may not be watched, so that nobody knows. Then the response says
// Connection: close, and the connection's read deadline is set in the
// past. So the server neither reads the rest of the body nor keeps the
// connection. A response already committed without Connection: close,
// written past the watch, is left to the server.
func settleBody(c echo.Context) {
	r := c.Request()
	if !mayWaitOnBody(r) {
		return
	}
	if w, _ := c.Get(bodyWatchKey).(*watchedBody); w != nil && w.eof.Load() {
		return
	}
	resp := c.Response()
	if !resp.Committed {
		resp.Header().Set(echo.HeaderConnection, "close")
	} else if resp.Header().Get(echo.HeaderConnection) != "close" {
		return
	}
	// Not supported (a test recorder): nothing to wait on either.
	_ = http.NewResponseController(resp).SetReadDeadline(aLongTimeAgo)
}

// framingMiddleware is the Pre middleware Mount adds to its echo instance.
// Every request gets closeAfterChunked before routing, and has its body
// watched and settled around the handler. That covers the application's
// routes, and echo's 404 and 405.
func framingMiddleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		closeAfterChunked(c)
		w := watchBody(c)
		if w == nil {
			return next(c)
		}
		defer w.unwatch()
		err := next(c)
		// echo's error handler writes the response for err after this
		// returns: settled here, before it.
		settleBody(c)
		return err
	}
}
