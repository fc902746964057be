package adapters_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/sundial-go/sundial/adapters/grpcadapter"
	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// TestDependencyDownSameOnBoth: a handler whose dependency is down — its
// port refuses every connection, through every retry — returns the error
// of its HTTP client or of its gRPC call as it is, and the caller gets the
// same answer for both: 503 UNAVAILABLE KERNEL_UNAVAILABLE_009 naming the
// dependency (docs/outbound.md, "A dependency that is down").
func TestDependencyDownSameOnBoth(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	ln.Close()

	reg := operations.NewRegistry()
	var k *kernel.Kernel
	hc := &http.Client{}
	defer hc.CloseIdleConnections()
	if err := operations.Register(reg, operations.Descriptor{ID: "front.http", Method: "POST", Path: "/via-http"},
		func(ctx context.Context, _ struct{}) (struct{}, error) {
			req, err := http.NewRequestWithContext(ctx, "POST", "http://"+down+"/charge", strings.NewReader(`{}`))
			if err != nil {
				return struct{}{}, err
			}
			resp, err := hc.Do(req)
			if err != nil {
				return struct{}{}, err
			}
			resp.Body.Close()
			return struct{}{}, nil
		}); err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(down, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(grpcadapter.UnaryClientInterceptor(0)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if err := operations.Register(reg, operations.Descriptor{ID: "front.grpc", Method: "POST", Path: "/via-grpc"},
		func(ctx context.Context, _ struct{}) (struct{}, error) {
			return struct{}{}, cc.Invoke(ctx, "/inventory.v1.Stock/Reserve", &emptypb.Empty{}, &emptypb.Empty{},
				grpcadapter.WithCallDependency(k.Dependency("inventory")))
		}); err != nil {
		t.Fatal(err)
	}
	k, err = kernel.New(kernel.WithRegistry(reg), kernel.WithConfigJSON([]byte(`{"Sundial":{"Kernel":{"Dependencies":{
		"billing":   {"Attempts": 3, "Backoff": {"BaseMs": 1, "MaxMs": 2}},
		"inventory": {"Attempts": 3, "Backoff": {"BaseMs": 1, "MaxMs": 2}}}}}}`)))
	if err != nil {
		t.Fatal(err)
	}
	hc.Transport = httpadapter.NewTransport(&http.Transport{}, httpadapter.WithDependency(k.Dependency("billing")))
	url := serveHTTP(t, k)
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	for path, dep := range map[string]string{"/via-http": "billing", "/via-grpc": "inventory"} {
		resp, err := client.Post(url+path, "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		var p httpadapter.Problem
		err = json.NewDecoder(resp.Body).Decode(&p)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusServiceUnavailable || p.Code != "KERNEL_UNAVAILABLE_009" ||
			p.Details["dependency"] != dep || p.Title != pipeline.KindUnavailable.String() {
			t.Errorf("POST %s (%s down) = %d %+v (%v), want 503 KERNEL_UNAVAILABLE_009 naming %s",
				path, dep, resp.StatusCode, p, err, dep)
		}
		if st := k.Dependency(dep).Stats(); st.Attempts != 3 {
			t.Errorf("%s: %d attempts, want 3 (refusals are retried)", dep, st.Attempts)
		}
	}
}
