package httpadapter_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/kernel/propagation"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/resilience/outbound"
)

// onceBody is a request body that can be read only once (no GetBody), as
// http.NewRequest makes for a reader it does not know.
func onceBody(s string) io.ReadCloser { return io.NopCloser(strings.NewReader(s)) }

// TestTransportOnceBodyKeepsTheDependency: a body without GetBody goes out
// once, and still through the dependency. Its 503 and 500 come back as
// outcomes (FromResponse), are not retried, are counted in Stats and
// open the breaker; the open breaker then keeps the next call from the
// downstream.
func TestTransportOnceBodyKeepsTheDependency(t *testing.T) {
	var hits atomic.Int32
	bodies := make(chan string, 8)
	status := atomic.Int32{}
	status.Store(503)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		b, _ := io.ReadAll(r.Body)
		bodies <- string(b)
		w.WriteHeader(int(status.Load()))
	}))
	defer srv.Close()
	dep := dependency(t, func(p *outbound.Policy) { p.FailureThreshold, p.BreakDuration = 2, time.Hour })
	c := dependencyClient(t, dep, nil)
	post := func() error {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), "POST", srv.URL, onceBody(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		if req.GetBody != nil {
			t.Fatal("the test body has a GetBody")
		}
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	for i, want := range []struct {
		status int
		kind   pipeline.Kind
	}{{503, pipeline.KindUnavailable}, {500, pipeline.KindUnexpected}} {
		status.Store(int32(want.status))
		err := post()
		e, ok := errors.AsType[*pipeline.Error](err)
		if !ok || e.Kind() != want.kind || e.Details()[httpadapter.DetailDownstreamStatus] != want.status {
			t.Fatalf("call %d: err %v, want the downstream's %d as a %s outcome", i+1, err, want.status, want.kind)
		}
		if got := <-bodies; got != `{}` {
			t.Errorf("call %d: the downstream read body %q, want {}", i+1, got)
		}
		if n := hits.Load(); n != int32(i+1) {
			t.Fatalf("call %d: %d hits, want %d (one per call, no retry)", i+1, n, i+1)
		}
	}
	st := dep.Stats()
	if st.Attempts != 2 || st.Retries != 0 || st.Breaker != resilience.BreakerOpen {
		t.Fatalf("Stats %+v, want 2 attempts, no retry, the breaker open", st)
	}
	err := post()
	if e, ok := errors.AsType[*pipeline.Error](err); !ok || e.Code() != outbound.CodeDependencyOpen {
		t.Fatalf("with the breaker open: err %v, want %s", err, outbound.CodeDependencyOpen)
	}
	if n := hits.Load(); n != 2 {
		t.Fatalf("with the breaker open the downstream was reached (%d hits, want 2)", n)
	}
}

// TestTransportOnceBodyIsNotHedged: a hedging dependency makes one
// attempt of a request whose body cannot be read twice, however long it
// waits, and returns its answer.
func TestTransportOnceBodyIsNotHedged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dep := dependency(t, func(p *outbound.Policy) {
			p.HedgeDelay, p.SafeToHedge, p.FailureThreshold = time.Millisecond, true, 0
		})
		release := make(chan struct{})
		var sent atomic.Int32
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			sent.Add(1)
			b, _ := io.ReadAll(r.Body)
			<-release
			return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader(string(b))), Request: r}, nil
		})
		c := &http.Client{Transport: httpadapter.NewTransport(base, httpadapter.WithDependency(dep))}
		ctx, _ := propagation.WithIdempotencyKey(t.Context(), "k-1")
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		done := make(chan string, 1)
		go func() {
			req, _ := http.NewRequestWithContext(ctx, "POST", "http://billing/charge", onceBody(`{"a":1}`))
			resp, err := c.Do(req)
			if err != nil {
				done <- err.Error()
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			done <- string(b)
		}()
		time.Sleep(10 * time.Second) // ten thousand hedge delays
		synctest.Wait()
		close(release)
		if got := <-done; got != `{"a":1}` {
			t.Fatalf("answer %q, want the body echoed", got)
		}
		if n, st := sent.Load(), dep.Stats(); n != 1 || st.Attempts != 1 || st.Hedges != 0 {
			t.Fatalf("%d sent, Stats %+v; want one attempt, no hedge", n, st)
		}
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
