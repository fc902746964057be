package httpadapter

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/trace"

	"github.com/sundial-go/sundial/kernel/telemetry"
	"github.com/sundial-go/sundial/pipeline"
)

// HTTPErrorHandler is an echo.HTTPErrorHandler that writes every error as
// Problem Details and logs the request: echo's own errors (no route: 404
// HTTP_NOT_FOUND_001; wrong method: 405 HTTP_NOT_FOUND_002, with echo's
// Allow header; a body over echo's BodyLimit: 413 HTTP_VALIDATION_003),
// *echo.HTTPError values returned by application handlers (their status is
// kept; the title is the nearest kind), *pipeline.Error values (the kind's
// status), and any other error (500 UNEXPECTED; its text goes to the log
// only). Nothing is written when the response is already committed.
//
// Mount installs it on the echo instance unless WithoutErrorHandler is
// given.
func (a *Adapter) HTTPErrorHandler(err error, c echo.Context) {
	x := exchange{start: time.Now()}
	r := c.Request()
	x.traceID = traceIDOf(trace.SpanContextFromContext(r.Context()))
	e, status := a.problemOf(err)
	if status != http.StatusNotFound && status != http.StatusMethodNotAllowed && c.Path() != "" {
		x.name = r.Method + " " + c.Path() // an application route, named like a host endpoint
	}
	if c.Response().Committed {
		x.status, x.err = c.Response().Status, e
		a.logExchange(r, &x, errors.New("httpadapter: response already committed"))
		return
	}
	a.fail(c, &x, e, status)
}

// problemOf maps an error returned to echo to an outcome and a status.
func (a *Adapter) problemOf(err error) (*pipeline.Error, int) {
	var he *echo.HTTPError
	if errors.As(err, &he) {
		if inner, ok := he.Internal.(*echo.HTTPError); ok {
			he = inner
		}
		return echoProblem(he), he.Code
	}
	e := pipeline.AsError(err)
	return e, StatusFor(e.Kind)
}

// echoProblem translates an *echo.HTTPError: its status is kept, its kind
// is the nearest one.
func echoProblem(he *echo.HTTPError) *pipeline.Error {
	msg := http.StatusText(he.Code)
	if s, ok := he.Message.(string); ok && s != "" {
		msg = s
	}
	if msg == "" {
		msg = fmt.Sprintf("HTTP status %d.", he.Code)
	}
	var kind pipeline.Kind
	code := CodeBadRequest
	switch he.Code {
	case http.StatusNotFound:
		kind, code = pipeline.KindNotFound, CodeRouteNotFound
	case http.StatusMethodNotAllowed:
		kind, code = pipeline.KindNotFound, CodeMethodNotAllowed
	case http.StatusRequestEntityTooLarge:
		kind, code = pipeline.KindValidation, CodeBodyTooLarge
	case http.StatusUnauthorized:
		kind = pipeline.KindUnauthenticated
	case http.StatusForbidden:
		kind = pipeline.KindForbidden
	case http.StatusConflict:
		kind = pipeline.KindConflict
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		kind, code = pipeline.KindUnavailable, CodeUnavailable
	case http.StatusGatewayTimeout:
		kind, code = pipeline.KindTimeout, pipeline.CodeTimeout
	default:
		if he.Code >= 400 && he.Code < 500 {
			kind = pipeline.KindValidation
		} else {
			kind, code = pipeline.KindUnexpected, pipeline.CodeUnexpected
		}
	}
	e := pipeline.NewError(kind, code, msg)
	if kind == pipeline.KindUnexpected && he.Internal != nil {
		e = e.WithCause(he.Internal)
	}
	return e
}

// Wrap runs an application's own echo handler — a host endpoint, such as
// a health check — through the kernel's host pipeline, so that it gets
// the caller's deadline (its request context ends at it), the Diagnostics
// and application middleware, Problem Details for its errors, and an
// access log record named "METHOD /path". Per-operation limits do not
// apply. Unlike operation routes, a host handler writes its own response,
// so it runs on the request's goroutine: a handler that ignores its
// context holds its response until it returns.
func (a *Adapter) Wrap(h echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		x := exchange{start: time.Now()}
		x.name = r.Method + " " + c.Path()
		ctx := a.requestContext(r, x.name)
		x.traceID = traceIDOf(trace.SpanContextFromContext(ctx))
		inv := pipeline.NewInvocation(ctx, nil, nil)
		inv.SetRoute(x.name)
		inv.SetProtocol(pipeline.ProtocolHTTP)
		if a.cfg.callerDeadlines {
			d, header, err := inboundDeadline(r.Header, a.cfg.relHeader, x.start)
			if err != nil {
				a.fail(c, &x, badDeadline(header), 0)
				return nil
			}
			inv.SetDeadline(d)
		}
		a.setBaggage(inv, r)
		var herr error
		err := a.k.InvokeFunc(inv, func(inv *pipeline.Invocation) error {
			c.SetRequest(r.WithContext(inv.Context()))
			defer c.SetRequest(r)
			herr = h(c)
			return herr
		})
		if tid := telemetry.TraceID(inv); tid != "" {
			x.traceID = tid
		}
		switch {
		case err == nil:
			x.status = c.Response().Status
			a.logExchange(r, &x, nil)
		case c.Response().Committed:
			x.status, x.err = c.Response().Status, pipeline.AsError(err)
			a.logExchange(r, &x, nil)
		case herr != nil && errors.Is(err, herr):
			e, status := a.problemOf(herr)
			a.fail(c, &x, e, status)
		default:
			a.fail(c, &x, pipeline.AsError(err), 0)
		}
		return nil
	}
}
