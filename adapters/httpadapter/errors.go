package httpadapter

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/pipeline"
)

// HTTPErrorHandler is an echo.HTTPErrorHandler. It writes every error as
// Problem Details and logs the request.
//   - echo's own errors: no route is 404 HTTP_NOT_FOUND_001; a wrong method
//     is 405 HTTP_NOT_FOUND_002, with echo's Allow header; a body over
//     echo's BodyLimit is 413 HTTP_VALIDATION_003.
//   - An *echo.HTTPError of an application handler keeps its status. The
//     title is the nearest kind.
//   - A *pipeline.Error has its kind's status.
//   - Any other error is 500 UNEXPECTED. Its text goes to the log only.
//
// Nothing is written when the response is already committed.
//
// Each such error goes to the kernel's host pipeline as a rejection
// (kernel.Op.Reject, or kernel.Kernel.Reject for no route). So it gets a span, metrics and a trace ID like
// any other call; nothing runs. It is named "METHOD /route". echo's 404
// and 405 are "METHOD (unmatched)", whatever the path. So a scan cannot
// use up the telemetry's bounded route names.
//
// Mount installs it on the echo instance unless WithErrorHandler(false) is
// given.
func (a *Adapter) HTTPErrorHandler(err error, c echo.Context) {
	// The response must not wait on an unread body (framing.go); where
	// Mount's Pre middleware did not watch it, nobody knows whether it
	// was read, and the connection is closed.
	settleBody(c)
	r := c.Request()
	x := a.newExchange(c)
	defer x.release()
	e, status := problemOf(err)
	route := c.Path()
	tr := x.transport(r, route)
	if status == http.StatusNotFound || status == http.StatusMethodNotAllowed || route == "" {
		tr.Route = "" // no route matched
		// One name for every unmatched path: a scan of random paths must
		// not use up the telemetry's bounded set of route names (the
		// access-log line has the path).
		route = unmatchedRoute
	} else {
		x.name = r.Method + " " + route // an application route, named like a host endpoint
	}
	route = r.Method + " " + route
	x.reject(e, status)
	x.respond(a.k.Reject(a.requestContext(r, route),
		kernel.Caller{Protocol: pipeline.ProtocolHTTP, Route: route, Transport: tr}, e))
}

// unmatchedRoute names the invocations of requests that matched no route.
const unmatchedRoute = "(unmatched)"

// problemOf maps an error returned to echo to an outcome and a status.
func problemOf(err error) (*pipeline.Error, int) {
	if he := asHTTPError(err); he != nil {
		return echoProblem(he), he.Code
	}
	e := pipeline.AsError(err)
	return e, StatusFor(e.Kind())
}

// asHTTPError returns the *echo.HTTPError in err's chain (the innermost of
// two nested ones), or nil. A chain that cannot be walked — an Unwrap
// method that panics on a typed nil — has none.
func asHTTPError(err error) (he *echo.HTTPError) {
	defer func() {
		if recover() != nil {
			he = nil
		}
	}()
	he, _ = errors.AsType[*echo.HTTPError](err)
	if he != nil {
		if inner, ok := he.Internal.(*echo.HTTPError); ok && inner != nil {
			he = inner
		}
	}
	return he
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
	kind, code := echoKind(he.Code)
	if kind == pipeline.KindUnexpected && he.Internal != nil {
		return pipeline.Wrap(kind, code, msg, he.Internal)
	}
	return pipeline.NewError(kind, code, msg)
}

// echoKinds are the kinds and codes of the statuses of echo's errors that
// have a kind of their own.
var echoKinds = map[int]struct {
	kind pipeline.Kind
	code string
}{
	http.StatusNotFound:              {pipeline.KindNotFound, codeRouteNotFound},
	http.StatusMethodNotAllowed:      {pipeline.KindNotFound, codeMethodNotAllowed},
	http.StatusRequestEntityTooLarge: {pipeline.KindValidation, codeBodyTooLarge},
	http.StatusUnauthorized:          {pipeline.KindUnauthenticated, codeBadRequest},
	http.StatusForbidden:             {pipeline.KindForbidden, codeBadRequest},
	http.StatusConflict:              {pipeline.KindConflict, codeBadRequest},
	http.StatusUnprocessableEntity:   {pipeline.KindUnprocessable, codeBadRequest},
	http.StatusTooManyRequests:       {pipeline.KindUnavailable, codeUnavailable},
	http.StatusServiceUnavailable:    {pipeline.KindUnavailable, codeUnavailable},
	http.StatusGatewayTimeout:        {pipeline.KindTimeout, pipeline.CodeTimeout},
}

// echoKind returns the kind and code of an echo error of HTTP status
// code: its own (echoKinds), else VALIDATION for a 4xx and UNEXPECTED
// for anything else.
func echoKind(code int) (pipeline.Kind, string) {
	if k, ok := echoKinds[code]; ok {
		return k.kind, k.code
	}
	if code >= 400 && code < 500 {
		return pipeline.KindValidation, codeBadRequest
	}
	return pipeline.KindUnexpected, pipeline.CodeUnexpected
}

// Wrap runs an application's own echo handler through the kernel's host
// pipeline. Such a host endpoint is, for example, a health check. It runs
// as a kernel.HostCall, with no operation. So it gets the caller's
// deadline: its request context ends at it. It gets the application
// middleware, a span, metrics and a trace ID, and Problem Details for its
// errors. Its access log record is named "METHOD /route". Per-operation
// limits do not apply. A host handler writes its own response, so nothing
// can answer for it at the deadline. It runs on the request's goroutine
// (kernel.Kernel.Host). A handler that ignores its context holds its
// response until it returns.
func (a *Adapter) Wrap(h echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		// Watched here unless Mount's Pre middleware does (framing.go).
		if w := watchBody(c); w != nil {
			defer w.unwatch()
			defer settleBody(c)
		}
		r := c.Request()
		x := a.newExchange(c)
		defer x.release()
		x.name = r.Method + " " + c.Path()
		ctx := a.requestContext(r, x.name)
		hc := kernel.HostCall{}
		a.caller(&hc.Caller, r, x.name, c.Path(), x)
		if a.cfg.callerDeadlines {
			d, header, err := inboundDeadline(r.Header, a.cfg.relHeader, x.start)
			if err != nil {
				x.respond(a.k.Reject(ctx, hc.Caller, badDeadline(header)))
				return nil
			}
			hc.Deadline = d
		}
		hc.Handler = func(ctx context.Context, _ *pipeline.Invocation) (any, error) {
			c.SetRequest(r.WithContext(ctx))
			defer c.SetRequest(r)
			err := h(c)
			if err == nil {
				return nil, nil
			}
			if he := asHTTPError(err); he != nil {
				// Its status is kept; the pipeline sees the nearest kind.
				e := echoProblem(he)
				x.reject(e, he.Code)
				return nil, e
			}
			return nil, err
		}
		x.respond(a.k.Host(ctx, hc))
		return nil
	}
}
