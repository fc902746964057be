package grpcadapter_test

import (
	"context"
	"errors"
	"io"
	"math"
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
// under a keyed operation; its answers (a protobuf message, a status with
// details of its own) cannot be replayed, so a call with a key is refused
// with InvalidArgument KERNEL_VALIDATION_006 and runs nothing — unary and
// streaming — while a call without one runs as before (was: the replay
// of a unary call was Internal, marked replayed; a stream with another
// request got no message, marked replayed).
func TestInterceptorRefusesKeys(t *testing.T) {
	// The acme harness maps Watch to work.capped.
	keyed := `{"Sundial":{"Kernel":{"Resilience":{"Operations":{"work.run":{"Idempotency":{}},
		"work.capped":{"TimeoutSeconds":0.2,"Idempotency":{}}}}}}}`
	h, _ := newAcmeHarnessOpt(t, harnessOpt{
		kernel: []kernel.Option{kernel.WithConfigJSON([]byte(keyed))},
		adapter: []grpcadapter.Option{grpcadapter.WithMethodOperations(map[string]string{
			"/acme.v1.Work/Echo": "work.run", "/acme.v1.Work/Fail": "work.run"})},
	})
	if out, err := invokeAcme(t.Context(), h, "Echo"); err != nil || out.GetValue() != "echo: hi" {
		t.Fatalf("without a key: %v, %v; want echo: hi", out, err)
	}
	refused := func(what string, err error) {
		t.Helper()
		st := status.Convert(err)
		if st.Code() != codes.InvalidArgument || errorInfo(t, st).GetReason() != pipeline.CodeIdempotencyKeyUnsupported {
			t.Fatalf("%s with a key: %v, want InvalidArgument %s", what, st, pipeline.CodeIdempotencyKeyUnsupported)
		}
	}
	ctx := metadata.AppendToOutgoingContext(t.Context(), "idempotency-key", "k1")
	for range 2 {
		_, err := invokeAcme(ctx, h, "Echo")
		refused("unary", err)
		_, err = invokeAcme(ctx, h, "Fail")
		refused("unary failing", err)
	}
	cs, err := h.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/acme.v1.Work/Watch")
	if err != nil {
		t.Fatal(err)
	}
	_ = cs.SendMsg(wrapperspb.String("a"))
	_ = cs.CloseSend()
	err = cs.RecvMsg(new(wrapperspb.StringValue))
	if errors.Is(err, io.EOF) {
		t.Fatal("stream with a key: ended with no status, want InvalidArgument")
	}
	refused("stream", err)
}

// TestInterceptorRequiredKeyRefused: on an operation that requires keys,
// an application's own method cannot be served at all, and says why.
func TestInterceptorRequiredKeyRefused(t *testing.T) {
	h, _ := newAcmeHarnessOpt(t, harnessOpt{
		kernel:  []kernel.Option{kernel.WithConfigJSON([]byte(`{"Sundial":{"Kernel":{"Resilience":{"Operations":{"work.run":{"Idempotency":{"Required":true}}}}}}}`))},
		adapter: []grpcadapter.Option{grpcadapter.WithMethodOperations(map[string]string{"/acme.v1.Work/Echo": "work.run"})},
	})
	_, err := invokeAcme(t.Context(), h, "Echo")
	if st := status.Convert(err); errorInfo(t, st).GetReason() != pipeline.CodeIdempotencyKeyUnsupported {
		t.Fatalf("required key, application method, no key: %v, want %s", st, pipeline.CodeIdempotencyKeyUnsupported)
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
	if st.Code() != codes.AlreadyExists || errorInfo(t, st).GetReason() != pipeline.CodeIdempotencyTooLarge {
		t.Fatalf("retry: %v, want AlreadyExists %s", st, pipeline.CodeIdempotencyTooLarge)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}
