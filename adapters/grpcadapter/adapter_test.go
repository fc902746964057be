package grpcadapter_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sundial-go/sundial/adapters/grpcadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/kernel/propagation"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
)

func errorInfo(t *testing.T, st *status.Status) *errdetails.ErrorInfo {
	t.Helper()
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei
		}
	}
	t.Fatalf("status %v has no ErrorInfo (details %v)", st, st.Details())
	return nil
}

func retryInfo(st *status.Status) *errdetails.RetryInfo {
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri
		}
	}
	return nil
}

func TestMethodNames(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpt{register: func(t testing.TB, reg *operations.Registry) {
		handler := func(context.Context, struct{}) (struct{}, error) { return struct{}{}, nil }
		for _, d := range []operations.Descriptor{
			{ID: "inventory.v2.reserve"},
			{ID: "inventory.export-csv"},
			{ID: "billing.refund", GRPCService: "Payments", GRPCMethod: "Give"},
			{ID: "billing.void", GRPCService: "acme.pay.v3.Payments"},
		} {
			if err := operations.Register(reg, d, handler); err != nil {
				t.Fatal(err)
			}
		}
	}})
	want := map[string]string{
		"/test.v1.Work/Run":            "work.run",
		"/test.v1.Work/Capped":         "work.capped",
		"/test.v1.Inventory/V2Reserve": "inventory.v2.reserve",
		"/test.v1.Inventory/ExportCsv": "inventory.export-csv",
		"/test.v1.Payments/Give":       "billing.refund",
		"/acme.pay.v3.Payments/Void":   "billing.void",
		"/test.v1.Work/Fail":           "work.fail",
		"/test.v1.Work/Limited":        "work.limited",
		"/test.v1.Work/Tiny":           "work.tiny",
		"/test.v1.Work/Baggage":        "work.baggage",
		"/test.v1.Work/Labels":         "work.labels",
	}
	got := map[string]string{}
	for _, m := range h.adapter.Methods() {
		got[m.FullName] = m.OperationID
	}
	for full, id := range want {
		if got[full] != id {
			t.Errorf("Methods()[%s] = %q, want %q", full, got[full], id)
		}
	}
	if len(got) != len(want) {
		t.Errorf("Methods() has %d methods, want %d: %v", len(got), len(want), got)
	}
	wantSvcs := "acme.pay.v3.Payments test.v1.Inventory test.v1.Payments test.v1.Work"
	if got := strings.Join(h.adapter.ServiceNames(), " "); got != wantSvcs {
		t.Errorf("ServiceNames() = %s, want %s", got, wantSvcs)
	}
	// The override in another package is callable too.
	if _, st := h.call(t.Context(), t, "/acme.pay.v3.Payments/Void", `{}`); st != nil {
		t.Errorf("/acme.pay.v3.Payments/Void = %v, want OK", st)
	}
}

func TestNewRejects(t *testing.T) {
	t.Parallel()
	ok := func(context.Context, struct{}) (struct{}, error) { return struct{}{}, nil }
	tests := []struct {
		name string
		reg  func(*operations.Registry) error
		opts []grpcadapter.Option
		want string
	}{
		{"bad package", nil, []grpcadapter.Option{grpcadapter.WithPackage("shop..v1")}, `WithPackage("shop..v1")`},
		{"two operations one method", func(r *operations.Registry) error {
			if err := operations.Register(r, operations.Descriptor{ID: "a.x", GRPCService: "S", GRPCMethod: "M"}, ok); err != nil {
				return err
			}
			return operations.Register(r, operations.Descriptor{ID: "b.y", GRPCService: "S", GRPCMethod: "M"}, ok)
		}, nil, `operations "a.x" and "b.y" both map to method /sundial.v1.S/M`},
		{"bad method override", func(r *operations.Registry) error {
			return operations.Register(r, operations.Descriptor{ID: "a.x", GRPCMethod: "do-it"}, ok)
		}, nil, `operation "a.x": method name "do-it"`},
		{"unsupported field", func(r *operations.Registry) error {
			return operations.Register(r, operations.Descriptor{ID: "a.x"}, func(context.Context, struct{ C chan int }) (struct{}, error) {
				return struct{}{}, nil
			})
		}, nil, `operation "a.x" input field XRequest.C: type chan int is not supported`},
		{"non-struct output", func(r *operations.Registry) error {
			return operations.Register(r, operations.Descriptor{ID: "a.x"}, func(context.Context, struct{}) ([]string, error) { return nil, nil })
		}, nil, `operation "a.x" output: type []string is not a struct`},
		{"unknown mapped operation", nil, []grpcadapter.Option{grpcadapter.WithMethodOperations(map[string]string{"/acme.v1.S/M": "no.such"})},
			`method /acme.v1.S/M: operation "no.such" is not registered`},
		{"service named like a message", func(r *operations.Registry) error {
			return operations.Register(r, operations.Descriptor{ID: "work-in.make"}, func(context.Context, struct{ W workIn }) (struct{}, error) { return struct{}{}, nil })
		}, nil, "service sundial.v1.WorkIn has the name of the message built from Go type grpcadapter_test.workIn"},
		{"field type named like a request", func(r *operations.Registry) error {
			return operations.Register(r, operations.Descriptor{ID: "a.x"}, func(context.Context, struct{ R xRequest }) (struct{}, error) { return struct{}{}, nil })
		}, nil, "message sundial.v1.XRequest, built from Go type grpcadapter_test.xRequest, has the name of the request or response message of a method"},
		{"method named like a message", func(r *operations.Registry) error {
			in := func(context.Context, workIn) (struct{}, error) { return struct{}{}, nil }
			if err := operations.Register(r, operations.Descriptor{ID: "a.x"}, in); err != nil {
				return err
			}
			return operations.Register(r, operations.Descriptor{ID: "a.x-request"}, in)
		}, nil, "service sundial.v1.A has a method XRequest named like the message sundial.v1.XRequest of method /sundial.v1.A/X"},
		{"malformed mapped method", nil, []grpcadapter.Option{grpcadapter.WithMethodOperations(map[string]string{"acme.v1.S.M": "no.such"})},
			`"acme.v1.S.M" is not a full method name`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			reg := operations.NewRegistry()
			if tt.reg != nil {
				if err := tt.reg(reg); err != nil {
					t.Fatal(err)
				}
			}
			k, err := kernel.New(kernel.WithRegistry(reg))
			if err != nil {
				t.Fatal(err)
			}
			_, err = grpcadapter.New(k, tt.opts...)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "grpcadapter: ") {
				t.Errorf("New() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestCallOK(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpt{})
	out, st := h.call(t.Context(), t, "/test.v1.Work/Run", `{"delayMs": 1}`)
	if st != nil {
		t.Fatalf("Run = %v, want OK", st)
	}
	// protojson writes int64 as a string.
	if out != `{"rows":"1"}` {
		t.Errorf("Run = %s, want {\"rows\":\"1\"}", out)
	}
	h.waitLog(t, "grpc call", "operation=work.run", "method=/test.v1.Work/Run", "grpcCode=OK", "code=", "level=INFO")
}

// TestStatusOverTheWire checks every failure kind as the client sees it.
func TestStatusOverTheWire(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpt{})
	tests := []struct {
		kind  string
		code  codes.Code
		retry int
	}{
		{"VALIDATION", codes.InvalidArgument, 0},
		{"UNAUTHENTICATED", codes.Unauthenticated, 0},
		{"FORBIDDEN", codes.PermissionDenied, 0},
		{"NOT_FOUND", codes.NotFound, 0},
		{"CONFLICT", codes.AlreadyExists, 0},
		{"UNAVAILABLE", codes.Unavailable, 7},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			req := `{"kind":"` + tt.kind + `","code":"TEST_` + tt.kind + `_001","message":"it failed","retry":` + string(rune('0'+tt.retry)) + `}`
			_, st := h.call(t.Context(), t, "/test.v1.Work/Fail", req)
			if st.Code() != tt.code || st.Message() != "it failed" {
				t.Fatalf("Fail(%s) = %v %q, want %v %q", tt.kind, st.Code(), st.Message(), tt.code, "it failed")
			}
			ei := errorInfo(t, st)
			if ei.GetReason() != "TEST_"+tt.kind+"_001" || ei.GetDomain() != "sundial" || ei.GetMetadata()["id"] != "work.fail" {
				t.Errorf("Fail(%s) ErrorInfo = %v, want reason TEST_%s_001, domain sundial, metadata id=work.fail", tt.kind, ei, tt.kind)
			}
			ri := retryInfo(st)
			switch {
			case tt.retry == 0 && ri != nil:
				t.Errorf("Fail(%s) RetryInfo = %v, want none", tt.kind, ri)
			case tt.retry > 0 && (ri == nil || ri.GetRetryDelay().AsDuration() != time.Duration(tt.retry)*time.Second):
				t.Errorf("Fail(%s) RetryInfo = %v, want %ds", tt.kind, ri, tt.retry)
			case tt.retry > 0 && ei.GetMetadata()["retryAfter"] != "7":
				t.Errorf("Fail(%s) ErrorInfo metadata retryAfter = %q, want 7", tt.kind, ei.GetMetadata()["retryAfter"])
			}
		})
	}
}

func TestUnexpectedNeverLeaks(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpt{})
	for _, kind := range []string{"PANIC", "PLAIN"} {
		t.Run(kind, func(t *testing.T) {
			_, st := h.call(t.Context(), t, "/test.v1.Work/Fail", `{"kind":"`+kind+`"}`)
			if st.Code() != codes.Internal || st.Message() != pipeline.UnexpectedMessage {
				t.Fatalf("Fail(%s) = %v %q, want Internal %q", kind, st.Code(), st.Message(), pipeline.UnexpectedMessage)
			}
			ei := errorInfo(t, st)
			if ei.GetReason() != pipeline.CodeUnexpected || len(ei.GetMetadata()) != 0 {
				t.Errorf("Fail(%s) ErrorInfo = %v, want reason %s and no metadata", kind, ei, pipeline.CodeUnexpected)
			}
			if raw := st.Proto().String(); strings.Contains(raw, "secret") {
				t.Errorf("Fail(%s) status leaks internal text: %s", kind, raw)
			}
		})
	}
	h.waitLog(t, "grpc call", "level=ERROR", "code=KERNEL_UNEXPECTED_001", "error~refused")
}

func TestRateLimitedCallCarriesRetryInfo(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpt{})
	if _, st := h.call(t.Context(), t, "/test.v1.Work/Limited", `{}`); st != nil {
		t.Fatalf("first Limited = %v, want OK", st)
	}
	_, st := h.call(t.Context(), t, "/test.v1.Work/Limited", `{}`)
	if st.Code() != codes.Unavailable {
		t.Fatalf("second Limited = %v, want Unavailable", st)
	}
	if ei := errorInfo(t, st); ei.GetReason() != resilience.CodeRateLimited || ei.GetMetadata()["id"] != "work.limited" {
		t.Errorf("second Limited ErrorInfo = %v, want reason %s, id work.limited", ei, resilience.CodeRateLimited)
	}
	if ri := retryInfo(st); ri == nil || ri.GetRetryDelay().AsDuration() < time.Second || ri.GetRetryDelay().AsDuration() > 60*time.Second {
		t.Errorf("second Limited RetryInfo = %v, want between 1s and 60s", ri)
	}
}

func TestDeadlineFromGRPCTimeout(t *testing.T) {
	t.Parallel()
	inBubble(t, testDeadlineFromGRPCTimeout)
}

func testDeadlineFromGRPCTimeout(t *testing.T) {
	h := newHarness(t, harnessOpt{})
	ctx, cancel := context.WithTimeout(t.Context(), 150*time.Millisecond)
	defer cancel()
	clientDeadline, _ := ctx.Deadline()
	start := time.Now()
	_, st := h.call(ctx, t, "/test.v1.Work/Run", `{"delayMs": 2000}`)
	if st.Code() != codes.DeadlineExceeded {
		t.Fatalf("Run(2s) with a 150ms deadline = %v, want DeadlineExceeded", st)
	}
	select {
	case ended := <-h.app.ctxDone:
		if d := ended.Sub(start); d != 150*time.Millisecond {
			t.Errorf("handler context ended %v after the call, want 150ms", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the handler's context never ended")
	}
	h.app.mu.Lock()
	seen := h.app.deadlines[0]
	h.app.mu.Unlock()
	if diff := seen.Sub(clientDeadline); diff != 0 {
		t.Errorf("handler deadline = client deadline %+v, want the client's", diff)
	}
	// The server attributes the call to the deadline, not to the client's
	// cancellation that races it.
	h.waitLog(t, "grpc call", "operation=work.run", "grpcCode=DeadlineExceeded", "code=KERNEL_TIMEOUT_001")
}

func TestTimeoutSecondsCapsInboundDeadline(t *testing.T) {
	t.Parallel()
	inBubble(t, testTimeoutSecondsCapsInboundDeadline)
}

func testTimeoutSecondsCapsInboundDeadline(t *testing.T) {
	h := newHarness(t, harnessOpt{})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	start := time.Now()
	_, st := h.call(ctx, t, "/test.v1.Work/Capped", `{"delayMs": 5000}`)
	took := time.Since(start)
	if st.Code() != codes.DeadlineExceeded || errorInfo(t, st).GetReason() != pipeline.CodeTimeout {
		t.Fatalf("Capped(5s) = %v, want DeadlineExceeded from the server (KERNEL_TIMEOUT_001)", st)
	}
	if took != 200*time.Millisecond {
		t.Errorf("Capped(5s) returned after %v, want TimeoutSeconds = 200ms", took)
	}
}

func TestClientCancelIsCancelled(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpt{})
	for _, withDeadline := range []bool{false, true} {
		ctx, cancel := context.WithCancel(t.Context())
		if withDeadline {
			ctx, cancel = context.WithTimeout(t.Context(), 10*time.Second)
		}
		go func() {
			<-h.app.started
			cancel()
		}()
		_, st := h.call(ctx, t, "/test.v1.Work/Run", `{"delayMs": 5000}`)
		if st.Code() != codes.Canceled {
			t.Fatalf("Run cancelled by the client (deadline %v) = %v, want Canceled", withDeadline, st)
		}
		select {
		case <-h.app.ctxDone:
		case <-time.After(5 * time.Second):
			t.Fatal("the handler's context never ended")
		}
		h.waitLog(t, "grpc call", "operation=work.run", "grpcCode=Canceled", "code=KERNEL_CANCELLED_001")
	}
}

func TestOverflowIsValidation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpt{})
	_, st := h.call(t.Context(), t, "/test.v1.Work/Tiny", `{"n": 300}`)
	if st.Code() != codes.InvalidArgument {
		t.Fatalf("Tiny(300) = %v, want InvalidArgument", st)
	}
	ei := errorInfo(t, st)
	if ei.GetReason() != pipeline.CodeValidation || ei.GetMetadata()["field"] != "n" || !strings.Contains(st.Message(), "overflows int8") {
		t.Errorf("Tiny(300) = %q %v, want KERNEL_VALIDATION_001 naming field n", st.Message(), ei)
	}
	if out, st := h.call(t.Context(), t, "/test.v1.Work/Tiny", `{"n": -128}`); st != nil || out != `{"n":-128}` {
		t.Errorf("Tiny(-128) = %s %v, want {\"n\":-128}", out, st)
	}
}

func TestBaggageFromMetadata(t *testing.T) {
	t.Parallel()
	seen := make(chan map[string]string, 1)
	capture := pipeline.MiddlewareFunc(func(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
		if inv.OperationID() == "work.baggage" {
			m := map[string]string{}
			inv.RangeBaggage(func(k, v string) bool { m[k] = v; return true })
			m["protocol"] = inv.Protocol().String()
			m["route"] = inv.Route()
			m["key"] = inv.IdempotencyKey()
			m["ctx"] = propagation.IdempotencyKey(ctx)
			seen <- m
		}
		return next(ctx, inv)
	})
	h := newHarness(t, harnessOpt{kernel: []kernel.Option{kernel.UseAt(pipeline.StageHandle, capture)}})
	ctx := metadata.AppendToOutgoingContext(t.Context(), "baggage", "tenant=acme,user=u%201", "idempotency-key", "k-42")
	if _, st := h.call(ctx, t, "/test.v1.Work/Baggage", `{}`); st != nil {
		t.Fatalf("Baggage = %v, want OK", st)
	}
	got := <-seen
	want := map[string]string{"tenant": "acme", "user": "u 1", "protocol": "grpc", "route": "/test.v1.Work/Baggage", "key": "k-42", "ctx": "k-42"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("baggage[%q] = %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
}

// TestBaggageOverTheLimit checks that baggage metadata over
// WithBaggageLimit is dropped whole, with a warning, and that the call and
// its idempotency key go on.
func TestBaggageOverTheLimit(t *testing.T) {
	t.Parallel()
	seen := make(chan *pipeline.Invocation, 1)
	capture := pipeline.MiddlewareFunc(func(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
		if inv.OperationID() == "work.baggage" {
			seen <- inv
		}
		return next(ctx, inv)
	})
	h := newHarness(t, harnessOpt{
		kernel:  []kernel.Option{kernel.UseAt(pipeline.StageHandle, capture)},
		adapter: []grpcadapter.Option{grpcadapter.WithBaggageLimit(16)},
	})
	ctx := metadata.AppendToOutgoingContext(t.Context(), "baggage", "tenant=acme", "baggage", "user=someone-long", "idempotency-key", "k-7")
	if _, st := h.call(ctx, t, "/test.v1.Work/Baggage", `{}`); st != nil {
		t.Fatalf("Baggage = %v, want OK", st)
	}
	inv := <-seen
	if v, ok := inv.Baggage("tenant"); ok {
		t.Errorf("baggage tenant = %q, want the baggage dropped", v)
	}
	if got := inv.IdempotencyKey(); got != "k-7" {
		t.Errorf("idempotency key = %q, want k-7", got)
	}
	h.waitLog(t, "grpcadapter: baggage metadata dropped", "operation=work.baggage", "bytes=28", "limit=16", "level=WARN")
}

// TestMalformedRequest checks that a message that is not valid protobuf
// gets grpc-go's own answer (Internal: grpc-go writes the status before the
// adapter sees the error) and that the server goes on serving.
func TestMalformedRequest(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpt{})
	// A varint tag for field 1 without its value: truncated.
	err := h.conn.Invoke(t.Context(), "/test.v1.Work/Run", &rawBytes{0x08}, new(rawBytes), grpc.ForceCodec(rawCodec{}))
	if st := status.Convert(err); st.Code() != codes.Internal || !strings.Contains(st.Message(), "unmarshal") {
		t.Errorf("Run(malformed) = %v, want grpc-go's Internal unmarshal error", st)
	}
	h.waitLog(t, "grpc call", "operation=work.run", "grpcCode=Internal", "error~invalid wire-format")
	if _, st := h.call(t.Context(), t, "/test.v1.Work/Run", `{}`); st != nil {
		t.Errorf("Run after a malformed request = %v, want OK", st)
	}
}

// TestMalformedMapEntry sends a map entry whose key field repeats with
// another wire type, which makes protobuf-go's reflective decoder panic;
// the adapter answers InvalidArgument and the server lives on.
func TestMalformedMapEntry(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpt{})
	entry := []byte{0x0a, 0x01, 'a', 0x0d, 0, 0, 0, 0} // key "a", then key as fixed32
	req := rawBytes(append([]byte{0x0a, byte(len(entry))}, entry...))
	err := h.conn.Invoke(t.Context(), "/test.v1.Work/Labels", &req, new(rawBytes), grpc.ForceCodec(rawCodec{}))
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "malformed request message") {
		t.Errorf("Labels(malformed map entry) = %v, want InvalidArgument", st)
	}
	if out, st := h.call(t.Context(), t, "/test.v1.Work/Labels", `{"labels":{"a":1}}`); st != nil || out != `{"labels":{"a":"1"}}` {
		t.Errorf("Labels after a malformed request = %s %v, want {\"labels\":{\"a\":\"1\"}}", out, st)
	}
}

type rawBytes []byte

// rawCodec sends and receives bytes as they are, under the name "proto".
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*rawBytes), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	*v.(*rawBytes) = append(rawBytes(nil), b...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// BenchmarkUnaryCall measures one call of an operation over bufconn, from
// the client's Invoke to its return: grpc-go, the adapter's conversions,
// the kernel (no limits configured) and the handler.
func BenchmarkUnaryCall(b *testing.B) {
	h := newHarness(b, harnessOpt{adapter: []grpcadapter.Option{grpcadapter.WithLogger(slog.New(slog.DiscardHandler))}})
	m := h.method(b, "/test.v1.Work/Tiny")
	req := newMessage(m.Input)
	if err := protojson.Unmarshal([]byte(`{"n": 7}`), req); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := h.conn.Invoke(ctx, "/test.v1.Work/Tiny", req, newMessage(m.Output)); err != nil {
			b.Fatal(err)
		}
	}
}

type xRequest struct{ N int }

// TestMessageNames shows the request and response names: <Method>Request
// and <Method>Response, <Service><Method>… when two services have a method
// of that name, the GRPCMethod override followed, google.protobuf.Empty
// for struct{}, and a field's struct type named after the Go type.
func TestMessageNames(t *testing.T) {
	t.Parallel()
	reg := operations.NewRegistry()
	get := func(context.Context, workIn) (struct{ W workIn }, error) { return struct{ W workIn }{}, nil }
	for _, d := range []operations.Descriptor{{ID: "orders.get"}, {ID: "inventory.get"}, {ID: "billing.charge", GRPCMethod: "Pay"}} {
		if err := operations.Register(reg, d, get); err != nil {
			t.Fatal(err)
		}
	}
	if err := operations.Register(reg, operations.Descriptor{ID: "billing.ping"}, func(context.Context, struct{}) (struct{}, error) { return struct{}{}, nil }); err != nil {
		t.Fatal(err)
	}
	k, err := kernel.New(kernel.WithRegistry(reg))
	if err != nil {
		t.Fatal(err)
	}
	a, err := grpcadapter.New(k)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range a.Methods() {
		line := fmt.Sprintf("%s %s %s", m.FullName, m.Input.FullName(), m.Output.FullName())
		if w := m.Output.Fields().ByName("W"); w != nil {
			line += " " + string(w.Message().FullName())
		}
		got = append(got, line)
	}
	want := []string{
		"/sundial.v1.Billing/Pay sundial.v1.PayRequest sundial.v1.PayResponse sundial.v1.WorkIn",
		"/sundial.v1.Billing/Ping google.protobuf.Empty google.protobuf.Empty",
		"/sundial.v1.Inventory/Get sundial.v1.InventoryGetRequest sundial.v1.InventoryGetResponse sundial.v1.WorkIn",
		"/sundial.v1.Orders/Get sundial.v1.OrdersGetRequest sundial.v1.OrdersGetResponse sundial.v1.WorkIn",
	}
	if !slices.Equal(got, want) {
		t.Errorf("methods:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestMalformedKeyMetadata: a malformed idempotency-key entry (repeated,
// longer than 255 characters) is InvalidArgument KERNEL_VALIDATION_005 on
// an operation that takes keys, and nothing runs; an operation that does
// not ignores it — the call runs, without the key in its invocation or
// its context (not passed on as baggage) — while it still passes a
// well-formed key on.
func TestMalformedKeyMetadata(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 256)
	malformed := [][]string{{"idempotency-key", long}, {"idempotency-key", "k-1", "idempotency-key", "k-2"}}
	for _, enabled := range []bool{false, true} {
		seen := make(chan [2]string, 1)
		capture := pipeline.MiddlewareFunc(func(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
			if inv.OperationID() == "work.baggage" {
				seen <- [2]string{inv.IdempotencyKey(), propagation.IdempotencyKey(ctx)}
			}
			return next(ctx, inv)
		})
		kopts := []kernel.Option{kernel.UseAt(pipeline.StageHandle, capture)}
		if enabled {
			kopts = append(kopts, kernel.WithConfigJSON([]byte(`{"Sundial":{"Kernel":{"Resilience":{"Operations":{"work.baggage":{"Idempotency":{}}}}}}}`)))
		}
		h := newHarness(t, harnessOpt{kernel: kopts})
		for _, md := range malformed {
			ctx := metadata.AppendToOutgoingContext(t.Context(), md...)
			_, st := h.call(ctx, t, "/test.v1.Work/Baggage", `{}`)
			if enabled {
				if st == nil || st.Code() != codes.InvalidArgument || errorInfo(t, st).GetReason() != "KERNEL_VALIDATION_005" {
					t.Errorf("keys on, %d-byte metadata: %v, want InvalidArgument %s", len(strings.Join(md, "")), st, "KERNEL_VALIDATION_005")
				}
				select {
				case got := <-seen:
					t.Errorf("keys on, malformed key: the call ran (key %q)", got[0])
				default:
				}
				continue
			}
			if st != nil {
				t.Errorf("keys off, %d-byte metadata: %v, want OK (the malformed key ignored)", len(strings.Join(md, "")), st)
				continue
			}
			if got := <-seen; got != [2]string{} {
				t.Errorf("keys off, malformed key: invocation key %q, context key %q; want both empty (ignored)", got[0], got[1])
			}
		}
		ctx := metadata.AppendToOutgoingContext(t.Context(), "idempotency-key", "k-9")
		if _, st := h.call(ctx, t, "/test.v1.Work/Baggage", `{}`); st != nil {
			t.Fatalf("keys on %v, well-formed key: %v, want OK", enabled, st)
		}
		if got := <-seen; got != [2]string{"k-9", "k-9"} {
			t.Errorf("keys on %v, well-formed key: invocation/context key %q, want k-9 in both", enabled, got)
		}
	}
}
