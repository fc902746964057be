package grpcadapter_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sundial-go/sundial/adapters/grpcadapter"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
)

// acme is an application's own service, written as protoc-gen-go-grpc
// would generate it, with wrapperspb messages.
type acme struct {
	deadlines chan time.Time // Slow: the handler context's deadline
	release   chan struct{}  // Stuck: returns when it is closed (unblock)
	started   chan struct{}  // Stuck: one send per call (buffered)
	once      sync.Once
}

// unblock lets every Stuck call return.
func (a *acme) unblock() { a.once.Do(func() { close(a.release) }) }

type unaryFunc func(context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error)

// unary is the MethodDesc handler protoc-gen-go-grpc generates.
func unary(full string, fn unaryFunc) func(any, context.Context, func(any) error, grpc.UnaryServerInterceptor) (any, error) {
	return func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		if icpt == nil {
			return fn(ctx, in)
		}
		info := &grpc.UnaryServerInfo{Server: srv, FullMethod: full}
		return icpt(ctx, in, info, func(ctx context.Context, req any) (any, error) {
			return fn(ctx, req.(*wrapperspb.StringValue))
		})
	}
}

func (a *acme) desc() *grpc.ServiceDesc {
	echo := func(_ context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		return wrapperspb.String("echo: " + in.GetValue()), nil
	}
	slow := func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		d, _ := ctx.Deadline()
		a.deadlines <- d
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	// stuck ignores its context.
	stuck := func(context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		a.started <- struct{}{}
		<-a.release
		return wrapperspb.String("too late"), nil
	}
	// nilOurs and nilForeign return typed nils as their error.
	nilOurs := func(context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		var e *pipeline.Error
		return nil, e
	}
	nilForeign := func(context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		var e *fragileError
		return nil, e
	}
	fail := func(context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		st, _ := status.New(codes.NotFound, "no such widget").WithDetails(&errdetails.ErrorInfo{Reason: "ACME_NOT_FOUND", Domain: "acme.example"})
		return nil, st.Err()
	}
	return &grpc.ServiceDesc{
		ServiceName: "acme.v1.Work",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{
			{MethodName: "Limited", Handler: unary("/acme.v1.Work/Limited", echo)},
			{MethodName: "Echo", Handler: unary("/acme.v1.Work/Echo", echo)},
			{MethodName: "Slow", Handler: unary("/acme.v1.Work/Slow", slow)},
			{MethodName: "Fail", Handler: unary("/acme.v1.Work/Fail", fail)},
			{MethodName: "Stuck", Handler: unary("/acme.v1.Work/Stuck", stuck)},
			{MethodName: "NilOurs", Handler: unary("/acme.v1.Work/NilOurs", nilOurs)},
			{MethodName: "NilForeign", Handler: unary("/acme.v1.Work/NilForeign", nilForeign)},
		},
		Streams: []grpc.StreamDesc{{
			StreamName:    "Watch",
			ServerStreams: true,
			Handler: func(srv any, ss grpc.ServerStream) error {
				if err := ss.SendMsg(wrapperspb.String("first")); err != nil {
					return err
				}
				<-ss.Context().Done()
				return status.FromContextError(ss.Context().Err()).Err()
			},
		}},
	}
}

func newAcmeHarness(t *testing.T) (*harness, *acme) {
	t.Helper()
	return newAcmeHarnessWith(t, nil)
}

// newAcmeHarnessWith is newAcmeHarness with more operations.
func newAcmeHarnessWith(t *testing.T, register func(testing.TB, *operations.Registry)) (*harness, *acme) {
	t.Helper()
	return newAcmeHarnessOpt(t, harnessOpt{register: register})
}

// newAcmeHarnessOpt is newAcmeHarness with the acme service and the
// health service added to ho.
func newAcmeHarnessOpt(t *testing.T, ho harnessOpt) (*harness, *acme) {
	t.Helper()
	svc := &acme{deadlines: make(chan time.Time, 4), release: make(chan struct{}), started: make(chan struct{}, 4)}
	ho.adapter = append(ho.adapter, grpcadapter.WithMethodOperations(map[string]string{
		"/acme.v1.Work/Slow":  "work.capped",
		"/acme.v1.Work/Watch": "work.capped",
		"/acme.v1.Work/Stuck": "work.capped",
	}))
	ho.services = func(s *grpc.Server) {
		s.RegisterService(svc.desc(), svc)
		hs := health.NewServer()
		healthpb.RegisterHealthServer(s, hs)
	}
	h := newHarness(t, ho)
	t.Cleanup(svc.unblock) // before the harness's cleanup waits for the handlers
	return h, svc
}

func invokeAcme(ctx context.Context, h *harness, method string) (*wrapperspb.StringValue, error) {
	out := new(wrapperspb.StringValue)
	err := h.conn.Invoke(ctx, "/acme.v1.Work/"+method, wrapperspb.String("hi"), out)
	return out, err
}

// TestInterceptorSharesTheOperationsLimits checks that an application
// method resolved by convention (acme.v1.Work/Limited -> work.limited)
// meets the very limiter the adapter's own method does.
func TestInterceptorSharesTheOperationsLimits(t *testing.T) {
	t.Parallel()
	h, _ := newAcmeHarness(t)
	if _, st := h.call(t.Context(), t, "/test.v1.Work/Limited", `{}`); st != nil {
		t.Fatalf("/test.v1.Work/Limited = %v, want OK", st)
	}
	_, err := invokeAcme(t.Context(), h, "Limited")
	st := status.Convert(err)
	if st.Code() != codes.Unavailable || errorInfo(t, st).GetReason() != resilience.CodeRateLimited || retryInfo(st) == nil {
		t.Fatalf("/acme.v1.Work/Limited after the limit = %v, want Unavailable KERNEL_UNAVAILABLE_002 with RetryInfo", st)
	}
	h.waitLog(t, "grpc call", "operation=work.limited", "method=/acme.v1.Work/Limited", "code=KERNEL_UNAVAILABLE_002")
}

// TestInterceptorAppliesTheOperationsDeadline: a method the interceptor
// resolves to work.capped gets its TimeoutSeconds (200 ms) as the
// handler's deadline, and the caller its TIMEOUT at that deadline.
func TestInterceptorAppliesTheOperationsDeadline(t *testing.T) {
	t.Parallel()
	inBubble(t, func(t *testing.T) {
		h, svc := newAcmeHarness(t)
		start := time.Now()
		_, err := invokeAcme(t.Context(), h, "Slow")
		took := time.Since(start)
		st := status.Convert(err)
		if st.Code() != codes.DeadlineExceeded || errorInfo(t, st).GetReason() != pipeline.CodeTimeout {
			t.Fatalf("/acme.v1.Work/Slow = %v, want DeadlineExceeded KERNEL_TIMEOUT_001 (work.capped's 200ms)", st)
		}
		if took != 200*time.Millisecond {
			t.Errorf("/acme.v1.Work/Slow took %v, want 200ms", took)
		}
		if d := <-svc.deadlines; d.Sub(start) != 200*time.Millisecond {
			t.Errorf("handler deadline = %v after the call, want 200ms", d.Sub(start))
		}
	})
}

func TestInterceptorReturnsTheHandlersStatus(t *testing.T) {
	t.Parallel()
	h, _ := newAcmeHarness(t)
	_, err := invokeAcme(t.Context(), h, "Fail")
	st := status.Convert(err)
	if st.Code() != codes.NotFound || st.Message() != "no such widget" || errorInfo(t, st).GetReason() != "ACME_NOT_FOUND" {
		t.Errorf("/acme.v1.Work/Fail = %v %v, want the handler's own NotFound with its ErrorInfo", st, st.Details())
	}
}

func TestInterceptorHostPipeline(t *testing.T) {
	t.Parallel()
	h, _ := newAcmeHarness(t)
	out, err := invokeAcme(t.Context(), h, "Echo")
	if err != nil || out.GetValue() != "echo: hi" {
		t.Fatalf("/acme.v1.Work/Echo = %v, %v; want echo: hi", out, err)
	}
	h.waitLog(t, "grpc call", "operation=/acme.v1.Work/Echo", "grpcCode=OK")
}

func TestStreamInterceptor(t *testing.T) {
	t.Parallel()
	inBubble(t, testStreamInterceptor)
}

func testStreamInterceptor(t *testing.T) {
	h, _ := newAcmeHarness(t)
	start := time.Now()
	cs, err := h.conn.NewStream(t.Context(), &grpc.StreamDesc{ServerStreams: true}, "/acme.v1.Work/Watch")
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.SendMsg(wrapperspb.String("hi")); err != nil {
		t.Fatal(err)
	}
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	first := new(wrapperspb.StringValue)
	if err := cs.RecvMsg(first); err != nil || first.GetValue() != "first" {
		t.Fatalf("first message = %v, %v", first, err)
	}
	err = cs.RecvMsg(new(wrapperspb.StringValue))
	st := status.Convert(err)
	if st.Code() != codes.DeadlineExceeded || errorInfo(t, st).GetReason() != pipeline.CodeTimeout {
		t.Errorf("end of /acme.v1.Work/Watch = %v, want DeadlineExceeded KERNEL_TIMEOUT_001", st)
	}
	if took := time.Since(start); took != 200*time.Millisecond {
		t.Errorf("the stream ended after %v, want 200ms", took)
	}
}

func TestInterceptorLeavesInfrastructureAlone(t *testing.T) {
	t.Parallel()
	h, _ := newAcmeHarness(t)
	resp, err := healthpb.NewHealthClient(h.conn).Check(t.Context(), &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health Check = %v, %v; want SERVING", resp, err)
	}
	if _, st := h.call(t.Context(), t, "/test.v1.Work/Run", `{}`); st != nil {
		t.Fatal(st)
	}
	h.waitLog(t, "grpc call", "method=/test.v1.Work/Run")
	// The adapter's own method is logged once (not again by the
	// interceptor), and the health check not at all.
	if n := len(h.findLog("grpc call", "method=/test.v1.Work/Run")); n != 1 {
		t.Errorf("the log has %d records of /test.v1.Work/Run, want 1: %v", n, h.logs.Records())
	}
	if recs := h.findLog("grpc call", "method~grpc.health"); len(recs) != 0 {
		t.Errorf("the health check went through the pipeline: %v", recs)
	}
}
