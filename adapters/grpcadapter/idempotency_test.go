package grpcadapter_test

import (
	"context"
	"errors"
	"io"
	"math"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sundial-go/sundial/adapters/grpcadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// TestInterceptorRefusesKeys: an application's own gRPC method runs
// under a keyed operation (here by the naming convention: Work/Limited ->
// work.limited); its answers (a protobuf message, a status with details
// of its own, a stream) cannot be replayed, so a call with a key — in its
// metadata or passed on as baggage — is refused with InvalidArgument
// KERNEL_VALIDATION_006 and runs nothing, unary and streaming, while a
// call without one runs as before (was: a unary replay was Internal,
// marked replayed; a stream with another request got no message, marked
// replayed).
func TestInterceptorRefusesKeys(t *testing.T) {
	var streams atomic.Int64
	stream := &grpc.ServiceDesc{
		ServiceName: "other.v1.Work",
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{StreamName: "Limited", ServerStreams: true,
			Handler: func(_ any, ss grpc.ServerStream) error {
				streams.Add(1)
				return ss.SendMsg(wrapperspb.String("streamed"))
			}}},
	}
	h, _ := newAcmeHarnessOpt(t, harnessOpt{
		kernel: []kernel.Option{kernel.WithConfigJSON([]byte(`{"Sundial":{"Kernel":{"Resilience":{"Operations":{
			"work.limited":{"Idempotency":{}}, "work.capped":{"TimeoutSeconds":0.2}}}}}}`))},
	})
	// The acme harness registers its services; add the stream's.
	h2 := newHarness(t, harnessOpt{
		kernel:   []kernel.Option{kernel.WithConfigJSON([]byte(`{"Sundial":{"Kernel":{"Resilience":{"Operations":{"work.limited":{"Idempotency":{}}}}}}}`))},
		services: func(s *grpc.Server) { s.RegisterService(stream, struct{}{}) },
	})
	if out, err := invokeAcme(t.Context(), h, "Limited"); err != nil || out.GetValue() != "echo: hi" {
		t.Fatalf("without a key: %v, %v; want echo: hi", out, err)
	}
	refused := func(what string, err error) {
		t.Helper()
		st := status.Convert(err)
		if st.Code() != codes.InvalidArgument || errorInfo(t, st).GetReason() != "KERNEL_VALIDATION_006" {
			t.Fatalf("%s: %v, want InvalidArgument %s", what, st, "KERNEL_VALIDATION_006")
		}
	}
	keyed := metadata.AppendToOutgoingContext(t.Context(), "idempotency-key", "k1")
	bagged := metadata.AppendToOutgoingContext(t.Context(), "baggage", "sundial.idempotency-key=upstream-k1")
	for range 2 {
		_, err := invokeAcme(keyed, h, "Limited")
		refused("unary with a key", err)
		_, err = invokeAcme(bagged, h, "Limited")
		refused("unary with a key in baggage", err)
	}
	cs, err := h2.conn.NewStream(keyed, &grpc.StreamDesc{ServerStreams: true}, "/other.v1.Work/Limited")
	if err != nil {
		t.Fatal(err)
	}
	_ = cs.CloseSend()
	err = cs.RecvMsg(new(wrapperspb.StringValue))
	if errors.Is(err, io.EOF) || err == nil {
		t.Fatalf("stream with a key: %v, want InvalidArgument", err)
	}
	refused("stream with a key", err)
	if n := streams.Load(); n != 0 {
		t.Fatalf("the stream's handler ran %d times", n)
	}
}

// TestInterceptorRequiredKeyRefused: on an operation that requires keys,
// an application's own method cannot be served at all, and says why.
func TestInterceptorRequiredKeyRefused(t *testing.T) {
	h, _ := newAcmeHarnessOpt(t, harnessOpt{
		kernel: []kernel.Option{kernel.WithConfigJSON([]byte(`{"Sundial":{"Kernel":{"Resilience":{"Operations":{
			"work.limited":{"Idempotency":{"Required":true}}, "work.capped":{"TimeoutSeconds":0.2}}}}}}`))},
	})
	_, err := invokeAcme(t.Context(), h, "Limited")
	if st := status.Convert(err); errorInfo(t, st).GetReason() != "KERNEL_VALIDATION_006" {
		t.Fatalf("required key, application method, no key: %v, want %s", st, "KERNEL_VALIDATION_006")
	}
}

// TestMethodOperationsRefusesKeyedOperation: mapping an application's
// method explicitly to an operation that takes keys is refused at start-up,
// naming both, rather than refusing its keyed calls one by one.
func TestMethodOperationsRefusesKeyedOperation(t *testing.T) {
	reg := operations.NewRegistry()
	newTestApp().register(t, reg)
	k, err := kernel.New(kernel.WithRegistry(reg),
		kernel.WithConfigJSON([]byte(`{"Sundial":{"Kernel":{"Resilience":{"Operations":{"work.run":{"Idempotency":{}}}}}}}`)))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	_, err = grpcadapter.New(k, grpcadapter.WithMethodOperations(map[string]string{"/acme.v1.Work/Echo": "work.run"}))
	if err == nil || !strings.Contains(err.Error(), "/acme.v1.Work/Echo") || !strings.Contains(err.Error(), "idempotency") {
		t.Fatalf("New = %v, want an error naming the method and idempotency keys", err)
	}
}

type floatAmount struct {
	Amount float64 `json:"amount"`
}

// payHarness serves pay.charge (keys on) whose handler h runs.
func payHarness(t *testing.T, handler func(context.Context, floatAmount) (floatAmount, error)) *harness {
	return newHarness(t, harnessOpt{
		register: func(tb testing.TB, reg *operations.Registry) {
			if err := operations.Register(reg, operations.Descriptor{ID: "pay.charge"}, handler); err != nil {
				tb.Fatal(err)
			}
		},
		kernel: []kernel.Option{kernel.WithConfigJSON([]byte(`{"Sundial":{"Kernel":{"Resilience":{"Operations":{"pay.charge":{"Idempotency":{}}}}}}}`))},
	})
}

// TestNonFiniteInputWithKeyIsValidation: a NaN (which gRPC's double and
// the CLI's float flags carry, JSON does not) on a keyed call cannot be
// fingerprinted: InvalidArgument naming the cause, not Internal (was: a
// 500 counted by the breaker); without a key it runs.
func TestNonFiniteInputWithKeyIsValidation(t *testing.T) {
	var runs atomic.Int64
	h := payHarness(t, func(_ context.Context, in floatAmount) (floatAmount, error) { runs.Add(1); return in, nil })
	if _, st := h.call(t.Context(), t, "/test.v1.Pay/Charge", `{"amount":"NaN"}`); st != nil {
		t.Fatalf("NaN without a key: %v, want it to run", st)
	}
	ctx := metadata.AppendToOutgoingContext(t.Context(), "idempotency-key", "k1")
	_, st := h.call(ctx, t, "/test.v1.Pay/Charge", `{"amount":"Infinity"}`)
	if st.Code() != codes.InvalidArgument || errorInfo(t, st).GetReason() != pipeline.CodeValidation {
		t.Fatalf("Infinity with a key: %v, want InvalidArgument %s", st, pipeline.CodeValidation)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1 (the call without a key)", n)
	}
}

// TestOutputWithoutJSONFormIsNotReplayedAsFailure: a success whose output
// JSON cannot carry (a NaN) is not kept; the retry is told the call ran
// (AlreadyExists KERNEL_CONFLICT_002), never an Internal error for a call
// that succeeded, and the handler ran once.
func TestOutputWithoutJSONFormIsNotReplayedAsFailure(t *testing.T) {
	var runs atomic.Int64
	h := payHarness(t, func(context.Context, floatAmount) (floatAmount, error) {
		runs.Add(1)
		return floatAmount{Amount: math.NaN()}, nil
	})
	ctx := metadata.AppendToOutgoingContext(t.Context(), "idempotency-key", "k1")
	if _, st := h.call(ctx, t, "/test.v1.Pay/Charge", `{"amount":1}`); st != nil {
		t.Fatalf("first call: %v, want success", st)
	}
	_, st := h.call(ctx, t, "/test.v1.Pay/Charge", `{"amount":1}`)
	if st.Code() != codes.AlreadyExists || errorInfo(t, st).GetReason() != "KERNEL_CONFLICT_002" {
		t.Fatalf("retry: %v, want AlreadyExists %s", st, "KERNEL_CONFLICT_002")
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}
