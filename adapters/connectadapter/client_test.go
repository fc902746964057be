package connectadapter_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sundial-go/sundial/adapters/connectadapter"
	"github.com/sundial-go/sundial/kernel/client"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// TestClientTransportBind: an operation the registry lacks, and a nil
// registry, fail at client.New, naming the operation.
func TestClientTransportBind(t *testing.T) {
	reg := operations.NewRegistry()
	register(t, reg)
	tr := connectadapter.ClientTransport(reg, "http://127.0.0.1:1", nil, connectadapter.WithPackage("test.v1"))
	if _, err := client.New[workIn, workOut](tr, "work.nope"); err == nil || !strings.Contains(err.Error(), `"work.nope"`) {
		t.Errorf("client of an unknown operation: %v, want an error naming it", err)
	}
	if _, err := client.New[workIn, workOut](tr, "work.run"); err != nil {
		t.Errorf("client of work.run: %v", err)
	}
	nilReg := connectadapter.ClientTransport(nil, "http://127.0.0.1:1", nil)
	if _, err := client.New[workIn, workOut](nilReg, "work.run"); err == nil || !strings.Contains(err.Error(), "nil registry") {
		t.Errorf("client over a nil registry: %v, want an error", err)
	}
}

// TestClientTransportForeignError: a Connect error without an ErrorInfo,
// from a server that is not Sundial's, is the outcome of its code:
// UNAVAILABLE GRPC_UNAVAILABLE, with the message and the code's name.
func TestClientTransportForeignError(t *testing.T) {
	reg := operations.NewRegistry()
	register(t, reg)
	mux := http.NewServeMux()
	mux.Handle("/test.v1.Work/Run", connect.NewUnaryHandler("/test.v1.Work/Run",
		func(context.Context, *connect.Request[struct{}]) (*connect.Response[struct{}], error) {
			return nil, connect.NewError(connect.CodeUnavailable, errors.New("the shard is down"))
		}, connect.WithCodec(emptyCodec{})))
	url := serve(t, mux, nil)
	c, err := client.New[workIn, workOut](connectadapter.ClientTransport(reg, url, httpClient(t, false),
		connectadapter.WithPackage("test.v1")), "work.run")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Call(t.Context(), workIn{})
	e := pipeline.AsError(err)
	if e.Kind() != pipeline.KindUnavailable || e.Code() != "GRPC_UNAVAILABLE" || e.Message() != "the shard is down" ||
		e.Details()["grpcCode"] != "Unavailable" {
		t.Errorf("outcome %v %s %q %v, want UNAVAILABLE GRPC_UNAVAILABLE %q grpcCode=Unavailable",
			e.Kind(), e.Code(), e.Message(), e.Details(), "the shard is down")
	}
}

// emptyCodec reads and writes the empty proto message of any type.
type emptyCodec struct{}

func (emptyCodec) Name() string                { return "proto" }
func (emptyCodec) Marshal(any) ([]byte, error) { return nil, nil }
func (emptyCodec) Unmarshal([]byte, any) error { return nil }

// TestClientTransportSendsNothingPastTheDeadline: an attempt whose
// deadline has passed is not sent, even before the context's timer has
// fired; its outcome is the caller's TIMEOUT.
func TestClientTransportSendsNothingPastTheDeadline(t *testing.T) {
	reg := operations.NewRegistry()
	register(t, reg)
	var hits atomic.Int64
	url := serve(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}), nil)
	c, err := client.New[workIn, workOut](connectadapter.ClientTransport(reg, url, httpClient(t, false),
		connectadapter.WithPackage("test.v1")), "work.run")
	if err != nil {
		t.Fatal(err)
	}
	// The deadline has passed; the timer that ends the context is late.
	ctx := lateTimer{t.Context(), time.Now().Add(-time.Millisecond)}
	_, err = c.Call(ctx, workIn{})
	if e := pipeline.AsError(err); e.Code() != pipeline.CodeTimeout || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("outcome %v, want %s wrapping context.DeadlineExceeded", err, pipeline.CodeTimeout)
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the server got %d requests, want none", n)
	}
}

// lateTimer is a context whose deadline has passed but which has not
// ended yet, as a context is until its timer fires.
type lateTimer struct {
	context.Context
	deadline time.Time
}

func (c lateTimer) Deadline() (time.Time, bool) { return c.deadline, true }
