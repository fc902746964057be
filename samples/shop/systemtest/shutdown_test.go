package systemtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/samples/shop/internal/shopcmd"
)

// runningShop is serve on 127.0.0.1 in the background, stopped by stop.
type runningShop struct {
	url, grpcAddr string
	logs          shopLogs
	cancel        context.CancelFunc
	done          chan error
}

// startServe runs serve(o) on 127.0.0.1 until stop (or the end of the test).
func startServe(t *testing.T, o shopcmd.ServeOptions) *runningShop {
	t.Helper()
	out := &syncBuffer{}
	s := &runningShop{logs: newShopLogs(), done: make(chan error, 1)}
	o.HTTPAddr, o.GRPCAddr, o.Stdout, o.Logger = "127.0.0.1:0", "127.0.0.1:0", out, s.logs.Logger()
	addr := make(chan string, 1)
	o.Ready = func(a string) { addr <- a }
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go func() { s.done <- shopcmd.Serve(ctx, o) }()
	select {
	case a := <-addr:
		s.url = "http://" + a
	case err := <-s.done:
		cancel()
		t.Fatalf("serve() = %v before listening", err)
	}
	s.grpcAddr = grpcAddrOf(t, out)
	t.Cleanup(cancel)
	return s
}

// stop cancels serve's context (what SIGTERM does) and returns serve's
// result and how long it took, failing the test past max.
func (s *runningShop) stop(t *testing.T, max time.Duration) (error, time.Duration) {
	t.Helper()
	start := time.Now()
	s.cancel()
	select {
	case err := <-s.done:
		return err, time.Since(start)
	case <-time.After(max + 5*time.Second):
		t.Fatalf("serve did not return within %v of the signal", max+5*time.Second)
		return nil, 0
	}
}

// errorRecords returns the log records at level ERROR or WARN.
func (s *runningShop) errorRecords() []string {
	var out []string
	for _, line := range strings.Split(s.logs.String(), "\n") {
		if strings.Contains(line, `"level":"ERROR"`) || strings.Contains(line, `"level":"WARN"`) {
			out = append(out, line)
		}
	}
	return out
}

// TestShutdownEndsInfrastructureStreams: an open health Watch or reflection
// stream no longer holds the graceful stop for the whole grace period: serve
// returns nil well within a second, the watcher is told NOT_SERVING before
// its stream ends with Unavailable.
func TestShutdownEndsInfrastructureStreams(t *testing.T) {
	for _, kind := range []string{"health Watch", "reflection", "both"} {
		t.Run(kind, func(t *testing.T) {
			s := startServe(t, shopcmd.ServeOptions{Grace: 5 * time.Second})
			conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx := t.Context()
			var watch grpc.ServerStreamingClient[healthpb.HealthCheckResponse]
			if kind != "reflection" {
				watch, err = healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{})
				if err != nil {
					t.Fatal(err)
				}
				if r, err := watch.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
					t.Fatalf("first Watch status = %v, %v; want SERVING", r, err)
				}
			}
			var refl grpc.BidiStreamingClient[reflectionpb.ServerReflectionRequest, reflectionpb.ServerReflectionResponse]
			if kind != "health Watch" {
				refl, err = reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if err := refl.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
					t.Fatal(err)
				}
				if _, err := refl.Recv(); err != nil {
					t.Fatal(err)
				}
				// The stream stays open: the client neither sends nor
				// closes its side.
			}
			err, took := s.stop(t, time.Second)
			t.Logf("serve() = %v, %v after the signal (grace 5s)", err, took)
			if err != nil || took > time.Second {
				t.Errorf("serve() = %v after %v with an open %s stream, want nil within 1s", err, took, kind)
			}
			if recs := s.errorRecords(); len(recs) > 0 {
				t.Errorf("error records at shutdown:\n%s", strings.Join(recs, "\n"))
			}
			if watch != nil {
				r, err := watch.Recv()
				if err != nil || r.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
					t.Errorf("Watch after the signal = %v, %v; want NOT_SERVING", r, err)
				}
				if _, err := watch.Recv(); status.Code(err) != codes.Unavailable {
					t.Errorf("Watch end = %v, want Unavailable", err)
				}
			}
			if refl != nil {
				if _, err := refl.Recv(); status.Code(err) != codes.Unavailable {
					t.Errorf("reflection stream end = %v, want Unavailable", err)
				}
			}
		})
	}
}

// TestShutdownWithoutTrafficIsClean stops an idle shop ten times: serve
// returns nil every time, with no error record.
func TestShutdownWithoutTrafficIsClean(t *testing.T) {
	var slowest time.Duration
	for i := range 10 {
		s := startServe(t, shopcmd.ServeOptions{Grace: 2 * time.Second})
		err, took := s.stop(t, time.Second)
		if err != nil {
			t.Errorf("shutdown %d: serve() = %v, want nil", i+1, err)
		}
		if recs := s.errorRecords(); len(recs) > 0 {
			t.Errorf("shutdown %d: error records:\n%s", i+1, strings.Join(recs, "\n"))
		}
		slowest = max(slowest, took)
	}
	t.Logf("10 shutdowns without traffic: 0 errors expected, slowest %v", slowest)
}

// TestShutdownGRPCNotBlamedForHTTPGrace exhausts the grace period with an
// HTTP call: serve reports the HTTP shutdown, and the gRPC server, drained
// long before, is not reported as having canceled calls (the select between
// "drained" and "grace over", both ready, used to pick at random).
func TestShutdownGRPCNotBlamedForHTTPGrace(t *testing.T) {
	for i := range 6 {
		p := newProbe()
		s := startServe(t, shopcmd.ServeOptions{Grace: 200 * time.Millisecond, KernelOptions: []kernel.Option{kernel.UseAt(pipeline.StageHandle, p)}})
		go func() {
			resp, err := http.Post(s.url+"/reports/export", "application/json", strings.NewReader(`{"delayMs":5000}`))
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
		<-p.started // the call runs
		err, _ := s.stop(t, time.Second)
		if err == nil || !strings.Contains(err.Error(), "http shutdown") {
			t.Errorf("run %d: serve() = %v, want the HTTP shutdown's exhausted grace", i+1, err)
		}
		if err != nil && strings.Contains(err.Error(), "grpc") {
			t.Errorf("run %d: serve() = %v, want no gRPC error (no gRPC call ran)", i+1, err)
		}
	}
}

// ordersCounter counts the orders.create calls that reached the handler:
// requests the server read and ran.
type ordersCounter struct{ n atomic.Int64 }

func (c *ordersCounter) Invoke(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
	if inv.OperationID() == "orders.create" {
		c.n.Add(1)
	}
	return next(ctx, inv)
}

// loadCounts are the outcomes of the clients' requests.
type loadCounts struct {
	answered     atomic.Int64 // a complete response
	answeredPost atomic.Int64 // ... to POST /orders with 201
	refused      atomic.Int64 // no connection: never read
	freshLost    atomic.Int64 // EOF/RST on a new connection (in the listener's backlog when it closed: never accepted)
	reusedLost   atomic.Int64 // EOF/RST on an accepted keep-alive connection after the full request was written
	other        atomic.Int64
}

// TestShutdownUnderLoadAnswersEveryReadRequest stops the shop while 20
// clients POST /orders in a loop on keep-alive connections: with a lame
// duck period, every request written on an accepted keep-alive connection
// gets a complete response, and every order the server ran was answered.
func TestShutdownUnderLoadAnswersEveryReadRequest(t *testing.T) {
	const clients = 20
	limits := kernel.WithConfigJSON([]byte(`{"Sundial":{"Kernel":{"Resilience":{"PermitLimit":100000000,
		"Operations":{"orders.create":{"PermitLimit":100000000,"WindowSeconds":1,"ConcurrencyLimit":1000}}}}}}`))
	for _, lameDuck := range []time.Duration{0, 300 * time.Millisecond} {
		t.Run(fmt.Sprintf("lame duck %v", lameDuck), func(t *testing.T) {
			ran := &ordersCounter{}
			s := startServe(t, shopcmd.ServeOptions{Grace: 5 * time.Second, LameDuck: lameDuck,
				KernelOptions: []kernel.Option{limits, kernel.UseAt(pipeline.StageHandle, ran)}})
			var c loadCounts
			var stopClients atomic.Bool
			var wg sync.WaitGroup
			for range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					tr := &http.Transport{MaxIdleConnsPerHost: 1}
					defer tr.CloseIdleConnections()
					client := &http.Client{Transport: tr}
					for !stopClients.Load() {
						loadOnce(client, s.url, &c)
					}
				}()
			}
			time.Sleep(300 * time.Millisecond) // under load
			before := c.answered.Load()
			err, took := s.stop(t, 5*time.Second)
			time.Sleep(50 * time.Millisecond) // clients see the closed listener
			stopClients.Store(true)
			wg.Wait()
			t.Logf("lame duck %v: serve() = %v after %v; %d answered before the signal, %d in all (%d POST /orders 201, %d orders run by the server); "+
				"%d refused, %d lost on a fresh connection (never accepted), %d lost on an accepted keep-alive connection, %d other errors",
				lameDuck, err, took, before, c.answered.Load(), c.answeredPost.Load(), ran.n.Load(),
				c.refused.Load(), c.freshLost.Load(), c.reusedLost.Load(), c.other.Load())
			if err != nil {
				t.Errorf("serve() = %v, want nil", err)
			}
			if ran.n.Load() != c.answeredPost.Load() {
				t.Errorf("the server ran %d orders, the clients got %d answers: a request was read and not answered", ran.n.Load(), c.answeredPost.Load())
			}
			if lameDuck > 0 && c.reusedLost.Load() != 0 {
				t.Errorf("%d requests written on accepted keep-alive connections got EOF/RST, want 0", c.reusedLost.Load())
			}
			if c.other.Load() != 0 {
				t.Errorf("%d requests failed otherwise", c.other.Load())
			}
		})
	}
}

// loadOnce sends one POST /orders and counts its outcome.
func loadOnce(client *http.Client, url string, c *loadCounts) {
	var reused, wrote atomic.Bool
	trace := &httptrace.ClientTrace{
		GotConn:      func(i httptrace.GotConnInfo) { reused.Store(i.Reused) },
		WroteRequest: func(i httptrace.WroteRequestInfo) { wrote.Store(i.Err == nil) },
	}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace),
		"POST", url+"/orders", strings.NewReader(`{"name":"widget","amount":1}`))
	if err != nil {
		panic(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err == nil {
			c.answered.Add(1)
			if resp.StatusCode == http.StatusCreated {
				c.answeredPost.Add(1)
			}
			return
		}
	}
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		c.refused.Add(1)
		time.Sleep(time.Millisecond)
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || isClosedConn(err):
		if reused.Load() && wrote.Load() {
			c.reusedLost.Add(1)
		} else {
			c.freshLost.Add(1)
		}
	default:
		c.other.Add(1)
	}
}

func isClosedConn(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne) || strings.Contains(err.Error(), "server closed idle connection")
}

// TestShutdownLameDuck: during --lame-duck the shop fails readiness and
// keeps serving — gRPC health Check answers NOT_SERVING at once while
// calls on an open connection are answered, GET /healthz answers 503 and
// every HTTP response says Connection: close; then it drains: GOAWAY, a
// call that runs across the end of the lame-duck period is answered and
// serve returns nil; new calls are refused (Unavailable).
func TestShutdownLameDuck(t *testing.T) {
	const lameDuck, longCall = time.Second, 1500 * time.Millisecond
	p := newProbe()
	s := startServe(t, shopcmd.ServeOptions{Grace: 5 * time.Second, LameDuck: lameDuck, KernelOptions: []kernel.Option{kernel.UseAt(pipeline.StageHandle, p)}})
	conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	g := &grpcShop{conn: conn, files: reflectServer(t, conn)}
	health := healthpb.NewHealthClient(conn)
	check := func() healthpb.HealthCheckResponse_ServingStatus {
		r, err := health.Check(t.Context(), &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatalf("health Check: %v", err)
		}
		return r.GetStatus()
	}
	if st := check(); st != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health before the signal = %v, want SERVING", st)
	}

	signalled := time.Now()
	s.cancel() // what SIGTERM does
	for check() != healthpb.HealthCheckResponse_NOT_SERVING {
		if time.Since(signalled) > lameDuck/2 {
			t.Fatalf("health still SERVING %v after the signal", time.Since(signalled))
		}
		time.Sleep(5 * time.Millisecond)
	}
	notServing := time.Since(signalled)
	if _, st := g.call(t.Context(), t, "shop.v1.Orders", "Create", `{"name":"widget","amount":1}`); st.Code() != codes.OK {
		t.Fatalf("orders.create in the lame-duck period = %v, want OK", st)
	}
	served := time.Since(signalled)
	httpGet := func(path string) (int, bool) {
		resp, err := http.Get(s.url + path)
		if err != nil {
			t.Fatalf("GET %s in the lame-duck period: %v", path, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Close // Connection: close
	}
	healthz, healthzConn := httpGet("/healthz")
	order, orderConn := httpGet("/orders/ord-1")
	if healthz != http.StatusServiceUnavailable || order != http.StatusOK || !healthzConn || !orderConn {
		t.Errorf("HTTP in the lame-duck period: /healthz %d (Connection: close %v), /orders/ord-1 %d (Connection: close %v); want 503 and 200, both closing",
			healthz, healthzConn, order, orderConn)
	}
	long := make(chan *status.Status, 1)
	go func() {
		_, st := g.call(context.Background(), t, "shop.v1.Reports", "Export", fmt.Sprintf(`{"delayMs":%d}`, longCall.Milliseconds()))
		long <- st
	}()
	for op := range p.started {
		if op == "reports.export" {
			break
		}
	}
	longStarted := time.Since(signalled)
	if served > lameDuck || longStarted > lameDuck {
		t.Fatalf("the calls ran %v and %v after the signal, past the lame-duck period (%v): too slow a machine to test it", served, longStarted, lameDuck)
	}
	// The drain: new calls are refused while the long one runs on.
	var refused time.Duration
	var refusedWhileRunning bool
	for {
		_, st := g.call(t.Context(), t, "shop.v1.Orders", "Get", `{"id":"ord-1"}`)
		if st.Code() == codes.Unavailable {
			refused, refusedWhileRunning = time.Since(signalled), len(long) == 0
			break
		}
		if st.Code() != codes.OK {
			t.Fatalf("orders.get %v after the signal = %v, want OK (lame duck) or Unavailable (drain)", time.Since(signalled), st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	err = <-s.done
	stopped := time.Since(signalled)
	st := <-long
	_, after := g.call(t.Context(), t, "shop.v1.Orders", "Get", `{"id":"ord-1"}`)
	t.Logf("lame duck %v: health NOT_SERVING %v after the signal, orders.create answered OK at %v; HTTP /healthz %d, /orders/ord-1 %d, Connection: close %v; new calls refused from %v (reports.export still running: %v); reports.export (%v) started at %v answered %v; serve() = %v after %v; a new call then: %v",
		lameDuck, notServing.Round(time.Millisecond), served.Round(time.Millisecond), healthz, order, healthzConn && orderConn, refused.Round(time.Millisecond), refusedWhileRunning,
		longCall, longStarted.Round(time.Millisecond), st.Code(), err, stopped.Round(time.Millisecond), after.Code())
	if refused < lameDuck {
		t.Errorf("new calls refused %v after the signal, within the lame-duck period (%v)", refused, lameDuck)
	}
	if !refusedWhileRunning {
		t.Errorf("new calls were still served after the in-flight call ended, want them refused from the end of the lame-duck period")
	}
	if st.Code() != codes.OK {
		t.Errorf("the call running across the drain = %v, want OK", st)
	}
	if err != nil {
		t.Errorf("serve() = %v, want nil", err)
	}
	if stopped < longStarted+longCall-50*time.Millisecond {
		t.Errorf("serve returned %v after the signal, before the in-flight call could finish (%v)", stopped, longStarted+longCall)
	}
	if after.Code() != codes.Unavailable {
		t.Errorf("a new call after the drain = %v, want Unavailable", after)
	}
}

// gate holds orders.get calls on entry until release is closed.
type gate struct {
	entered chan struct{}
	release chan struct{}
}

func (g *gate) Invoke(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
	if inv.OperationID() == "orders.get" {
		g.entered <- struct{}{}
		<-g.release
	}
	return next(ctx, inv)
}

// TestShutdownClosesKeptAliveConnectionsOfEarlierCalls: a call that began
// on a keep-alive connection before the signal and answers during the
// lame duck says Connection: close, like the calls that begin after it,
// so that its client does not keep a connection the drain will close as
// it sends its next request; that next request, on a new connection, is
// answered.
func TestShutdownClosesKeptAliveConnectionsOfEarlierCalls(t *testing.T) {
	g := &gate{entered: make(chan struct{}, 1), release: make(chan struct{})}
	s := startServe(t, shopcmd.ServeOptions{Grace: 5 * time.Second, LameDuck: 2 * time.Second,
		KernelOptions: []kernel.Option{kernel.UseAt(pipeline.StageHandle, g)}})
	var reused []bool
	var mu sync.Mutex
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		mu.Lock()
		reused = append(reused, i.Reused)
		mu.Unlock()
	}}
	tr := &http.Transport{MaxIdleConnsPerHost: 1}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	get := func(path string) (*http.Response, error) {
		req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET", s.url+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}
	if _, err := get("/healthz"); err != nil { // a kept-alive connection
		t.Fatal(err)
	}
	type result struct {
		resp *http.Response
		err  error
	}
	held := make(chan result, 1)
	go func() {
		resp, err := get("/orders/o-1")
		held <- result{resp, err}
	}()
	<-g.entered
	s.cancel() // the signal: the lame duck begins
	probe := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		resp, err := probe.Get(s.url + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusServiceUnavailable {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("/healthz never failed after the signal")
		}
	}
	close(g.release)
	r := <-held
	if r.err != nil {
		t.Fatalf("the call begun before the signal = %v, want an answer", r.err)
	}
	if !r.resp.Close {
		t.Errorf("the call begun before the signal answered during the lame duck without Connection: close (header %q)",
			r.resp.Header.Get("Connection"))
	}
	next, err := get("/healthz")
	if err != nil || next.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("the next request = %v, %v; want the lame duck's 503", next, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []bool{false, true, false}; !slices.Equal(reused, want) {
		t.Errorf("connections reused: %v, want %v (the next request on a new connection)", reused, want)
	}
	if err := <-s.done; err != nil {
		t.Errorf("serve() = %v, want nil", err)
	}
}
