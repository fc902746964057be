package systemtest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// streamShopConfig lifts the shop's limits in the way of many streams:
// the root rate limit, the kernel's deadline cap and the stream age.
// %d is orders.watch's MaxStreams.
const streamShopConfig = `{"Sundial":{"Kernel":{"MaxTimeoutSeconds":3600,"Resilience":{
	"PermitLimit":100000000,"WindowSeconds":1,"Operations":{
	"orders.watch":{"Stream":{"MaxStreams":%d,"SendStallSeconds":30}}}}}}}`

// streamShop is `shop serve` in a process of its own.
type streamShop struct {
	url, grpcAddr string
	cmd           *exec.Cmd
	exited        chan error
}

// startStreamShop starts args (the shop binary and its first arguments)
// as `serve` with orders.watch's MaxStreams at maxStreams and the grace.
func startStreamShop(t *testing.T, args []string, env []string, maxStreams int, grace time.Duration) *streamShop {
	t.Helper()
	cfg := writeConfig(t, fmt.Sprintf(streamShopConfig, maxStreams))
	args = append(append([]string{}, args...), "serve", "--config", cfg, "--http", "127.0.0.1:0",
		"--grpc", "127.0.0.1:0", "--grace", grace.String(), "--lame-duck", "0")
	s := &streamShop{cmd: exec.Command(args[0], args[1:]...), exited: make(chan error, 1)}
	s.cmd.Env, s.cmd.Stderr = env, io.Discard
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.cmd.Process.Kill()
		<-s.exited
	})
	sc := bufio.NewScanner(stdout)
	for s.url == "" || s.grpcAddr == "" {
		if !sc.Scan() {
			_ = s.cmd.Process.Kill()
			t.Fatalf("the shop printed no addresses: %v", sc.Err())
		}
		if a, ok := strings.CutPrefix(sc.Text(), "shop: serving HTTP on "); ok {
			s.url = a
		}
		if a, ok := strings.CutPrefix(sc.Text(), "shop: serving gRPC on "); ok {
			s.grpcAddr = a
		}
	}
	go func() {
		_, _ = io.Copy(io.Discard, stdout)
		s.exited <- s.cmd.Wait()
	}()
	return s
}

// waitExit waits for the shop to exit, at most grace and 10 s more, and
// returns its error and the time since sent.
func (s *streamShop) waitExit(t *testing.T, sent time.Time, grace time.Duration) (error, time.Duration) {
	t.Helper()
	var err error
	select {
	case err = <-s.exited:
	case <-time.After(grace + 10*time.Second):
		t.Fatalf("the shop did not exit within %v of SIGTERM", grace+10*time.Second)
	}
	s.exited <- err // for the cleanup
	return err, time.Since(sent)
}

// createOrder creates one order, so that a new watch sends an event.
func (s *streamShop) createOrder(t *testing.T) {
	t.Helper()
	resp, err := http.Post(s.url+"/orders", "application/json", strings.NewReader(`{"name":"lamp","amount":1}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /orders: %d %s", resp.StatusCode, body)
	}
}

// sseWatch is one open SSE stream of orders.watch.
type sseWatch struct {
	resp *http.Response
	sc   *bufio.Scanner
}

// openSSE opens GET /orders/watch as SSE on a connection of its own. It
// returns the response status and, on 200, the stream after its first
// event.
func openSSE(ctx context.Context, url string) (int, *sseWatch, error) {
	tr := &http.Transport{DisableKeepAlives: true}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/orders/watch", nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return 0, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil, nil
	}
	w := &sseWatch{resp: resp, sc: bufio.NewScanner(resp.Body)}
	for w.sc.Scan() {
		if strings.HasPrefix(w.sc.Text(), "data: ") {
			return resp.StatusCode, w, nil
		}
	}
	resp.Body.Close()
	return resp.StatusCode, nil, fmt.Errorf("no first event: %v", w.sc.Err())
}

// outcome reads the stream to its end and returns its outcome's code and
// the SSE retry field.
func (w *sseWatch) outcome() (code, retry string, err error) {
	defer w.resp.Body.Close()
	event := ""
	for w.sc.Scan() {
		line := w.sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "retry: "):
			retry = strings.TrimPrefix(line, "retry: ")
		case event == "outcome" && strings.HasPrefix(line, "data: "):
			var o struct {
				Code string `json:"code"`
			}
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &o); err != nil {
				return "", "", err
			}
			code = o.Code
		}
	}
	if code == "" {
		return "", "", fmt.Errorf("no outcome event: %v", w.sc.Err())
	}
	return code, retry, nil
}

// grpcWatch opens shop.v1.Orders/Watch on conn and returns it after its
// first event, or the status that refused it.
func grpcWatch(ctx context.Context, conn *grpc.ClientConn) (grpc.ClientStream, error) {
	cs, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/shop.v1.Orders/Watch")
	if err != nil {
		return nil, err
	}
	// The request's fields are all zero: an empty message encodes it.
	if err := cs.SendMsg(&emptypb.Empty{}); err != nil {
		return nil, err
	}
	if err := cs.CloseSend(); err != nil {
		return nil, err
	}
	if err := cs.RecvMsg(&emptypb.Empty{}); err != nil {
		return nil, err
	}
	return cs, nil
}

// grpcOutcome reads cs to its end and returns its status.
func grpcOutcome(cs grpc.ClientStream) *status.Status {
	for {
		if err := cs.RecvMsg(&emptypb.Empty{}); err != nil {
			return status.Convert(err)
		}
	}
}

// dialShop returns n connections to the shop's gRPC listener.
func dialShop(t *testing.T, addr string, n int) []*grpc.ClientConn {
	t.Helper()
	conns := make([]*grpc.ClientConn, n)
	for i := range conns {
		c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		conns[i] = c
	}
	return conns
}

// TestShutdownDrainsOpenStreams sends SIGTERM to `shop serve`, a process
// of its own, with 1,000 open streams of orders.watch: 500 SSE, each on a
// connection of its own, and 500 gRPC server streams on 5 connections.
// Every stream gets its outcome in band, UNAVAILABLE KERNEL_UNAVAILABLE_012
// with a retry-after of one second, and the process exits 0 within its
// grace.
func TestShutdownDrainsOpenStreams(t *testing.T) {
	const sse, grpcStreams, grpcConns, grace = 500, 500, 5, 20 * time.Second
	s := startStreamShop(t, []string{os.Args[0]}, childEnv(), 2*(sse+grpcStreams), grace)
	s.createOrder(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	conns := dialShop(t, s.grpcAddr, grpcConns)
	sseStreams := make([]*sseWatch, sse)
	grpcOpen := make([]grpc.ClientStream, grpcStreams)
	var wg sync.WaitGroup
	errs := make(chan error, sse+grpcStreams)
	opened := time.Now()
	for i := range sse {
		wg.Go(func() {
			code, w, err := openSSE(ctx, s.url)
			if err == nil && w == nil {
				err = fmt.Errorf("SSE watch: status %d", code)
			}
			sseStreams[i] = w
			errs <- err
		})
	}
	for i := range grpcStreams {
		wg.Go(func() {
			cs, err := grpcWatch(ctx, conns[i%grpcConns])
			grpcOpen[i] = cs
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("opening a stream: %v", err)
		}
	}
	t.Logf("%d SSE and %d gRPC streams open after %v", sse, grpcStreams, time.Since(opened))

	sent := time.Now()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	outcomes := map[string]int{}
	count := func(k string) {
		mu.Lock()
		outcomes[k]++
		mu.Unlock()
	}
	var last time.Duration
	for _, w := range sseStreams {
		wg.Go(func() {
			code, retry, err := w.outcome()
			if err != nil {
				count("SSE " + err.Error())
				return
			}
			count("SSE " + code + " retry " + retry)
		})
	}
	for _, cs := range grpcOpen {
		wg.Go(func() {
			st := grpcOutcome(cs)
			reason, retry := "", time.Duration(0)
			if info := errorInfoOf(st); info != nil {
				reason = info.GetReason()
			}
			if ri := retryInfoOf(st); ri != nil {
				retry = ri.GetRetryDelay().AsDuration()
			}
			count(fmt.Sprintf("gRPC %v %s retry %v", st.Code(), reason, retry))
		})
	}
	wg.Wait()
	last = time.Since(sent)
	exitErr, took := s.waitExit(t, sent, grace)
	t.Logf("SIGTERM with %d open streams: every outcome %v after the signal, exit %v after %v (grace %v); outcomes %v",
		sse+grpcStreams, last, exitErr, took, grace, outcomes)
	wantSSE := "SSE KERNEL_UNAVAILABLE_012 retry 1000"
	wantGRPC := fmt.Sprintf("gRPC %v KERNEL_UNAVAILABLE_012 retry 1s", codes.Unavailable)
	if len(outcomes) != 2 || outcomes[wantSSE] != sse || outcomes[wantGRPC] != grpcStreams {
		t.Errorf("outcomes %v, want %d %q and %d %q", outcomes, sse, wantSSE, grpcStreams, wantGRPC)
	}
	if exitErr != nil || took > grace {
		t.Errorf("the shop exited with %v after %v, want 0 within its grace %v", exitErr, took, grace)
	}
}

// refusal is how the shop answered a stream it did not open.
type refusal struct {
	status     int
	code       string
	retryAfter string
}

// refusedSSE opens GET /orders/watch as SSE and returns the refusal: its
// status, Problem Details code and Retry-After; status 200 when it opened.
func refusedSSE(ctx context.Context, url string) (refusal, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/orders/watch", nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		return refusal{}, err
	}
	defer resp.Body.Close()
	r := refusal{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}
	if r.status == http.StatusOK {
		return r, nil
	}
	var p struct {
		Code string `json:"code"`
	}
	err = json.NewDecoder(resp.Body).Decode(&p)
	r.code = p.Code
	return r, err
}

// TestMaxStreamsRefusesTheNext runs `shop serve` with orders.watch's
// MaxStreams at 20 and 20 idle streams open, 10 SSE and 10 gRPC. The next
// stream is refused before its first message with UNAVAILABLE
// KERNEL_UNAVAILABLE_003: over SSE a 503 with Problem Details, over gRPC
// the status Unavailable with that ErrorInfo reason. The open streams go
// on: each still gets the event of an order created after.
func TestMaxStreamsRefusesTheNext(t *testing.T) {
	const half = 10
	s := startStreamShop(t, []string{os.Args[0]}, childEnv(), 2*half, 10*time.Second)
	s.createOrder(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	conn := dialShop(t, s.grpcAddr, 1)[0]
	var open []*sseWatch
	var openGRPC []grpc.ClientStream
	for range half {
		code, w, err := openSSE(ctx, s.url)
		if err != nil || w == nil {
			t.Fatalf("SSE watch: %d %v", code, err)
		}
		open = append(open, w)
		cs, err := grpcWatch(ctx, conn)
		if err != nil {
			t.Fatalf("gRPC watch: %v", err)
		}
		openGRPC = append(openGRPC, cs)
	}
	r, err := refusedSSE(ctx, s.url)
	t.Logf("SSE stream %d: %+v, %v", 2*half+1, r, err)
	if err != nil || r.status != http.StatusServiceUnavailable || r.code != "KERNEL_UNAVAILABLE_003" {
		t.Errorf("SSE stream past MaxStreams: %+v, %v; want 503 KERNEL_UNAVAILABLE_003", r, err)
	}
	_, err = grpcWatch(ctx, conn)
	st := status.Convert(err)
	reason := ""
	if info := errorInfoOf(st); info != nil {
		reason = info.GetReason()
	}
	t.Logf("gRPC stream %d: %v %s", 2*half+1, st.Code(), reason)
	if st.Code() != codes.Unavailable || reason != "KERNEL_UNAVAILABLE_003" {
		t.Errorf("gRPC stream past MaxStreams: %v; want Unavailable KERNEL_UNAVAILABLE_003", err)
	}
	s.createOrder(t)
	for i, w := range open {
		if ev, _, err := w.next(); err != nil || ev != "message" {
			t.Errorf("open SSE stream %d: no event after the refusal: %v", i, err)
		}
	}
	for i, cs := range openGRPC {
		if err := cs.RecvMsg(&emptypb.Empty{}); err != nil {
			t.Errorf("open gRPC stream %d: no event after the refusal: %v", i, err)
		}
	}
}

// next returns the stream's next event: its name and data.
func (w *sseWatch) next() (event, data string, err error) {
	for w.sc.Scan() {
		line := w.sc.Text()
		if e, ok := strings.CutPrefix(line, "event: "); ok {
			event = e
		}
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			return event, d, nil
		}
	}
	return "", "", fmt.Errorf("stream ended: %v", w.sc.Err())
}
