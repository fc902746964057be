package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience/outbound"
)

func TestTransportError(t *testing.T) {
	t.Parallel()
	budgetCut := (&outbound.BudgetExhaustedError{Stage: "s", Dependency: "d", Cut: true}).Outcome()
	for _, tc := range []struct {
		name     string
		err      error
		wantKind pipeline.Kind
		wantCode string // "" : the error passes unchanged
	}{
		{"context deadline passes", fmt.Errorf("Get: %w", context.DeadlineExceeded), pipeline.KindTimeout, ""},
		{"context cancel passes", fmt.Errorf("Get: %w", context.Canceled), pipeline.KindCanceled, ""},
		{"budget cut passes", fmt.Errorf("Get: %w", budgetCut), pipeline.KindTimeout, ""},
		{"per-read timeout", &net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}, pipeline.KindTimeout, "CHAIN_TIMEOUT_001"},
		{"refused", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, pipeline.KindUnavailable, "CHAIN_UNAVAILABLE_001"},
		{"reset", errors.New("connection reset by peer"), pipeline.KindUnavailable, "CHAIN_UNAVAILABLE_001"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := transportError("inventory", tc.err)
			if k := pipelinetest.KindOf(got); k != tc.wantKind {
				t.Errorf("KindOf(transportError(%v)) = %v, want %v", tc.err, k, tc.wantKind)
			}
			if tc.wantCode == "" {
				if got != tc.err {
					t.Errorf("transportError(%v) = %v, want it unchanged", tc.err, got)
				}
				return
			}
			pe := pipeline.AsError(got)
			if dep, _ := pe.Details()["dependency"]; pe.Code() != tc.wantCode || dep != "inventory" || !errors.Is(got, tc.err) {
				t.Errorf("transportError(%v) = %v %v, want %s naming inventory and wrapping the cause", tc.err, pe.Code(), pe.Details(), tc.wantCode)
			}
		})
	}
}

func TestProblemError(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name           string
		status         int
		contentType    string
		body           string
		wantKind       pipeline.Kind
		wantCode       string
		wantRetryAfter time.Duration // 0: none
	}{
		{"problem details", 504, "application/problem+json",
			`{"type":"urn:sundial:error:BILLING_TIMEOUT_001","title":"TIMEOUT","status":504,"detail":"no time","code":"BILLING_TIMEOUT_001","details":{"remainingMs":12}}`,
			pipeline.KindTimeout, "BILLING_TIMEOUT_001", 0},
		{"retry-after is typed, not a detail", 503, "application/problem+json",
			`{"title":"UNAVAILABLE","status":503,"code":"KERNEL_UNAVAILABLE_002","details":{"id":"inventory.stock","retryAfter":3}}`,
			pipeline.KindUnavailable, "KERNEL_UNAVAILABLE_002", 3 * time.Second},
		{"unknown title falls back to the status", 503, "application/problem+json",
			`{"title":"SOMETHING","code":"X_UNAVAILABLE_001"}`, pipeline.KindUnavailable, "X_UNAVAILABLE_001", 0},
		{"not problem details", 503, "text/plain", `busy`, pipeline.KindUnavailable, "CHAIN_UNEXPECTED_001", 0},
		{"garbage", 504, "application/problem+json", `{`, pipeline.KindTimeout, "CHAIN_UNEXPECTED_001", 0},
		{"status without a kind", 502, "text/html", `<html>`, pipeline.KindUnexpected, "CHAIN_UNEXPECTED_001", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := problemError(tc.status, tc.contentType, []byte(tc.body))
			if st, _ := got.Details()["status"]; got.Kind() != tc.wantKind || got.Code() != tc.wantCode || st != tc.status {
				t.Errorf("problemError(%d, %q, %s) = %v %s %v, want %v %s with details.status", tc.status, tc.contentType, tc.body, got.Kind(), got.Code(), got.Details(), tc.wantKind, tc.wantCode)
			}
			ra, ok := got.RetryAfter()
			if ok != (tc.wantRetryAfter != 0) || ra != tc.wantRetryAfter {
				t.Errorf("problemError(%s).RetryAfter() = %v, %v; want %v", tc.body, ra, ok, tc.wantRetryAfter)
			}
			if _, ok := got.Details()[pipelinetest.DetailRetryAfter]; ok {
				t.Errorf("problemError(%s) kept details.%s: %v", tc.body, pipelinetest.DetailRetryAfter, got.Details())
			}
		})
	}
}

// A dependency that is down is UNAVAILABLE after the retries, not an
// UNEXPECTED 500.
func TestDependencyDown(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there any more
	o := NewOrders(OrdersConfig{Inventory: down, Backoff: time.Millisecond}, newJournal("orders", nil), newServiceClient(time.Second, nil), nil)
	_, err = o.Stock(context.Background(), StockCheck{Item: "book"})
	if pe := pipeline.AsError(err); pe.Kind() != pipeline.KindUnavailable || pe.Code() != "ORDERS_UNAVAILABLE_002" {
		t.Errorf("Stock with Inventory down = %v, want UNAVAILABLE ORDERS_UNAVAILABLE_002", err)
	}
	if n := o.Journal().Count("stock-attempt"); n != 3 {
		t.Errorf("attempts = %d, want 3", n)
	}
}

func TestStartClusterErrors(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, tc := range []struct {
		name string
		cfg  ClusterConfig
		want string
	}{
		{"address taken", ClusterConfig{Listen: map[string]string{"gateway": ln.Addr().String()}}, "gateway"},
		{"missing config file", ClusterConfig{ConfigFile: "no-such-file.json"}, "no-such-file.json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := StartCluster(tc.cfg)
			if err == nil || c != nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("StartCluster = %v, %v; want nil and an error naming %q", c, err, tc.want)
			}
		})
	}
}
