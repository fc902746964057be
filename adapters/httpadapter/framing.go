package httpadapter

import "github.com/labstack/echo/v4"

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

// closeAfterChunkedMiddleware applies closeAfterChunked to every request
// of the echo instance Mount is given — its application routes too — before
// routing.
func closeAfterChunkedMiddleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		closeAfterChunked(c)
		return next(c)
	}
}
