package adapters_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/spf13/cobra"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundial-go/sundial/adapters/cliadapter"
	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// payment is an input with constraints on three fields.
type payment struct {
	Payee    string `json:"payee" validate:"required,max=20"`
	Amount   int    `json:"amount" validate:"min=1,max=10000"`
	Currency string `json:"currency" validate:"oneof=EUR USD"`
}

type paid struct {
	OK bool `json:"ok"`
}

// TestConstraintsConformance: the same input with three fields wrong
// (payee missing, amount over its maximum, currency not one of EUR USD)
// gives KERNEL_VALIDATION_007 naming the same three fields on HTTP (the
// Problem's errors array, JSON pointers), gRPC (a google.rpc.BadRequest
// with one FieldViolation each) and the CLI (one line per flag, exit 2);
// the handler never runs.
func TestConstraintsConformance(t *testing.T) {
	var ran atomic.Int32
	reg := operations.NewRegistry()
	if err := operations.Register(reg, operations.Descriptor{ID: "billing.pay", Method: "POST", Path: "/pay"},
		func(context.Context, payment) (paid, error) { ran.Add(1); return paid{OK: true}, nil }); err != nil {
		t.Fatal(err)
	}
	k, err := kernel.New(kernel.WithRegistry(reg))
	if err != nil {
		t.Fatal(err)
	}
	bad := payment{Payee: "", Amount: 20000, Currency: "GBP"}
	want := []string{"amount", "currency", "payee"}

	t.Run("HTTP", func(t *testing.T) {
		url := serveHTTP(t, k)
		client := &http.Client{Transport: &http.Transport{}}
		defer client.CloseIdleConnections()
		body, _ := json.Marshal(bad)
		resp, err := client.Post(url+"/pay", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var p httpadapter.Problem
		if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 400 || p.Code != pipeline.CodeConstraint {
			t.Fatalf("status %d code %q, want 400 %s", resp.StatusCode, p.Code, pipeline.CodeConstraint)
		}
		var got []string
		for _, fe := range p.Errors {
			got = append(got, strings.TrimPrefix(fe.Field, "/"))
			if !strings.HasPrefix(fe.Field, "/") || fe.Rule == "" || fe.Message == "" {
				t.Errorf("field error %+v: want a JSON pointer, a rule and a message", fe)
			}
		}
		checkFields(t, got, want)
	})

	t.Run("gRPC", func(t *testing.T) {
		ga, cc := serveGRPC(t, k)
		var out paid
		err := ga.Call(context.Background(), cc, "billing.pay", bad, &out)
		st := status.Convert(err)
		reason := pipeline.AsError(err).Details()["reason"]
		if st.Code() != codes.InvalidArgument || reason != pipeline.CodeConstraint {
			t.Fatalf("gRPC = %v (reason %v), want InvalidArgument %s", err, reason, pipeline.CodeConstraint)
		}
		var got []string
		for _, d := range st.Details() {
			if br, ok := d.(*errdetails.BadRequest); ok {
				for _, fv := range br.GetFieldViolations() {
					got = append(got, fv.GetField())
				}
			}
		}
		checkFields(t, got, want)
	})

	t.Run("CLI", func(t *testing.T) {
		root := &cobra.Command{Use: "app"}
		if err := cliadapter.AddCommands(root, reg, func() (*kernel.Kernel, error) { return k, nil }, cliadapter.WithSignals()); err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		root.SetArgs([]string{"billing", "pay", "--amount", "20000", "--currency", "GBP", "--output", "text"})
		root.SetOut(&stdout)
		root.SetErr(&stderr)
		code := cliadapter.Execute(context.Background(), root)
		if code != 2 || !strings.Contains(stderr.String(), pipeline.CodeConstraint) {
			t.Fatalf("exit %d, stderr %q; want 2 and %s", code, stderr.String(), pipeline.CodeConstraint)
		}
		var got []string
		for l := range strings.Lines(stderr.String()) {
			if f, ok := strings.CutPrefix(l, "  --"); ok {
				name, _, _ := strings.Cut(f, ":")
				got = append(got, name)
			}
		}
		checkFields(t, got, want)
	})
	if n := ran.Load(); n != 0 {
		t.Errorf("handler ran %d times; want never", n)
	}
}

func checkFields(t *testing.T, got, want []string) {
	t.Helper()
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("failing fields %q, want %q", got, want)
	}
}
