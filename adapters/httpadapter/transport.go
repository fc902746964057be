package httpadapter

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/trace"

	"github.com/sundial-go/sundial/kernel/telemetry"
)

// Transport is an http.RoundTripper that carries the deadline of each
// request's context to the server: on every request — every attempt of a
// retry loop, since each attempt is a request — it computes what remains
// of the deadline at that moment and writes it in the headers the inbound
// side reads: Sundial-Deadline (absolute, RFC 3339 UTC, truncated to the
// millisecond) and Sundial-Timeout-Ms (relative, whole milliseconds,
// rounded down). A request whose context has no deadline gets no deadline
// header; one whose deadline has already passed is not sent at all and
// fails with an error wrapping context.DeadlineExceeded. It also writes
// the W3C trace context and baggage of the request's context
// (telemetry.InjectHTTP: traceparent, tracestate, baggage), so that the
// server's span continues the caller's trace.
//
// Deadlines, trace context and baggage are the caller's business: give a
// Transport only to clients of internal services, or restrict it with
// WithHosts; requests to other hosts go out exactly as they came.
//
// Create it with NewTransport. It is safe for concurrent use. It never
// modifies the caller's request (it sends a clone when it adds headers).
type Transport struct {
	base      http.RoundTripper
	absolute  bool
	relHeader string
	hosts     map[string]bool // nil: every host
}

// TransportOption configures NewTransport.
type TransportOption interface{ applyTransport(*Transport) }

type transportOptionFunc func(*Transport)

func (f transportOptionFunc) applyTransport(t *Transport) { f(t) }

// WithHosts restricts the Transport to requests whose URL host — "name"
// or "name:port", compared case-insensitively — is in hosts: requests to
// other hosts go out unchanged, with no deadline, trace context or
// baggage. Without it every request gets them.
func WithHosts(hosts ...string) TransportOption {
	return transportOptionFunc(func(t *Transport) {
		if t.hosts == nil {
			t.hosts = make(map[string]bool, len(hosts))
		}
		for _, h := range hosts {
			t.hosts[strings.ToLower(h)] = true
		}
	})
}

// WithRelativeHeader sets the name of the relative header the Transport
// writes (default DefaultRelativeDeadlineHeader); the empty name writes
// none. Match the server's WithRelativeDeadlineHeader.
func WithRelativeHeader(name string) TransportOption {
	return transportOptionFunc(func(t *Transport) {
		if name != "" {
			name = http.CanonicalHeaderKey(name)
		}
		t.relHeader = name
	})
}

// WithAbsoluteHeader says whether the Transport writes Sundial-Deadline
// (the default, true). Pass false for servers whose clocks cannot be
// trusted to agree with the caller's: only the relative header is then
// written.
func WithAbsoluteHeader(write bool) TransportOption {
	return transportOptionFunc(func(t *Transport) { t.absolute = write })
}

// NewTransport returns a Transport sending requests through base (nil:
// http.DefaultTransport).
func NewTransport(base http.RoundTripper, opts ...TransportOption) *Transport {
	t := &Transport{base: base, absolute: true, relHeader: DefaultRelativeDeadlineHeader}
	for _, o := range opts {
		if o != nil {
			o.applyTransport(t)
		}
	}
	if t.base == nil {
		t.base = http.DefaultTransport
	}
	return t
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.internal(req) {
		return t.base.RoundTrip(req)
	}
	ctx := req.Context()
	var r2 *http.Request // the clone that carries what we add
	if d, ok := ctx.Deadline(); ok && (t.absolute || t.relHeader != "") {
		remaining := time.Until(d)
		if remaining <= 0 {
			closeBody(req)
			return nil, fmt.Errorf("httpadapter: %s %s: the deadline passed before the request was sent: %w",
				req.Method, req.URL.Redacted(), context.DeadlineExceeded)
		}
		r2 = req.Clone(ctx)
		if t.absolute {
			r2.Header.Set(HeaderDeadline, formatDeadline(d))
		}
		if t.relHeader != "" {
			r2.Header.Set(t.relHeader, formatTimeoutMs(remaining))
		}
	}
	if trace.SpanContextFromContext(ctx).IsValid() || baggage.FromContext(ctx).Len() > 0 {
		if r2 == nil {
			r2 = req.Clone(ctx)
		}
		telemetry.InjectHTTP(ctx, r2.Header)
	}
	if r2 == nil {
		return t.base.RoundTrip(req)
	}
	return t.base.RoundTrip(r2)
}

func (t *Transport) internal(req *http.Request) bool {
	if t.hosts == nil {
		return true
	}
	return t.hosts[strings.ToLower(req.URL.Host)] || t.hosts[strings.ToLower(req.URL.Hostname())]
}

// closeBody closes a request body the Transport will not send, as the
// RoundTripper contract requires.
func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// CloseIdleConnections closes the idle connections of the underlying
// RoundTripper, if it has any (http.Client.CloseIdleConnections calls it).
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
