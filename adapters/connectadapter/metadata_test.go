package connectadapter_test

import (
	"context"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundial-go/sundial/operations"
)

type quotaIn struct {
	Over bool `json:"over"`
}

type quotaOut struct {
	Tenant string `json:"tenant"`
}

// quota reads the caller's X-Tenant header, sets a header and a trailer,
// and, when the input is over its quota, answers with a status of its
// own: ResourceExhausted with a QuotaFailure.
func quota(ctx context.Context, in quotaIn) (quotaOut, error) {
	md := operations.MetadataFrom(ctx)
	md.AddHeader("X-Served-By", "sundial")
	md.AddTrailer("X-Checksum", "c0ffee")
	md.AddHeader("Content-Type", "text/plain") // the protocol's: never sent
	md.AddTrailer("Grpc-Status", "0")
	for _, k := range ownedKeys {
		md.AddHeader(k, "handler")
		md.AddTrailer(k, "handler")
	}
	tenant := md.Request().Get("X-Tenant")
	if in.Over {
		st, err := status.New(codes.ResourceExhausted, "tenant "+tenant+" used its 10 calls").
			WithDetails(&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{
				{Subject: "tenant:" + tenant, Description: "10 calls a minute"}}})
		if err != nil {
			return quotaOut{}, err
		}
		return quotaOut{}, st.Err()
	}
	return quotaOut{Tenant: tenant}, nil
}

// ownedKeys are headers the handler sets that the protocols own: none
// reaches the caller.
var ownedKeys = []string{"Keep-Alive", "Upgrade", "Proxy-Connection", "Transfer-Encoding",
	"Content-Length", "Sundial-Trace-Id", "Connect-Timeout-Ms"}

func newQuotaServer(t *testing.T) *server {
	return startServer(t, func(t testing.TB, reg *operations.Registry) {
		if err := operations.Register(reg, operations.Descriptor{ID: "quota.check"}, quota); err != nil {
			t.Fatal(err)
		}
	}, `{}`)
}

// TestHandlerMetadata: over every protocol, codec and HTTP version, the
// handler reads the caller's request header, and the caller gets the
// response header and trailer the handler set.
func TestHandlerMetadata(t *testing.T) {
	s := newQuotaServer(t)
	for _, tr := range transports() {
		c := s.client(t, httpClient(t, tr.h2c), "/test.v1.Quota/Check", tr.options()...)
		req := s.request(t, "/test.v1.Quota/Check", `{}`)
		req.Header().Set("X-Tenant", "acme")
		res, err := c.CallUnary(t.Context(), req)
		if err != nil {
			t.Fatalf("%s: %v", tr.name, err)
		}
		if got := field(res.Msg, "tenant"); got != "acme" {
			t.Errorf("%s: the handler read X-Tenant %q, want acme", tr.name, got)
		}
		if h, tl := res.Header().Get("X-Served-By"), res.Trailer().Get("X-Checksum"); h != "sundial" || tl != "c0ffee" {
			t.Errorf("%s: header %q, trailer %q; want sundial, c0ffee", tr.name, h, tl)
		}
		for _, k := range append(ownedKeys, "Content-Type") {
			for _, v := range append(res.Header().Values(k), res.Trailer().Values(k)...) {
				if v == "handler" || v == "text/plain" {
					t.Errorf("%s: the handler's %s reached the caller", tr.name, k)
				}
			}
		}
	}
}

// TestHandlerStatus: a handler that returns a status of its own is
// answered with exactly its code, message and details, over every
// protocol: no ErrorInfo of Sundial's is added. Its headers and trailers
// come with the error.
func TestHandlerStatus(t *testing.T) {
	s := newQuotaServer(t)
	for _, tr := range transports() {
		c := s.client(t, httpClient(t, tr.h2c), "/test.v1.Quota/Check", tr.options()...)
		req := s.request(t, "/test.v1.Quota/Check", `{"over":true}`)
		req.Header().Set("X-Tenant", "acme")
		_, err := c.CallUnary(t.Context(), req)
		ce := asConnect(t, err)
		if ce.Code() != connect.CodeResourceExhausted || ce.Message() != "tenant acme used its 10 calls" {
			t.Errorf("%s: %v; want resource_exhausted, the handler's message", tr.name, err)
		}
		ds := ce.Details()
		if len(ds) != 1 {
			t.Fatalf("%s: %d details, want the handler's one", tr.name, len(ds))
		}
		v, err := ds[0].Value()
		q, ok := v.(*errdetails.QuotaFailure)
		if err != nil || !ok || q.GetViolations()[0].GetSubject() != "tenant:acme" {
			t.Errorf("%s: detail %v, %v; want the handler's QuotaFailure", tr.name, v, err)
		}
		if h, tl := ce.Meta().Get("X-Served-By"), ce.Meta().Get("X-Checksum"); h != "sundial" || tl != "c0ffee" {
			t.Errorf("%s: error metadata %q, %q; want sundial, c0ffee", tr.name, h, tl)
		}
	}
	waitLog(t, s, logMessage, "method=/test.v1.Quota/Check", "code=GRPC_RESOURCE_EXHAUSTED")
}
