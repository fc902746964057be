package adapters_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundial-go/sundial/adapters/cliadapter"
	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

type ticked struct {
	OK bool `json:"ok"`
}

// TestPassedDeadlineSameOnEveryProtocol: an operation whose own deadline
// (TimeoutSeconds 1e-9, one nanosecond) has passed before its handler can
// start answers TIMEOUT KERNEL_TIMEOUT_001 on every protocol, on real
// listeners: HTTP 504, gRPC DeadlineExceeded, CLI exit 7, and in process
// (kernel.Call). The handler never starts.
func TestPassedDeadlineSameOnEveryProtocol(t *testing.T) {
	var ran atomic.Int32
	reg := operations.NewRegistry()
	if err := operations.Register(reg, operations.Descriptor{ID: "clock.tick", Method: "POST", Path: "/tick"},
		func(context.Context, struct{}) (ticked, error) { ran.Add(1); return ticked{OK: true}, nil }); err != nil {
		t.Fatal(err)
	}
	k, err := kernel.New(kernel.WithRegistry(reg), kernel.WithConfigJSON([]byte(
		`{"Sundial":{"Kernel":{"Resilience":{"Operations":{"clock.tick":{"TimeoutSeconds":1e-9}}}}}}`)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := k.Wait(context.Background()); err != nil {
			t.Error(err)
		}
	})

	// HTTP: 504 Problem Details.
	url := serveHTTP(t, k)
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	resp, err := client.Post(url+"/tick", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	var p httpadapter.Problem
	err = json.NewDecoder(resp.Body).Decode(&p)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusGatewayTimeout || p.Code != pipeline.CodeTimeout {
		t.Errorf("HTTP: status %d code %q (%v), want 504 %s", resp.StatusCode, p.Code, err, pipeline.CodeTimeout)
	}

	// gRPC: DeadlineExceeded, reason KERNEL_TIMEOUT_001.
	ga, cc := serveGRPC(t, k)
	err = ga.Call(context.Background(), cc, "clock.tick", struct{}{}, &ticked{})
	reason := pipeline.AsError(err).Details()["reason"]
	if st := status.Convert(err); st.Code() != codes.DeadlineExceeded || reason != pipeline.CodeTimeout {
		t.Errorf("gRPC = %v (reason %v), want DeadlineExceeded %s", err, reason, pipeline.CodeTimeout)
	}

	// CLI: exit 7.
	root := &cobra.Command{Use: "app"}
	if err := cliadapter.AddCommands(root, reg, func() (*kernel.Kernel, error) { return k, nil }); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	root.SetArgs([]string{"clock", "tick"})
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	if code := cliadapter.Execute(context.Background(), root); code != 7 || !strings.Contains(stderr.String(), pipeline.CodeTimeout) {
		t.Errorf("CLI: exit %d, stderr %q; want 7 and %s", code, stderr.String(), pipeline.CodeTimeout)
	}

	// In process.
	if _, err := kernel.Call[struct{}, ticked](context.Background(), k, "clock.tick", struct{}{}); pipelinetest.CodeOf(err) != pipeline.CodeTimeout {
		t.Errorf("kernel.Call = %v, want %s", err, pipeline.CodeTimeout)
	}
	if n := ran.Load(); n != 0 {
		t.Errorf("the handler started %d times after its deadline had passed", n)
	}
}
