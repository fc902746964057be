package systemtest

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/sundial-go/sundial/adapters/grpcadapter"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/samples/shop/internal/shopcmd"
)

// connectCaller calls the shop's operations over its HTTP port with
// connect-go's client: the Connect protocol (binary protobuf), or
// gRPC-Web. The descriptors come from the gRPC listener's reflection.
type connectCaller struct {
	g   *grpcShop
	web bool
	hc  *http.Client
}

func newConnectCaller(t *testing.T, env *shopEnv, web bool) *connectCaller {
	g := startShopGRPC(t, shopcmd.ServeOptions{KernelOptions: env.kernelOptions()})
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &connectCaller{g: g, web: web, hc: &http.Client{Transport: tr}}
}

func (c *connectCaller) started() <-chan string { return c.g.probe.started }

func (c *connectCaller) statusFor(k pipeline.Kind) string {
	return connect.Code(grpcadapter.CodeFor(k)).String()
}

func (c *connectCaller) access() accessLog {
	return accessLog{shopLogs: c.g.logs, msg: "connect call", traceKey: "traceId"}
}

func (c *connectCaller) do(t *testing.T, op, input string, timeout time.Duration) answer {
	t.Helper()
	ctx := t.Context()
	if timeout > 0 {
		// As the gRPC caller: the deadline is sent, and the server ends
		// the call.
		ctx = patientContext{ctx, time.Now().Add(timeout)}
	}
	service, method := operations.GRPCNames(op)
	service = shopcmd.GRPCPackage + "." + service
	md := c.g.files.method(t, service, method)
	init := func(_ connect.Spec, x any) error {
		if m, ok := x.(*dynamicpb.Message); ok {
			*m = *dynamicpb.NewMessage(md.Output())
		}
		return nil
	}
	opts := []connect.ClientOption{connect.WithSchema(md), connect.WithResponseInitializer(init)}
	if c.web {
		opts = append(opts, connect.WithGRPCWeb())
	}
	client := connect.NewClient[dynamicpb.Message, dynamicpb.Message](c.hc, c.g.url+"/"+service+"/"+method, opts...)
	log := c.access()
	n := len(log.records())
	start := time.Now()
	_, err := client.CallUnary(ctx, connect.NewRequest(requestMessage(t, md, input)))
	a := answer{code: "OK", status: "ok", elapsed: time.Since(start)}
	if err != nil {
		c.failure(t, op, err, &a)
	}
	var ok bool
	if a.access, ok = log.after(n, func(r pipelinetest.Record) bool { return r.Attrs["operation"] == op }); !ok {
		t.Errorf("%s over %s: no call record:\n%s", op, c.name(), c.g.logs)
	}
	return a
}

func (c *connectCaller) name() string {
	if c.web {
		return "gRPC-Web"
	}
	return "Connect"
}

// failure reads the outcome code, the status and the trace ID of a
// failed call into a, failing t when the code is not the outcome kind's.
func (c *connectCaller) failure(t *testing.T, op string, err error, a *answer) {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) {
		t.Errorf("%s over %s: %v, want a Connect error", op, c.name(), err)
		return
	}
	a.status = ce.Code().String()
	a.traceID, a.problem = ce.Meta().Get("Sundial-Trace-Id"), true
	for _, d := range ce.Details() {
		if v, err := d.Value(); err == nil {
			if ei, ok := v.(*errdetails.ErrorInfo); ok {
				a.code = ei.GetReason()
			}
		}
	}
	if kind, ok := kindOfCode(a.code); !ok || c.statusFor(kind) != a.status {
		t.Errorf("%s over %s: %s for outcome %q", op, c.name(), a.status, a.code)
	}
}

func (c *connectCaller) early(t *testing.T) map[string]answer {
	t.Helper()
	// A request that is not protobuf and an unknown method are the
	// adapter's rejections, observed by the kernel. A malformed timeout is
	// connect-go's answer, before any operation: it has no record.
	ctype, body := "application/proto", []byte{0xff, 0xff, 0xff}
	if c.web {
		ctype, body = "application/grpc-web+proto", append([]byte{0, 0, 0, 0, 3}, body...)
	}
	out := map[string]answer{}
	for _, tc := range []struct{ name, method string }{
		{"request that is not protobuf", "/shop.v1.Orders/Create"},
		{"unknown method", "/shop.v1.Orders/Nope"},
	} {
		log := c.access()
		n := len(log.records())
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.g.url+tc.method, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", ctype)
		res, err := c.hc.Do(req)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		a := answer{status: res.Status}
		var ok bool
		if a.access, ok = log.after(n, func(r pipelinetest.Record) bool { return r.Attrs["method"] == tc.method }); !ok {
			t.Errorf("%s left no call record:\n%s", tc.name, c.g.logs)
		}
		a.code, _ = a.access.Attrs["code"].(string)
		out[tc.name] = a
	}
	return out
}
