package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/pipeline"
)

// jsonClient calls the JSON operations of one Sundial HTTP service and
// turns its Problem Details back into outcomes, so a downstream 504 is a
// TIMEOUT here too.
type jsonClient struct {
	name string // the dependency, for errors: "inventory"
	base string // e.g. "http://127.0.0.1:7002"
	hc   *http.Client
}

// post sends in as JSON to path and decodes the reply into out.
func (c *jsonClient) post(ctx context.Context, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return c.do(ctx, http.MethodPost, path, bytes.NewReader(body), out)
}

// get fetches path and decodes the reply into out.
func (c *jsonClient) get(ctx context.Context, path string, out any) error {
	return c.do(ctx, http.MethodGet, path, nil, out)
}

func (c *jsonClient) do(ctx context.Context, method, path string, body io.Reader, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return transportError(c.name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return transportError(c.name, err)
	}
	if resp.StatusCode >= 300 {
		return problemError(resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	if out == nil || len(b) == 0 {
		return nil
	}
	return json.Unmarshal(b, out)
}

// transportError classifies the error of a request to dependency dep that
// got no complete answer. The end of the request's context stays as it is
// (the deadline middleware attributes the caller's own deadline and
// cancellation; a Budget's cut carries its TIMEOUT outcome as the cause); a
// network timeout, such as a per-read timeout, is a TIMEOUT; anything else
// — refused, reset — is UNAVAILABLE: the dependency is down, not the
// caller's code broken.
func transportError(dep string, err error) error {
	var pe *pipeline.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.As(err, &pe) {
		return err
	}
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return pipeline.Wrap(pipeline.KindTimeout, "CHAIN_TIMEOUT_001", fmt.Sprintf("The %s service stopped answering: a read timed out.", dep), err).
			WithDetail("dependency", dep)
	}
	return pipeline.Wrap(pipeline.KindUnavailable, "CHAIN_UNAVAILABLE_001", fmt.Sprintf("The %s service could not be reached.", dep), err).
		WithDetail("dependency", dep)
}

// problemError converts a failure response to an outcome: the Problem
// Details' kind (its title), code, detail and details, or, for a body that
// is not Problem Details, the kind of the status. A details.retryAfter in
// whole seconds becomes the outcome's retry-after, not a detail.
func problemError(status int, contentType string, body []byte) *pipeline.Error {
	var p httpadapter.Problem
	if strings.HasPrefix(contentType, httpadapter.ContentTypeProblem) && json.Unmarshal(body, &p) == nil && p.Code != "" {
		kind := kindOfStatus(status)
		for k := pipeline.KindOK; k <= pipeline.KindUnexpected; k++ {
			if k.String() == p.Title {
				kind = k
			}
		}
		e := pipeline.NewError(kind, p.Code, p.Detail)
		for k, v := range p.Details {
			if k == "retryAfter" { // the wire key of the retry-after
				if secs, ok := v.(float64); ok && secs >= 0 && secs <= math.MaxInt64/float64(time.Second) {
					e = e.WithRetryAfter(time.Duration(secs * float64(time.Second)))
					continue
				}
			}
			e = e.WithDetail(k, v)
		}
		return e.WithDetail("status", status)
	}
	return pipeline.NewError(kindOfStatus(status), "CHAIN_UNEXPECTED_001", fmt.Sprintf("HTTP %d without Problem Details", status)).WithDetail("status", status)
}

// kindOfStatus is the outcome kind of an HTTP status, the inverse of
// httpadapter.StatusFor.
func kindOfStatus(status int) pipeline.Kind {
	for k := pipeline.KindValidation; k <= pipeline.KindUnexpected; k++ {
		if k != pipeline.KindOK && httpadapter.StatusFor(k) == status {
			return k
		}
	}
	return pipeline.KindUnexpected
}

// newPlainTransport returns the HTTP transport most services start with: a
// timeout on each read (the longest pause between two pieces of the
// response), and nothing bounding the call as a whole — the Go rendering
// of a client configured with "timeout=1s" that means per read. A body
// that drips one byte every 500 ms never trips it.
//
// It connects with dial when it is set, else over TCP; either way a
// connection not made within readTimeout fails.
func newPlainTransport(readTimeout time.Duration, dial dialFunc) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(ctx, readTimeout)
		defer cancel()
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &readTimeoutConn{Conn: c, timeout: readTimeout}, nil
	}
	return t
}

// readTimeoutConn pushes its read deadline forward before every read: each
// read may wait readTimeout, however many reads there are.
type readTimeoutConn struct {
	net.Conn
	timeout time.Duration
}

func (c *readTimeoutConn) Read(p []byte) (int, error) {
	if err := c.Conn.SetReadDeadline(time.Now().Add(c.timeout)); err != nil {
		return 0, err
	}
	return c.Conn.Read(p)
}

// newServiceClient returns the HTTP client a chain service uses for its
// internal dependencies: the plain per-read-timeout transport under
// Sundial's outbound Transport, which writes what remains of the request
// context's deadline on every request (every retry attempt). dial, if
// set, makes its connections instead of TCP.
func newServiceClient(readTimeout time.Duration, dial dialFunc) *http.Client {
	return &http.Client{Transport: httpadapter.NewTransport(newPlainTransport(readTimeout, dial))}
}

// counter hands out increasing numbers.
type counter struct{ n atomic.Int64 }

func (c *counter) next() int64 { return c.n.Add(1) }

// describe formats an outcome for logs and test output: "TIMEOUT
// KERNEL_TIMEOUT_001".
func describe(err error) string {
	if err == nil {
		return "OK"
	}
	pe := pipeline.AsError(err)
	return fmt.Sprintf("%s %s", pe.Kind(), pe.Code())
}
