package connectadapter_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/propagation"

	"github.com/sundial-go/sundial/adapters/connectadapter"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// TestDomainOverConnect: a failed call's ErrorInfo has the domain
// WithDomain gives, and "sundial" without it.
func TestDomainOverConnect(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []connectadapter.Option
		want string
	}{
		{"default", nil, "sundial"},
		{"empty keeps the default", []connectadapter.Option{connectadapter.WithDomain("")}, "sundial"},
		{"WithDomain", []connectadapter.Option{connectadapter.WithDomain("shop.example.com")}, "shop.example.com"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, tc.opts...)
			a := post(t, httpClient(t, false), s.url+"/test.v1.Work/Fail", `{}`, nil)
			if a.err.Code != "unavailable" || a.err.reason() != "APP_UNAVAILABLE_001" || a.err.errorInfo().Domain != tc.want {
				t.Errorf("answer %d %s; want unavailable APP_UNAVAILABLE_001 in domain %s", a.status, a.body, tc.want)
			}
		})
	}
}

// TestBaggageLimitOverConnect: a baggage header over WithBaggageLimit is
// dropped whole, with a warning, and the call goes on; the same header
// within the default limit reaches the handler.
func TestBaggageLimitOverConnect(t *testing.T) {
	const bag = "tenant=acme,user=someone-long" // 29 bytes
	for _, tc := range []struct {
		name   string
		opts   []connectadapter.Option
		tenant string
	}{
		{"default", nil, "acme"},
		{"WithBaggageLimit", []connectadapter.Option{connectadapter.WithBaggageLimit(16)}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, tc.opts...)
			a := post(t, httpClient(t, false), s.url+"/test.v1.Work/Run", `{}`, map[string]string{"Baggage": bag})
			if a.status != http.StatusOK {
				t.Fatalf("answer %d %s, want 200", a.status, a.body)
			}
			var out workOut
			if err := json.Unmarshal([]byte(a.body), &out); err != nil || out.Baggage != tc.tenant {
				t.Fatalf("body %s (%v): the handler saw tenant %q, want %q", a.body, err, out.Baggage, tc.tenant)
			}
			if tc.tenant == "" {
				waitLog(t, s, "grpcadapter: baggage metadata dropped", "operation=work.run", "bytes=29", "limit=16")
			}
		})
	}
}

// TestPropagatorOverConnect: by default the call's trace continues the
// caller's traceparent. WithPropagator(nil) extracts no trace context,
// and the baggage is still read.
func TestPropagatorOverConnect(t *testing.T) {
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	for _, tc := range []struct {
		name      string
		opts      []connectadapter.Option
		continued bool
	}{
		{"default", nil, true},
		{"WithPropagator(TraceContext)", []connectadapter.Option{connectadapter.WithPropagator(propagation.TraceContext{})}, true},
		{"WithPropagator(nil)", []connectadapter.Option{connectadapter.WithPropagator(nil)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, tc.opts...)
			a := post(t, httpClient(t, false), s.url+"/test.v1.Work/Run", `{}`, map[string]string{
				"Traceparent": "00-" + traceID + "-00f067aa0ba902b7-01", "Baggage": "tenant=acme"})
			var out workOut
			if err := json.Unmarshal([]byte(a.body), &out); a.status != http.StatusOK || err != nil || out.Baggage != "acme" {
				t.Fatalf("answer %d %s; want 200 with tenant acme", a.status, a.body)
			}
			r := waitLog(t, s, "connect call", "operation=work.run")
			if got := r.Attrs["traceId"]; (got == traceID) != tc.continued {
				t.Errorf("traceId %v; continues the caller's trace %s: %v, want %v", got, traceID, got == traceID, tc.continued)
			}
		})
	}
}

// TestDeadlineToleranceOverConnect: a caller that gives up long before its
// deadline is CANCELLED. With WithDeadlineTolerance longer than the
// deadline, the same cancellation counts as the deadline: TIMEOUT.
func TestDeadlineToleranceOverConnect(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []connectadapter.Option
		code string
	}{
		{"default", nil, pipeline.CodeCanceled},
		{"WithDeadlineTolerance", []connectadapter.Option{connectadapter.WithDeadlineTolerance(time.Hour)}, pipeline.CodeTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			started := make(chan struct{}, 1)
			s := startServer(t, func(t testing.TB, reg *operations.Registry) {
				err := operations.Register(reg, operations.Descriptor{ID: "hold.wait"},
					func(ctx context.Context, _ workIn) (workOut, error) {
						started <- struct{}{}
						<-ctx.Done()
						return workOut{}, ctx.Err()
					})
				if err != nil {
					t.Fatal(err)
				}
			}, `{"Sundial":{"Kernel":{"MaxTimeoutSeconds":60}}}`, tc.opts...)
			c := s.client(t, httpClient(t, true), "/test.v1.Hold/Wait")
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := c.CallUnary(ctx, s.request(t, "/test.v1.Hold/Wait", `{}`))
				done <- err
			}()
			<-started
			cancel()
			if err := <-done; connect.CodeOf(err) != connect.CodeCanceled || !errors.Is(err, context.Canceled) {
				t.Errorf("the client's call: %v, want its own cancellation", err)
			}
			waitLog(t, s, "connect call", "operation=hold.wait", "code="+tc.code)
		})
	}
}
