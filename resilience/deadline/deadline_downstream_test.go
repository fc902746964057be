package deadline_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience/deadline"
)

// These tests run over real loopback listeners, outside synctest (sockets
// do not block durably inside a bubble), so their time bounds allow for
// scheduling: the deadline is 100 ms and a cut counts as "at the deadline"
// when it lands within the slack below after it.
const (
	downstreamDeadline = 100 * time.Millisecond
	downstreamSlack    = time.Second
)

func listenLoopback(t *testing.T) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return lis
}

// withinDeadline fails unless at is no earlier than deadline-early and no
// later than deadline+slack.
func withinDeadline(t *testing.T, what string, at, dl time.Time, early time.Duration) {
	t.Helper()
	if at.Before(dl.Add(-early)) || at.After(dl.Add(downstreamSlack)) {
		t.Errorf("%s at deadline%+v, want between -%v and +%v", what, at.Sub(dl), early, downstreamSlack)
	}
}

// deadlineRecorder is an http.RoundTripper that records the deadline of
// each request's context.
type deadlineRecorder struct {
	next http.RoundTripper
	seen chan time.Time
}

func (r deadlineRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	d, _ := req.Context().Deadline()
	r.seen <- d
	return r.next.RoundTrip(req)
}

// TestDeadlineCutsDownstreamHTTP: an http.Client call made with the
// handler's context carries the invocation's deadline and is cut at it; the
// error is a deadline (ErrDeadline, context.DeadlineExceeded, a url.Error
// that reports Timeout), the server sees the request end, and the outcome
// is TIMEOUT.
//
// On a loaded machine the deadline may pass before the handler runs (the
// middleware then answers TIMEOUT at once) or before the request is
// written: the server then never sees it. The test then tries again with
// twice the time, until a request reaches the server.
func TestDeadlineCutsDownstreamHTTP(t *testing.T) {
	const tries = 7 // the last with 64 times the deadline
	serverReleased := make(chan released, tries)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/slow" {
			return
		}
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
		serverReleased <- released{r.URL.RawQuery, time.Now()}
	})}
	lis := listenLoopback(t)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Close()
	transport := &http.Transport{}
	defer transport.CloseIdleConnections()
	seen := make(chan time.Time, 1)
	client := &http.Client{Transport: deadlineRecorder{transport, seen}}
	// Connect first, so the deadline measures the call, not the dial.
	if resp, err := client.Get("http://" + lis.Addr().String() + "/"); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}
	<-seen

	doubling(t, tries, "the request was written", func(try int, d time.Duration) bool {
		target := fmt.Sprintf("http://%s/slow?%d", lis.Addr(), try)
		return cutDownstreamHTTP(t, client, target, d, seen, serverReleased)
	})
}

// doubling calls try with downstreamDeadline, then with twice the time,
// and so on, until try reports that the call reached the server (what).
// It fails t when none of tries calls did.
func doubling(t *testing.T, tries int, what string, try func(n int, d time.Duration) bool) {
	t.Helper()
	d := downstreamDeadline
	for n := range tries {
		if try(n, d) {
			return
		}
		t.Logf("the %v deadline passed before %s; trying again", d, what)
		d *= 2
	}
	t.Fatalf("in none of %d tries %s", tries, what)
}

// released is when the server's handler saw the request with query q end.
type released struct {
	q  string
	at time.Time
}

// cutDownstreamHTTP makes one call of TestDeadlineCutsDownstreamHTTP with a
// deadline d from now, and reports whether its request was written. The
// write may end after the cut, so false may be wrong; true never is.
func cutDownstreamHTTP(t *testing.T, client *http.Client, target string, d time.Duration, seen chan time.Time, serverReleased chan released) bool {
	t.Helper()
	var written atomic.Bool
	trace := &httptrace.ClientTrace{WroteRequest: func(i httptrace.WroteRequestInfo) { written.Store(i.Err == nil) }}
	dl := time.Now().Add(d)
	inv := pipeline.NewInvocation(pipeline.Spec{Deadline: dl, DeadlineSource: pipeline.DeadlineOperation})
	var callErr error
	var cutAt time.Time
	ran := false
	_, err := deadline.Middleware().Invoke(context.Background(), inv, func(ctx context.Context, _ *pipeline.Invocation) (any, error) {
		ran = true
		req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodGet, target, nil)
		if err != nil {
			return nil, err
		}
		resp, err := client.Do(req)
		cutAt = time.Now()
		if resp != nil {
			resp.Body.Close()
		}
		callErr = err
		return nil, err
	})

	wantCode(t, "Invoke", err, pipeline.CodeTimeout)
	if !ran {
		return false
	}
	select {
	case d := <-seen:
		if !d.Equal(dl) {
			t.Errorf("outbound request's deadline = %v, want the invocation's %v", d, dl)
		}
	default:
		t.Error("client.Do returned without sending the request")
	}
	withinDeadline(t, "client call cut", cutAt, dl, 0)
	var ue *url.Error
	if !errors.Is(callErr, deadline.ErrDeadline) || !errors.Is(callErr, context.DeadlineExceeded) || !errors.As(callErr, &ue) || !ue.Timeout() {
		t.Errorf("client.Do error = %v, want a url.Error that reports Timeout and wraps ErrDeadline", callErr)
	}
	wantCause(t, err, callErr)
	if !written.Load() {
		return false
	}
	// A written request reaches the handler, whose context ends when the
	// client closes the connection. Earlier tries' requests may end too.
	q := strings.SplitN(target, "?", 2)[1]
	timeout := time.After(30 * time.Second)
	for {
		select {
		case r := <-serverReleased:
			if r.q == q {
				withinDeadline(t, "server saw the request end", r.at, dl, 0)
				return true
			}
		case <-timeout:
			t.Error("the server's request context never ended")
			return true
		}
	}
}

// TestDeadlineCutsDownstreamGRPC: a grpc-go call made with the handler's
// context sends the invocation's deadline as grpc-timeout (the server's
// context carries it) and is cut at it. The server is grpc-go's health
// service; its Watch stream blocks until the call's deadline ends it.
//
// grpc-timeout is relative, so the server's copy of the deadline lands a
// transit time later than the caller's; yet either side may act first: a
// loaded runtime can run the middleware's timer after the server's
// RST_STREAM arrives. The call then fails with DeadlineExceeded (grpc-go
// reads the clock when a stream is reset) or with the health service's
// Canceled "Stream has ended" — but only because the server's context hit
// that same deadline, which the test checks. The handler then waits for
// its own context, so the attributed outcome is deterministic.
//
// On a loaded machine the deadline may pass before the server answers the
// Watch's first message (or before the handler runs): the test then tries
// again with twice the time, until the server has the call.
func TestDeadlineCutsDownstreamGRPC(t *testing.T) {
	const tries = 7 // the last with 64 times the deadline
	seen := make(chan grpcServerSide, tries)
	srv := grpc.NewServer(grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		var s grpcServerSide
		md, _ := metadata.FromIncomingContext(ss.Context())
		s.try = strings.Join(md.Get("try"), ",")
		s.dl, s.hasDL = ss.Context().Deadline()
		err := h(srv, ss)
		s.ended, s.err = time.Now(), ss.Context().Err()
		seen <- s
		return err
	}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis := listenLoopback(t)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	// Connect first, so the deadline measures the call, not the dial.
	if _, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}

	doubling(t, tries, "the server answered the Watch", func(try int, d time.Duration) bool {
		return cutDownstreamGRPC(t, hc, strconv.Itoa(try), d, seen)
	})
}

// grpcServerSide is what the server of TestDeadlineCutsDownstreamGRPC saw
// of the Watch of one try.
type grpcServerSide struct {
	try   string
	dl    time.Time
	hasDL bool
	ended time.Time
	err   error // the server context's Err when the handler returned
}

// cutDownstreamGRPC makes one call of TestDeadlineCutsDownstreamGRPC with a
// deadline d from now, and reports whether the server answered its first
// message (so the server has the call).
func cutDownstreamGRPC(t *testing.T, hc healthpb.HealthClient, try string, d time.Duration, seen chan grpcServerSide) bool {
	t.Helper()
	dl := time.Now().Add(d)
	inv := pipeline.NewInvocation(pipeline.Spec{Deadline: dl, DeadlineSource: pipeline.DeadlineOperation})
	var callErr error
	var cutAt time.Time
	served := false
	_, err := deadline.Middleware().Invoke(context.Background(), inv, func(ctx context.Context, _ *pipeline.Invocation) (any, error) {
		stream, err := hc.Watch(metadata.AppendToOutgoingContext(ctx, "try", try), &healthpb.HealthCheckRequest{})
		if err == nil {
			if _, err = stream.Recv(); err == nil { // SERVING
				served = true
				_, err = stream.Recv() // blocks: nothing changes
			}
		}
		cutAt, callErr = time.Now(), err
		<-ctx.Done()
		return nil, err
	})
	wantCode(t, "Invoke", err, pipeline.CodeTimeout)
	if !served {
		return false
	}

	withinDeadline(t, "client call cut", cutAt, dl, 0)
	var s grpcServerSide
	timeout := time.After(30 * time.Second)
	for s.try != try {
		select {
		case s = <-seen: // earlier tries' calls may end too
		case <-timeout:
			t.Fatal("the server's Watch never ended")
		}
	}
	if !s.hasDL {
		t.Fatal("the server's context has no deadline: grpc-timeout was not sent")
	}
	// The server's deadline is the client's plus the time the request took
	// to arrive; grpc-timeout is rounded up, so it is never earlier.
	withinDeadline(t, "server's dl", s.dl, dl, time.Millisecond)
	withinDeadline(t, "server handler ended", s.ended, dl, 0)
	switch code := status.Code(callErr); {
	case code == codes.DeadlineExceeded:
	case code == codes.Canceled && s.err == context.DeadlineExceeded:
		// The server's copy of the same deadline ended the stream first.
	default:
		t.Errorf("Watch error = %v (code %v; server context %v), want DeadlineExceeded, or Canceled by the server's deadline", callErr, code, s.err)
	}
	return true
}

// TestErrDeadlineIsADeadlineDownstream: the cause the deadline middleware puts
// on the handler's context reads as a deadline to net/http and grpc-go; a
// cause that wrapped neither context error would read as Unknown.
func TestErrDeadlineIsADeadlineDownstream(t *testing.T) {
	if !errors.Is(deadline.ErrDeadline, context.DeadlineExceeded) {
		t.Error("errors.Is(ErrDeadline, context.DeadlineExceeded) = false, want true")
	}
	if ue := (&url.Error{Op: "Get", URL: "http://127.0.0.1/", Err: deadline.ErrDeadline}); !ue.Timeout() {
		t.Error("url.Error{Err: ErrDeadline}.Timeout() = false, want true")
	}
	if c := status.FromContextError(deadline.ErrDeadline).Code(); c != codes.DeadlineExceeded {
		t.Errorf("status.FromContextError(ErrDeadline).Code() = %v, want DeadlineExceeded", c)
	}
	if c := status.FromContextError(errors.New("deadline")).Code(); c != codes.Unknown {
		t.Errorf("status.FromContextError(plain cause).Code() = %v, want Unknown (why ErrDeadline wraps DeadlineExceeded)", c)
	}
}
