package connectadapter_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
)

// transport is one way a client reaches the adapter.
type transport struct {
	name     string
	protocol connect.ClientOption // nil: Connect
	json     bool
	gzip     bool
	h2c      bool
}

// transports returns every combination connect-go's client can send:
// Connect, gRPC and gRPC-Web; JSON and binary protobuf; gzip and
// identity; HTTP/1.1 and h2c. gRPC needs HTTP/2.
func transports() []transport {
	var out []transport
	for _, p := range []struct {
		name string
		opt  connect.ClientOption
	}{{"connect", nil}, {"grpc", connect.WithGRPC()}, {"grpcweb", connect.WithGRPCWeb()}} {
		for _, js := range []bool{false, true} {
			for _, gz := range []bool{false, true} {
				for _, h2 := range []bool{false, true} {
					if p.name == "grpc" && !h2 {
						continue
					}
					name := fmt.Sprintf("%s/%s/%s/%s", p.name, pick(js, "json", "proto"), pick(gz, "gzip", "identity"), pick(h2, "h2c", "http1"))
					out = append(out, transport{name, p.opt, js, gz, h2})
				}
			}
		}
	}
	return out
}

func pick(b bool, yes, no string) string {
	if b {
		return yes
	}
	return no
}

// options returns the client options of tr.
func (tr transport) options() []connect.ClientOption {
	var opts []connect.ClientOption
	if tr.protocol != nil {
		opts = append(opts, tr.protocol)
	}
	if tr.json {
		opts = append(opts, connect.WithProtoJSON())
	}
	if tr.gzip {
		opts = append(opts, connect.WithSendGzip())
	}
	return opts
}

// TestEveryProtocolCodecCompressionAndHTTPVersion drives connect-go's own
// client over every transport: a success with the caller's deadline,
// priority, baggage and idempotency key seen by the handler, and a
// failure with the code and details the gRPC adapter answers.
func TestEveryProtocolCodecCompressionAndHTTPVersion(t *testing.T) {
	s := newServer(t)
	for _, tr := range transports() {
		t.Run(tr.name, func(t *testing.T) {
			hc := httpClient(t, tr.h2c)
			c := s.client(t, hc, "/test.v1.Work/Keyed", tr.options()...)
			req := s.request(t, "/test.v1.Work/Keyed", `{"delayMs":1}`)
			req.Header().Set("Sundial-Priority", "sheddable")
			req.Header().Set("Baggage", "tenant=acme")
			req.Header().Set("Idempotency-Key", "k-"+tr.name)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			sent, _ := ctx.Deadline()
			res, err := c.CallUnary(ctx, req)
			if err != nil {
				t.Fatalf("CallUnary: %v", err)
			}
			if got := field(res.Msg, "rows"); got != "1" {
				t.Errorf("rows = %s, want 1", got)
			}
			if got := field(res.Msg, "priority"); got != "sheddable" {
				t.Errorf("priority seen by the handler = %q, want sheddable", got)
			}
			if got := field(res.Msg, "baggage"); got != "acme" {
				t.Errorf("baggage tenant seen by the handler = %q, want acme", got)
			}
			if got := field(res.Msg, "key"); got != "k-"+tr.name {
				t.Errorf("idempotency key seen by the handler = %q, want k-%s", got, tr.name)
			}
			if got := s.protocol.Load(); got != "connect" {
				t.Errorf("invocation protocol = %v, want connect", got)
			}
			seen, err := time.Parse(time.RFC3339Nano, field(res.Msg, "deadline"))
			if err != nil {
				t.Fatalf("the handler saw no deadline: %v", err)
			}
			// The timeout header is relative: the server's deadline is its
			// arrival plus what remained, later than the client's by the
			// time the request took. Without the header it would be the
			// kernel's cap, 30 s from arrival, 10 s after the caller's.
			if d := seen.Sub(sent); d < -time.Second || d > 5*time.Second {
				t.Errorf("handler's deadline %v, caller's %v: %v apart", seen, sent, d)
			}

			_, err = s.client(t, hc, "/test.v1.Work/Fail", tr.options()...).
				CallUnary(ctx, s.request(t, "/test.v1.Work/Fail", `{"retry":3}`))
			ce := connectErr(t, err)
			if ce.Code() != connect.CodeUnavailable || ce.Message() != "The ledger is down." {
				t.Fatalf("failure = %v, want unavailable: The ledger is down.", ce)
			}
			info, retry := errorInfo(t, ce), retryInfo(ce)
			if info.GetReason() != "APP_UNAVAILABLE_001" || info.GetDomain() != "sundial" {
				t.Errorf("ErrorInfo = %v, want reason APP_UNAVAILABLE_001 in domain sundial", info)
			}
			if retry == nil || retry.GetRetryDelay().AsDuration() != 3*time.Second {
				t.Errorf("RetryInfo = %v, want a delay of 3s", retry)
			}
		})
	}
}

// connectErr returns err as a *connect.Error, failing the test otherwise.
func connectErr(t testing.TB, err error) *connect.Error {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) {
		t.Fatalf("error %v (%T), want a *connect.Error", err, err)
	}
	return ce
}

// errorInfo returns the google.rpc.ErrorInfo of ce, failing the test when
// it has none.
func errorInfo(t testing.TB, ce *connect.Error) *errdetails.ErrorInfo {
	t.Helper()
	for _, d := range ce.Details() {
		if v, err := d.Value(); err == nil {
			if info, ok := v.(*errdetails.ErrorInfo); ok {
				return info
			}
		}
	}
	t.Fatalf("error %v has no ErrorInfo among %d details", ce, len(ce.Details()))
	return nil
}

// retryInfo returns the google.rpc.RetryInfo of ce, or nil.
func retryInfo(ce *connect.Error) *errdetails.RetryInfo {
	for _, d := range ce.Details() {
		if v, err := d.Value(); err == nil {
			if ri, ok := v.(*errdetails.RetryInfo); ok {
				return ri
			}
		}
	}
	return nil
}
