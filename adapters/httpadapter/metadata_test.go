package httpadapter_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
)

type quotaIn struct {
	Over bool `json:"over"`
}

type quotaOut struct {
	Tenant string `json:"tenant"`
}

// TestHandlerMetadataOverHTTP: the handler reads the caller's request
// header; the header and trailer it sets are a response header and an
// HTTP trailer on success; a failure's trailers are headers, since its
// problem has a length. A handler's own status is
// answered with its code's kind: ResourceExhausted is 503, with the
// handler's message and the code GRPC_RESOURCE_EXHAUSTED.
func TestHandlerMetadataOverHTTP(t *testing.T) {
	reg := operations.NewRegistry()
	if err := operations.Register(reg, operations.Descriptor{ID: "quota.check", Method: "POST", Path: "/quota"},
		func(ctx context.Context, in quotaIn) (quotaOut, error) {
			md := operations.MetadataFrom(ctx)
			md.AddHeader("X-Served-By", "sundial")
			md.AddTrailer("X-Checksum", "c0ffee")
			md.AddHeader("Content-Length", "1") // the adapter's: refused
			tenant := md.Request().Get("X-Tenant")
			if in.Over {
				return quotaOut{}, status.Error(codes.ResourceExhausted, "tenant "+tenant+" used its 10 calls")
			}
			return quotaOut{Tenant: tenant}, nil
		}); err != nil {
		t.Fatal(err)
	}
	k, err := kernel.New(kernel.WithRegistry(reg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close() })
	e := echo.New()
	if _, err := httpadapter.Mount(e, k); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		body   string
		status int
		want   string // a field of the JSON body
	}{
		{`{}`, http.StatusOK, `"tenant":"acme"`},
		{`{"over":true}`, http.StatusServiceUnavailable, `"code":"GRPC_RESOURCE_EXHAUSTED"`},
	} {
		req, _ := http.NewRequestWithContext(t.Context(), "POST", srv.URL+"/quota", strings.NewReader(tc.body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Tenant", "acme")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body) // the trailers follow the body
		_ = res.Body.Close()
		if res.StatusCode != tc.status || !strings.Contains(string(body), tc.want) || !json.Valid(body) {
			t.Errorf("%s: %d %s; want %d with %s", tc.body, res.StatusCode, body, tc.status, tc.want)
		}
		if tc.status != http.StatusOK && !strings.Contains(string(body), "tenant acme used its 10 calls") {
			t.Errorf("%s: %s; want the handler's message", tc.body, body)
		}
		trailer := res.Trailer
		if tc.status != http.StatusOK {
			trailer = res.Header // a problem has a length: its trailers are headers
		}
		if h, tl := res.Header.Get("X-Served-By"), trailer.Get("X-Checksum"); h != "sundial" || tl != "c0ffee" {
			t.Errorf("%s: header %q, trailer %q; want sundial, c0ffee", tc.body, h, tl)
		}
		if res.ContentLength == 1 {
			t.Errorf("%s: the handler set Content-Length", tc.body)
		}
	}
}
