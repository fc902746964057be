package kernel

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

// testOp is an operation with nothing but an ID.
type testOp string

func (o testOp) OperationID() string { return string(o) }

func TestRecover(t *testing.T) {
	var logged *pipeline.PanicError
	var loggedInv *pipeline.Invocation
	h := recoverHandler(func(context.Context, *pipeline.Invocation) (any, error) {
		panic("secret: db password is hunter2")
	}, func(inv *pipeline.Invocation, p *pipeline.PanicError) { loggedInv, logged = inv, p })
	inv := pipeline.NewInvocation(pipeline.Spec{Operation: testOp("a.b")})
	out, err := h(context.Background(), inv)
	e := pipeline.AsError(err)
	if out != nil || e.Kind() != pipeline.KindUnexpected || e.Code() != pipeline.CodeUnexpected {
		t.Fatalf("Recover(panic) = %v, %v/%s; want nil, UNEXPECTED/%s", out, e.Kind(), e.Code(), pipeline.CodeUnexpected)
	}
	if strings.Contains(e.Message(), "hunter2") {
		t.Errorf("panic text leaked into the outcome message: %q", e.Message())
	}
	if loggedInv != inv || logged == nil || fmt.Sprint(logged.Value) != "secret: db password is hunter2" || len(logged.Stack) == 0 {
		t.Errorf("onPanic got %v, %+v; want the invocation, the panic value and a stack", loggedInv, logged)
	}
	if pe, found := errors.AsType[*pipeline.PanicError](err); !found || pe != logged {
		t.Errorf("errors.AsType(err, *PanicError) = %v, %v; want the panic as the cause", pe, found)
	}

	// Without onPanic, and without a panic.
	if _, err := recoverHandler(func(context.Context, *pipeline.Invocation) (any, error) { panic(1) }, nil)(context.Background(), nil); pipelinetest.KindOf(err) != pipeline.KindUnexpected {
		t.Errorf("Recover(panic, nil onPanic) = %v, want UNEXPECTED", err)
	}
	if out, err := recoverHandler(func(context.Context, *pipeline.Invocation) (any, error) { return 1, nil }, nil)(context.Background(), nil); out != 1 || err != nil {
		t.Errorf("Recover(no panic) = %v, %v; want 1, nil", out, err)
	}
}

func TestRecovered(t *testing.T) {
	run := func() (err error) {
		defer func() {
			if v := recover(); v != nil {
				err = recovered(nil, v, nil)
			}
		}()
		panic(errors.New("inner"))
	}
	err := run()
	pe, found := errors.AsType[*pipeline.PanicError](err)
	if pipelinetest.KindOf(err) != pipeline.KindUnexpected || !found || len(pe.Stack) == 0 {
		t.Errorf("Recovered = %v, want UNEXPECTED wrapping a *PanicError with a stack", err)
	}
}
