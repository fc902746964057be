package observe_test

import (
	"context"
	"testing"

	"github.com/sundial-go/sundial/kernel/internal/observe"
	"github.com/sundial-go/sundial/pipeline"
)

// TestTransportAttributes: server.port comes from the Host or, without a
// port there, from the scheme (443 for https, 80 for http); a Transport
// without a Status answers 200 (HTTP) or OK (gRPC) for a success and 500
// or INTERNAL for a failure; the zero Transport adds no convention
// attribute.
func TestTransportAttributes(t *testing.T) {
	for _, tc := range []struct {
		name string
		tr   *observe.Transport
		err  error
		want map[string]string
		none []string
	}{
		{"https without a port", &observe.Transport{Method: "GET", Scheme: "https", Host: "shop.example"}, nil,
			map[string]string{"server.address": "shop.example", "server.port": "443", "http.response.status_code": "200"}, []string{"error.type"}},
		{"http with a port", &observe.Transport{Method: "GET", Scheme: "http", Host: "[::1]:8080"}, pipeline.NewError(pipeline.KindUnexpected, "X_001", "x"),
			map[string]string{"server.address": "::1", "server.port": "8080", "http.response.status_code": "500", "error.type": "500"}, nil},
		{"http without a port", &observe.Transport{Method: "GET", Scheme: "http", Host: "shop.example"}, nil,
			map[string]string{"server.port": "80"}, nil},
		{"grpc failure without Status", &observe.Transport{RPCMethod: "/a.v1.S/M"}, pipeline.NewError(pipeline.KindUnexpected, "X_001", "x"),
			map[string]string{"rpc.method": "a.v1.S/M", "rpc.service": "a.v1.S", "rpc.response.status_code": "INTERNAL", "rpc.grpc.status_code": "13", "error.type": "INTERNAL"}, nil},
		{"zero", &observe.Transport{}, nil, nil,
			[]string{"http.request.method", "http.response.status_code", "rpc.system.name", "rpc.method", "error.type", "server.port"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			o := h.tel.Operation(op("test.op"))
			_, c := o.StartTransport(context.Background(), httpInv("test.op", 0), t0, tc.tr)
			c.End(tc.err, t0)
			a := spanAttrs(h.onlySpan(t))
			for k, v := range tc.want {
				if a[k] != v {
					t.Errorf("%s = %q, want %q (span %v)", k, a[k], v, a)
				}
			}
			for _, k := range tc.none {
				if v, ok := a[k]; ok {
					t.Errorf("%s = %q, want it absent", k, v)
				}
			}
		})
	}
}
