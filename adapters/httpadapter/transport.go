package httpadapter

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/trace"

	"github.com/sundial-go/sundial/kernel/propagation"
)

// Transport is an http.RoundTripper that carries the deadline of each
// request's context to the server. It does so on every request, so on
// every attempt of a retry loop. It computes what remains of the deadline
// at that moment. It writes it in the headers the inbound side reads:
// Sundial-Deadline and Sundial-Timeout-Ms. The first is absolute, RFC 3339
// UTC, truncated to the millisecond. The second is relative, in whole
// milliseconds, rounded down. A request whose context has no deadline gets
// no deadline header. One whose deadline has passed is not sent at all; it
// fails with an error wrapping context.DeadlineExceeded. Transport also
// writes the W3C trace context and baggage of the request's context
// (propagation.InjectHTTP: traceparent, tracestate, baggage). So the
// server's span continues the caller's trace.
//
// Deadlines, trace context and baggage are the caller's business. Give a
// Transport only to clients of internal services, or restrict it with
// WithHosts. Requests to other hosts go out exactly as they came.
//
// Create it with NewTransport. It is safe for concurrent use. It never
// modifies the caller's request: it sends a clone when it adds headers.
type Transport struct {
	base      http.RoundTripper
	absolute  bool
	relHeader string
	hosts     map[string]bool // nil: every host
	dep       Dependency
	// idle and stall are the clocks of WithStreamClocks; 0: none.
	idle, stall time.Duration
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

// Dependency runs the attempts of one outbound call under a dependency's
// policies; the *outbound.Dependency that Kernel.Dependency returns is one.
// DoOnce runs a call of one attempt under the same breaker and counts.
type Dependency interface {
	Do(ctx context.Context, attempt func(context.Context) error) error
	DoOnce(ctx context.Context, attempt func(context.Context) error) error
}

// sentNothing marks the failure of an attempt that wrote no byte, which
// the outbound policies retry without an idempotency key (its NotSent
// method is what they look for; see outbound.NotSent).
type sentNothing struct{ err error }

func (e *sentNothing) Error() string { return e.err.Error() }
func (e *sentNothing) Unwrap() error { return e.err }
func (e *sentNothing) NotSent() bool { return true }

func notSent(err error) error { return &sentNothing{err: err} }

// WithDependency runs every request to the Transport's hosts through d, as
// outbound.Dependency.Do does. That gives retries within d's budget,
// hedging and d's breaker. Each attempt is a clone of the request with the
// same headers, baggage and trace; so it has the same idempotency key.
// Each runs in a child span of its own, with its remaining deadline
// written anew.
//
// With a dependency, an answer of status 400 or above is not returned as a
// response. RoundTrip returns its outcome (FromResponse), as the gRPC
// client interceptor does, so its kind decides whether it is retried. The
// http.Client wraps it in a *url.Error, which errors.As sees through. A
// failure before any byte of the request was written is marked as not
// sent (see outbound.NotSent). A request whose body cannot be read again
// (Body set, GetBody nil) goes through d.DoOnce. That is one attempt,
// never retried or hedged, under the same breaker, outcome and counts.
//
// A stream (see WithStreamClocks) is retried only before its first
// message. An attempt succeeds once the first SSE event or NDJSON line
// has arrived; RoundTrip keeps it for the caller's reads. A failure after
// it reaches the caller's read of the body, and is never retried.
func WithDependency(d Dependency) TransportOption {
	return transportOptionFunc(func(t *Transport) { t.dep = d })
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
	if t.dep == nil {
		if isStreamRequest(req) {
			return t.sendStream(req, t.send)
		}
		return t.send(req)
	}
	if req.GetBody == nil && req.Body != nil && req.Body != http.NoBody {
		return t.roundTripDependency(req, t.dep.DoOnce) // the body can be read once
	}
	return t.roundTripDependency(req, t.dep.Do)
}

// roundTripDependency sends req through do, the Transport's dependency's
// Do or DoOnce.
func (t *Transport) roundTripDependency(req *http.Request,
	do func(context.Context, func(context.Context) error) error) (*http.Response, error) {
	var (
		mu     sync.Mutex
		won    *http.Response
		used   atomic.Bool // the caller's Body went with an attempt
		stream = isStreamRequest(req)
	)
	err := do(req.Context(), func(ctx context.Context) error {
		r, err := attemptRequest(ctx, req, &used)
		if err != nil {
			return err
		}
		var resp *http.Response
		if stream {
			resp, err = t.sendStream(r, t.sendTracked)
		} else {
			resp, err = t.sendTracked(r)
		}
		if err != nil {
			return err
		}
		if err := FromResponse(resp); err != nil {
			return err
		}
		if stream {
			if err := readFirst(resp); err != nil {
				return err
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if won != nil {
			resp.Body.Close() // two hedges both answered: the first stands
			return nil
		}
		won = resp
		return nil
	})
	if err != nil {
		if req.Body != nil && !used.Load() {
			req.Body.Close() // no attempt took it: RoundTrip must still close it
		}
		return nil, err
	}
	return won, nil
}

// sendTracked sends r as send does. A failure before any byte of the
// request was written, while r's context was live, is marked as not sent.
func (t *Transport) sendTracked(r *http.Request) (*http.Response, error) {
	ctx := r.Context()
	var wrote atomic.Bool
	r = r.WithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteHeaders: func() { wrote.Store(true) }}))
	resp, err := t.send(r)
	if err != nil && !wrote.Load() && ctx.Err() == nil {
		return nil, notSent(err)
	}
	return resp, err
}

// attemptRequest returns the request of one attempt: req with the
// attempt's context and the caller's body for the first attempt to take
// it, a fresh one from GetBody for the others.
func attemptRequest(ctx context.Context, req *http.Request, used *atomic.Bool) (*http.Request, error) {
	r := req.Clone(ctx)
	if req.Body == nil || req.Body == http.NoBody || used.CompareAndSwap(false, true) {
		return r, nil
	}
	if req.GetBody == nil { // a DoOnce that tried twice: the body is gone
		return nil, errBodyUsed
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, notSent(err)
	}
	r.Body = body
	return r, nil
}

// errBodyUsed is the outcome of a second attempt at a request whose body
// can be read only once.
var errBodyUsed = errors.New("httpadapter: the request body was sent once and cannot be read again")

// send writes the deadline, trace context and baggage of req's context
// into a clone of req and sends it.
func (t *Transport) send(req *http.Request) (*http.Response, error) {
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
		propagation.InjectHTTP(ctx, r2.Header)
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
