package httpadapter

import (
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// This file serves a streaming operation's route through kernel.Op.Stream.

// codeNeedsWebSocket: a request that only a WebSocket can carry, such as
// a bidi stream's, came as plain HTTP (status 426, Upgrade: websocket).
const codeNeedsWebSocket = "HTTP_VALIDATION_005"

// serveStream handles one request of a streaming operation's route. A
// WebSocket upgrade carries any kind. Otherwise a server stream answers
// as SSE or NDJSON, as Accept chooses, and a client stream reads its
// messages from an NDJSON body and answers as a unary call does.
func (rt *route) serveStream(c echo.Context) error {
	var call kernel.StreamCall
	x, ctx, ok := rt.begin(c, &call.Caller)
	defer x.release()
	if !ok {
		return nil
	}
	a, r := rt.a, c.Request()
	call.Resume = r.Header.Get("Last-Event-ID")
	kind := rt.desc.Kind()
	if !isWebSocket(r) {
		if kind == operations.BidiStream || r.Method != rt.desc.Method {
			perr := pipeline.NewError(pipeline.KindValidation, codeNeedsWebSocket,
				"This stream is served over a WebSocket only.")
			x.reject(perr, http.StatusUpgradeRequired)
			c.Response().Header().Set("Upgrade", "websocket")
			x.respond(rt.op.Reject(ctx, call.Caller, perr))
			return nil
		}
		h := openHTTP(c, a.cfg.bodyLimit, kind == operations.ClientStream, rt.messageDecoder(c))
		if kind == operations.ServerStream {
			call.Decode = func(deadline time.Time) (any, error) {
				in, err := rt.decode(c, x, requestBy(deadline))
				if err == nil {
					h.liftDeadlines()
				}
				return in, err
			}
		}
		call.Raw = h
		sctx, done := h.callerContext(ctx)
		defer done()
		o := rt.op.Stream(sctx, call)
		if kind == operations.ClientStream && !h.started() {
			x.respond(o) // the reply, as a unary call's
			return nil
		}
		x.endStream(h, o)
		return nil
	}
	w, wctx, cancel, err := acceptWS(c, ctx, a.cfg.bodyLimit, kind == operations.ServerStream, rt.messageDecoder(c))
	if err != nil {
		// The library answered: a bad handshake or a foreign origin.
		o := rt.op.Reject(ctx, call.Caller, pipeline.Wrap(pipeline.KindValidation, pipeline.CodeValidation,
			"The WebSocket handshake failed.", err))
		x.log(c.Response().Status, pipeline.AsError(o.Err), o.TraceID, nil)
		return nil
	}
	defer cancel(nil)
	if kind == operations.ServerStream {
		call.Decode = func(deadline time.Time) (any, error) { return w.request(wctx, requestBy(deadline)) }
	}
	call.Raw = w
	o := rt.op.Stream(wctx, call)
	if kind == operations.ClientStream && o.Err == nil {
		if err := w.Send(o.Output); err != nil {
			o.Err = pipeline.Wrap(pipeline.KindUnexpected, pipeline.CodeUnexpected, pipeline.UnexpectedMessage, err)
		}
	}
	x.endStream(w, o)
	return nil
}

// messageDecoder returns the decoder of the caller's messages of c's
// route: each is bound as a request body is, with the path and query.
func (rt *route) messageDecoder(c echo.Context) func([]byte) (any, *pipeline.Error) {
	return func(b []byte) (any, *pipeline.Error) {
		in := rt.desc.NewInput()
		perr := operations.CheckJSON(rt.desc.Input, rt.desc.InputPolicy, b)
		if perr == nil {
			perr = rt.binder.bind(c.Request(), c.ParamNames(), c.ParamValues(), b, in)
		}
		if perr != nil {
			return nil, perr
		}
		return in, nil
	}
}

// streamRequestTimeout bounds the read of a server stream's request: its
// body, or over a WebSocket its first message. The gRPC adapter's default
// receive timeout bounds a gRPC request's alike. A stream's deadline may
// be far off; a caller that sends part of its request, or nothing, holds
// no connection past this.
const streamRequestTimeout = 5 * time.Second

// requestBy returns the deadline of a server stream's request read: the
// stream's deadline (zero: none), or streamRequestTimeout from now when
// earlier.
func requestBy(deadline time.Time) time.Time {
	if by := time.Now().Add(streamRequestTimeout); deadline.IsZero() || by.Before(deadline) {
		return by
	}
	return deadline
}

// request reads and decodes a server stream's request, the caller's first
// message, by deadline (zero: none).
func (w *wsRaw) request(ctx interface{ Err() error }, deadline time.Time) (any, error) {
	data, err := w.next(deadline)
	switch {
	case err == nil:
	case errors.Is(err, io.EOF):
		return nil, pipeline.NewError(pipeline.KindValidation, codeMalformedBody,
			"The stream's request, its first message, is missing.")
	case ctx.Err() != nil:
		return nil, pipeline.ErrCanceled()
	default:
		return nil, pipeline.AsError(err)
	}
	in, perr := w.decode(data)
	if perr != nil {
		return nil, perr
	}
	return in, nil
}
