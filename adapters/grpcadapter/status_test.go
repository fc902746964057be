package grpcadapter_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sundial-go/sundial/adapters/grpcadapter"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience"
)

// fragileError is a foreign error whose methods read their receiver: a
// typed nil of it panics when they are called.
type fragileError struct{ msg string }

func (e *fragileError) Error() string { return "fragile: " + e.msg }

// fragileWrapper is a foreign error whose Unwrap reads its receiver.
type fragileWrapper struct{ err error }

func (w *fragileWrapper) Error() string { return "wrapper" }
func (w *fragileWrapper) Unwrap() error { return w.err }

func TestStatus(t *testing.T) {
	t.Parallel()
	rate := pipeline.NewError(pipeline.KindUnavailable, resilience.CodeRateLimited, "Too many calls.").
		WithDetail("id", "orders.create").WithRetryAfter(42 * time.Second)
	tests := []struct {
		name     string
		err      error
		code     codes.Code
		msg      string
		reason   string
		metadata map[string]string
		retry    time.Duration // -1: no RetryInfo
	}{
		{"rate limited", rate, codes.Unavailable, "Too many calls.", resilience.CodeRateLimited,
			map[string]string{"id": "orders.create", "retryAfter": "42"}, 42 * time.Second},
		{"timeout", pipeline.ErrTimeout(), codes.DeadlineExceeded, "The invocation's deadline was exceeded.", pipeline.CodeTimeout, nil, -1},
		{"canceled", pipeline.ErrCanceled(), codes.Canceled, "The caller canceled the invocation.", pipeline.CodeCanceled, nil, -1},
		{"context deadline", context.DeadlineExceeded, codes.DeadlineExceeded, "The invocation's deadline was exceeded.", pipeline.CodeTimeout, nil, -1},
		{"wrapped outcome", fmt.Errorf("while charging: %w", pipeline.NewError(pipeline.KindNotFound, "SHOP_NOT_FOUND_001", "No such order.")),
			codes.NotFound, "No such order.", "SHOP_NOT_FOUND_001", nil, -1},
		{"details of every type", pipeline.NewError(pipeline.KindConflict, "C_001", "Taken.").WithDetail("n", 1.5).WithDetail("ok", true).
			WithDetail("list", []string{"a", "b"}).WithDetail("nil", nil).WithDetail("wait", 1500*time.Millisecond),
			codes.AlreadyExists, "Taken.", "C_001",
			map[string]string{"n": "1.5", "ok": "true", "list": `["a","b"]`, "nil": "", "wait": "1.5"}, -1},
		{"fractional retry rounds up", pipeline.NewError(pipeline.KindUnavailable, "X_001", "Later.").WithRetryAfter(250 * time.Millisecond),
			codes.Unavailable, "Later.", "X_001", map[string]string{"retryAfter": "1"}, time.Second},
		{"retry rounds up to whole seconds", pipeline.NewError(pipeline.KindUnavailable, "X_001", "Later.").WithRetryAfter(2500 * time.Millisecond),
			codes.Unavailable, "Later.", "X_001", map[string]string{"retryAfter": "3"}, 3 * time.Second},
		{"negative retry is none", pipeline.NewError(pipeline.KindUnavailable, "X_001", "Later.").WithRetryAfter(-3 * time.Second),
			codes.Unavailable, "Later.", "X_001", nil, -1},
		{"a retryAfter detail is only a detail", pipeline.NewError(pipeline.KindUnavailable, "X_001", "Later.").WithDetail(pipelinetest.DetailRetryAfter, 5),
			codes.Unavailable, "Later.", "X_001", map[string]string{"retryAfter": "5"}, -1},
		{"the retry-after wins over a detail", pipeline.NewError(pipeline.KindUnavailable, "X_001", "Later.").WithDetail(pipelinetest.DetailRetryAfter, 5).WithRetryAfter(9 * time.Second),
			codes.Unavailable, "Later.", "X_001", map[string]string{"retryAfter": "9"}, 9 * time.Second},
		{"plain error", errors.New("secret: disk /dev/sda1 on fire"), codes.Internal, pipeline.UnexpectedMessage, pipeline.CodeUnexpected, nil, -1},
		{"unexpected with details", pipeline.Wrap(pipeline.KindUnexpected, pipeline.CodeUnexpected, "secret text", errors.New("secret")).
			WithDetail("query", "secret SELECT").WithRetryAfter(time.Second),
			codes.Internal, pipeline.UnexpectedMessage, pipeline.CodeUnexpected, nil, -1},
		{"unknown kind", pipeline.NewError(pipeline.Kind(200), "X_ODD_001", "secret text").WithDetail("dsn", "secret dsn").WithRetryAfter(time.Second),
			codes.Internal, pipeline.UnexpectedMessage, "X_ODD_001", nil, -1},
		{"typed nil outcome", (*pipeline.Error)(nil), codes.Internal, pipeline.UnexpectedMessage, pipeline.CodeUnexpected, nil, -1},
		{"typed nil foreign error", (*fragileError)(nil), codes.Internal, pipeline.UnexpectedMessage, pipeline.CodeUnexpected, nil, -1},
		{"typed nil in a chain", fmt.Errorf("calling: %w", (*fragileWrapper)(nil)), codes.Internal, pipeline.UnexpectedMessage, pipeline.CodeUnexpected, nil, -1},
		{"foreign wrapper of a typed nil", &fragileWrapper{err: (*fragileError)(nil)}, codes.Internal, pipeline.UnexpectedMessage, pipeline.CodeUnexpected, nil, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := grpcadapter.Status(tt.err, "")
			if st.Code() != tt.code || st.Message() != tt.msg {
				t.Errorf("Status(%v) = %v %q, want %v %q", tt.err, st.Code(), st.Message(), tt.code, tt.msg)
			}
			ei := errorInfo(t, st)
			if ei.GetReason() != tt.reason || ei.GetDomain() != grpcadapter.DefaultDomain {
				t.Errorf("Status(%v) ErrorInfo = %v, want reason %s domain %s", tt.err, ei, tt.reason, grpcadapter.DefaultDomain)
			}
			if len(ei.GetMetadata()) != len(tt.metadata) {
				t.Errorf("Status(%v) metadata = %v, want %v", tt.err, ei.GetMetadata(), tt.metadata)
			}
			for k, v := range tt.metadata {
				if ei.GetMetadata()[k] != v {
					t.Errorf("Status(%v) metadata[%s] = %q, want %q", tt.err, k, ei.GetMetadata()[k], v)
				}
			}
			ri := retryInfo(st)
			switch {
			case tt.retry < 0 && ri != nil:
				t.Errorf("Status(%v) RetryInfo = %v, want none", tt.err, ri)
			case tt.retry >= 0 && (ri == nil || ri.GetRetryDelay().AsDuration() != tt.retry):
				t.Errorf("Status(%v) RetryInfo = %v, want %v", tt.err, ri, tt.retry)
			}
			if strings.Contains(st.Proto().String(), "secret") {
				t.Errorf("Status(%v) leaks internal text: %v", tt.err, st.Proto())
			}
		})
	}
	if got := grpcadapter.Status(nil, ""); got != nil {
		t.Errorf("Status(nil) = %v, want nil", got)
	}
	if got := errorInfo(t, grpcadapter.Status(rate, "shop.example.com")).GetDomain(); got != "shop.example.com" {
		t.Errorf("Status(rate, shop.example.com) domain = %q", got)
	}
}

func TestKindForInvertsCodeFor(t *testing.T) {
	t.Parallel()
	for _, k := range pipelinetest.Kinds() {
		if got := grpcadapter.KindFor(grpcadapter.CodeFor(k)); got != k {
			t.Errorf("KindFor(CodeFor(%s)) = %s, want %s", k, got, k)
		}
	}
	extra := map[codes.Code]pipeline.Kind{
		codes.OutOfRange: pipeline.KindValidation,
		codes.Aborted:    pipeline.KindConflict, codes.ResourceExhausted: pipeline.KindUnavailable,
		codes.Unknown: pipeline.KindUnexpected, codes.Unimplemented: pipeline.KindUnexpected, codes.DataLoss: pipeline.KindUnexpected,
	}
	for c, want := range extra {
		if got := grpcadapter.KindFor(c); got != want {
			t.Errorf("KindFor(%v) = %s, want %s", c, got, want)
		}
	}
}

func TestFromStatus(t *testing.T) {
	t.Parallel()
	down, _ := status.New(codes.Unavailable, "rate limited downstream").WithDetails(
		&errdetails.ErrorInfo{Reason: "KERNEL_UNAVAILABLE_002", Domain: "sundial"},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(2500 * time.Millisecond)})
	tests := []struct {
		name    string
		err     error
		kind    pipeline.Kind
		code    string
		details map[string]any
	}{
		{"unavailable with details", down.Err(), pipeline.KindUnavailable, "GRPC_UNAVAILABLE",
			map[string]any{"grpcCode": "Unavailable", "reason": "KERNEL_UNAVAILABLE_002", "domain": "sundial"}},
		{"deadline", status.Error(codes.DeadlineExceeded, "context deadline exceeded"), pipeline.KindTimeout, "GRPC_DEADLINE_EXCEEDED",
			map[string]any{"grpcCode": "DeadlineExceeded"}},
		{"canceled", status.Error(codes.Canceled, "context canceled"), pipeline.KindCanceled, "GRPC_CANCELLED", nil},
		{"internal", status.Error(codes.Internal, "boom"), pipeline.KindUnexpected, "GRPC_INTERNAL", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := grpcadapter.FromStatus(tt.err)
			e := pipeline.AsError(got)
			if e.Kind() != tt.kind || e.Code() != tt.code {
				t.Errorf("FromStatus(%v) = %s %s, want %s %s", tt.err, e.Kind(), e.Code(), tt.kind, tt.code)
			}
			for k, v := range tt.details {
				if d, _ := e.Details()[k]; d != v {
					t.Errorf("FromStatus(%v) details[%s] = %v (%T), want %v (%T)", tt.err, k, d, d, v, v)
				}
			}
			if status.Code(got) != status.Code(tt.err) {
				t.Errorf("status.Code(FromStatus(%v)) = %v, want %v", tt.err, status.Code(got), status.Code(tt.err))
			}
		})
	}
	if d, ok := pipeline.AsError(grpcadapter.FromStatus(down.Err())).RetryAfter(); !ok || d != 2500*time.Millisecond {
		t.Errorf("FromStatus(RetryInfo 2.5s).RetryAfter() = %v, %v; want 2.5s", d, ok)
	}
	if _, ok := pipeline.AsError(grpcadapter.FromStatus(status.Error(codes.Unavailable, "down"))).RetryAfter(); ok {
		t.Error("FromStatus(no RetryInfo) has a retry-after")
	}
	plain := errors.New("not a status")
	outcome := pipeline.NewError(pipeline.KindNotFound, "X_001", "gone")
	for _, err := range []error{nil, plain, outcome, context.Canceled, (*pipeline.Error)(nil), (*fragileError)(nil), (*fragileWrapper)(nil)} {
		if got := grpcadapter.FromStatus(err); got != err {
			t.Errorf("FromStatus(%v) = %v, want it unchanged", err, got)
		}
	}
}
