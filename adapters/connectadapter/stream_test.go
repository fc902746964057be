package connectadapter_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	rstream "github.com/sundial-go/sundial/resilience/stream"
)

// Streaming test operations.

type tick struct {
	N   int    `json:"n"`
	Pad string `json:"pad"`
}

type watchIn struct {
	Count int  `json:"count"` // ticks to send
	Wait  bool `json:"wait"`  // then wait for the context to end
	Flood int  `json:"flood"` // then send ticks of this many bytes until Send fails
}

// feed records how its handlers' contexts ended.
type feed struct {
	ended chan error
	sent  chan int // capped's messages sent before its context ended
}

// capped is watch that records how many messages it sent before its
// context ended, then how the context ended.
func (f *feed) capped(ctx context.Context, in watchIn, out *operations.Sender[tick]) error {
	n := 0
	for ; n < in.Count; n++ {
		if out.Send(tick{N: n + 1}) != nil {
			break
		}
	}
	<-ctx.Done()
	f.sent <- n
	f.ended <- context.Cause(ctx)
	return ctx.Err()
}

func (f *feed) watch(ctx context.Context, in watchIn, out *operations.Sender[tick]) error {
	for i := range in.Count {
		if err := out.Send(tick{N: i + 1}); err != nil {
			return err
		}
	}
	if in.Flood > 0 {
		b := make([]byte, in.Flood/2)
		_, _ = rand.Read(b)
		pad := hex.EncodeToString(b) // random: compression cannot absorb the flood
		for {
			if err := out.Send(tick{Pad: pad}); err != nil {
				f.ended <- context.Cause(ctx)
				return err
			}
		}
	}
	if in.Wait {
		<-ctx.Done()
		f.ended <- context.Cause(ctx)
		return ctx.Err()
	}
	return nil
}

func (f *feed) sum(_ context.Context, in *operations.Receiver[tick]) (tick, error) {
	var s tick
	for {
		m, err := in.Recv()
		if err == io.EOF {
			return s, nil
		}
		if err != nil {
			return tick{}, err
		}
		s.N += m.N
	}
}

func (f *feed) echo(ctx context.Context, in *operations.Receiver[tick], out *operations.Sender[tick]) error {
	for {
		m, err := in.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			f.ended <- context.Cause(ctx)
			return err
		}
		if err := out.Send(m); err != nil {
			return err
		}
	}
}

// cause returns how the next handler's context ended, failing the test
// when none ends within 10 s.
func (f *feed) cause(t testing.TB) error {
	t.Helper()
	select {
	case err := <-f.ended:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("no handler's context ended")
		return nil
	}
}

const streamConfig = `{"Sundial":{"Kernel":{"MaxTimeoutSeconds":30,"Resilience":{"Operations":{
	"feed.capped":{"TimeoutSeconds":0.3},
	"feed.quiet":{"Stream":{"IdleSeconds":0.3}},
	"feed.quiet-echo":{"Stream":{"IdleSeconds":0.3}},
	"feed.flood":{"Stream":{"SendStallSeconds":0.2}},
	"feed.limited":{"PermitLimit":1,"WindowSeconds":60,"RateLimitHeaders":true}
}}}}}`

// cappedTimeout is feed.capped's TimeoutSeconds in streamConfig.
const cappedTimeout = 300 * time.Millisecond

// cappedConfig is streamConfig with feed.capped's TimeoutSeconds d.
func cappedConfig(t testing.TB, d time.Duration) string {
	t.Helper()
	const capped = `"feed.capped":{"TimeoutSeconds":0.3}`
	if !strings.Contains(streamConfig, capped) {
		t.Fatalf("streamConfig has no %s", capped)
	}
	return strings.Replace(streamConfig, capped,
		`"feed.capped":{"TimeoutSeconds":`+strconv.FormatFloat(d.Seconds(), 'g', -1, 64)+`}`, 1)
}

// newStreamServer serves the feed operations.
func newStreamServer(t testing.TB) (*server, *feed) {
	t.Helper()
	return newStreamServerConfig(t, streamConfig)
}

// newStreamServerConfig serves the feed operations with the kernel's
// configuration config.
func newStreamServerConfig(t testing.TB, config string) (*server, *feed) {
	t.Helper()
	f := &feed{ended: make(chan error, 64), sent: make(chan int, 64)}
	s := startServer(t, func(t testing.TB, reg *operations.Registry) {
		t.Helper()
		for _, err := range []error{
			operations.RegisterServerStream(reg, operations.Descriptor{ID: "feed.watch"}, f.watch),
			operations.RegisterServerStream(reg, operations.Descriptor{ID: "feed.capped"}, f.capped),
			operations.RegisterServerStream(reg, operations.Descriptor{ID: "feed.quiet"}, f.watch),
			operations.RegisterServerStream(reg, operations.Descriptor{ID: "feed.limited"}, f.watch),
			operations.RegisterServerStream(reg, operations.Descriptor{ID: "feed.flood"}, f.watch),
			operations.RegisterClientStream(reg, operations.Descriptor{ID: "feed.sum"}, f.sum),
			operations.RegisterBidiStream(reg, operations.Descriptor{ID: "feed.echo"}, f.echo),
			operations.RegisterBidiStream(reg, operations.Descriptor{ID: "feed.quiet-echo"}, f.echo),
		} {
			if err != nil {
				t.Fatal(err)
			}
		}
	}, config)
	return s, f
}

// streamProtocol is one protocol a stream is called with.
type streamProtocol struct {
	name string
	h2c  bool // HTTP/2 without TLS; else HTTP/1.1
	opts []connect.ClientOption
}

// streamProtocols returns the protocols under test. Bidi streams need
// HTTP/2 (h2), which gRPC always does.
func streamProtocols(h2 bool) []streamProtocol {
	return []streamProtocol{
		{"connect+json", h2, []connect.ClientOption{connect.WithProtoJSON()}},
		{"grpcweb", h2, []connect.ClientOption{connect.WithGRPCWeb()}},
		{"grpc", true, []connect.ClientOption{connect.WithGRPC()}},
	}
}

// tickMsg returns a tick message of the procedure full's input type.
func (s *server) tickMsg(t testing.TB, full string, n int) *dynamicpb.Message {
	t.Helper()
	return s.request(t, full, `{"n":`+itoa(n)+`}`).Msg
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// watch opens a server stream of full with the request js and returns
// the n fields of its messages and the error that ended it (nil: OK).
func (s *server) watch(ctx context.Context, t testing.TB, p streamProtocol, full, js string) ([]string, error) {
	t.Helper()
	return s.watchWith(ctx, t, p, full, js, 0)
}

// watchWith is watch with the caller's deadline sent as a timeout header
// (timeout > 0) from a context without one. Its client then never resets
// the stream at its own deadline, a race with the server's timer that a
// transit longer than the tolerance would turn into a cancel.
func (s *server) watchWith(ctx context.Context, t testing.TB, p streamProtocol, full, js string, timeout time.Duration) ([]string, error) {
	t.Helper()
	c := s.client(t, httpClient(t, p.h2c), full, p.opts...)
	req := s.request(t, full, js)
	if timeout > 0 {
		ms := strconv.FormatInt(timeout.Milliseconds(), 10)
		if strings.HasPrefix(p.name, "grpc") {
			req.Header().Set("Grpc-Timeout", ms+"m")
		} else {
			req.Header().Set("Connect-Timeout-Ms", ms)
		}
	}
	ss, err := c.CallServerStream(ctx, req)
	if err != nil {
		return nil, err
	}
	defer ss.Close()
	var ns []string
	for ss.Receive() {
		ns = append(ns, field(ss.Msg(), "n"))
	}
	return ns, ss.Err()
}

// asConnect returns err as a *connect.Error, failing the test if it is not.
func asConnect(t testing.TB, err error) *connect.Error {
	t.Helper()
	ce, ok := errors.AsType[*connect.Error](err)
	if !ok {
		t.Fatalf("error %v (%T) is not a connect error", err, err)
	}
	return ce
}

// TestStreamKindsOverConnect: each kind of stream over Connect (JSON),
// gRPC-Web and gRPC. The messages arrive in order, and each call is one
// invocation of protocol connect, logged.
func TestStreamKindsOverConnect(t *testing.T) {
	s, _ := newStreamServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for _, p := range streamProtocols(false) {
		ns, err := s.watch(ctx, t, p, "/test.v1.Feed/Watch", `{"count":5}`)
		if err != nil || strings.Join(ns, ",") != "1,2,3,4,5" {
			t.Errorf("%s server stream: %v, %v; want 1..5", p.name, ns, err)
		}

		c := s.client(t, httpClient(t, p.h2c), "/test.v1.Feed/Sum", p.opts...)
		cs := c.CallClientStream(ctx)
		for i := 1; i <= 4; i++ {
			if err := cs.Send(s.tickMsg(t, "/test.v1.Feed/Sum", i)); err != nil {
				t.Fatalf("%s client stream: Send: %v", p.name, err)
			}
		}
		res, err := cs.CloseAndReceive()
		if err != nil || field(res.Msg, "n") != "10" {
			t.Errorf("%s client stream: %v, %v; want n=10", p.name, res, err)
		}
	}
	for _, p := range streamProtocols(true) {
		c := s.client(t, httpClient(t, true), "/test.v1.Feed/Echo", p.opts...)
		bs := c.CallBidiStream(ctx)
		for i := 1; i <= 5; i++ {
			if err := bs.Send(s.tickMsg(t, "/test.v1.Feed/Echo", i)); err != nil {
				t.Fatalf("%s bidi: Send: %v", p.name, err)
			}
			got, err := bs.Receive()
			if err != nil || field(got, "n") != itoa(i) {
				t.Fatalf("%s bidi: message %d: %v, %v", p.name, i, got, err)
			}
		}
		if err := bs.CloseRequest(); err != nil {
			t.Fatal(err)
		}
		if got, err := bs.Receive(); !errors.Is(err, io.EOF) {
			t.Errorf("%s bidi after the last message: %v, %v; want EOF", p.name, got, err)
		}
		_ = bs.CloseResponse()
	}
	waitLog(t, s, logMessage, "method=/test.v1.Feed/Echo", "grpcCode=OK")
	waitLog(t, s, logMessage, "method=/test.v1.Feed/Sum", "grpcCode=OK")
}

// logMessage is the message of a Connect call's log record.
const logMessage = "connect call"

// TestStreamDeadlineMidStream: the operation's deadline passes while the
// handler waits after two messages. The caller gets every message the
// handler sent before it (both, unless the machine is slower than the
// 300ms deadline), then deadline_exceeded with KERNEL_TIMEOUT_001 in the
// error's details, and the handler's context ends with the deadline.
//
// On a loaded machine the 300ms can pass before the kernel starts the
// handler, and it then never runs it. Such a call is made again on a
// server whose feed.capped has ten times the deadline, three tries in
// all.
func TestStreamDeadlineMidStream(t *testing.T) {
	s0, f0 := newStreamServer(t)
	for _, p := range streamProtocols(false) {
		s, f, d := s0, f0, cappedTimeout
		for try := 1; ; try++ {
			// The caller's deadline is 20 s past the operation's.
			ctx, cancel := context.WithTimeout(t.Context(), d+20*time.Second)
			start := time.Now()
			ns, err := s.watch(ctx, t, p, "/test.v1.Feed/Capped", `{"count":2,"wait":true}`)
			took := time.Since(start)
			cancel()
			ce := asConnect(t, err)
			// The stream's end leaves once its handler has returned: a
			// handler that ran has told what it sent by now.
			sent, ran := 0, false
			select {
			case sent = <-f.sent:
				ran = true
			default:
			}
			if ran {
				if len(ns) != sent || ce.Code() != connect.CodeDeadlineExceeded || errorInfo(t, ce).Reason != "KERNEL_TIMEOUT_001" {
					t.Errorf("%s: %v, %v; want the %d messages sent, then deadline_exceeded KERNEL_TIMEOUT_001", p.name, ns, err, sent)
				}
				if took < d {
					t.Errorf("%s: the stream ended after %v, before its %v deadline", p.name, took, d)
				}
				if cause := f.cause(t); !errors.Is(cause, context.DeadlineExceeded) {
					t.Errorf("%s: the handler's context ended with %v, want the deadline", p.name, cause)
				}
				break
			}
			if len(ns) != 0 || ce.Code() != connect.CodeDeadlineExceeded || errorInfo(t, ce).Reason != "KERNEL_TIMEOUT_001" {
				t.Fatalf("%s: %v, %v without running the handler; want deadline_exceeded KERNEL_TIMEOUT_001", p.name, ns, err)
			}
			if try == 3 {
				t.Fatalf("%s: feed.capped's handler did not start before its deadline in three tries (the last %v)", p.name, d)
			}
			t.Logf("%s: feed.capped (deadline %v) ended without running its handler: once more with %v", p.name, d, 10*d)
			d *= 10
			s, f = newStreamServerConfig(t, cappedConfig(t, d))
		}
	}
}

// TestStreamCallersDeadline: the caller's deadline (Connect-Timeout-Ms,
// grpc-timeout) is the stream's, as for a unary call: the handler's
// context ends with it, and the call is logged KERNEL_TIMEOUT_001.
func TestStreamCallersDeadline(t *testing.T) {
	s, f := newStreamServer(t)
	calls := 0
	for _, p := range streamProtocols(false) {
		ns, cause, n, err := s.watchToItsWait(t, f, p, time.Second)
		calls += n
		if connect.CodeOf(err) != connect.CodeDeadlineExceeded {
			t.Errorf("%s: %v, %v; want deadline_exceeded", p.name, ns, err)
		}
		if !errors.Is(cause, context.DeadlineExceeded) {
			t.Errorf("%s: the handler's context ended with %v, want the deadline", p.name, cause)
		}
	}
	if n := len(s.logs.Find(func(r pipelinetest.Record) bool {
		return r.Message == logMessage && r.Attrs["method"] == "/test.v1.Feed/Watch" && r.Attrs["code"] == "KERNEL_TIMEOUT_001"
	})); n != calls {
		t.Errorf("%d calls logged KERNEL_TIMEOUT_001, want %d: %v", n, calls, s.logs.Records())
	}
}

// watchToItsWait calls feed.watch for one message, then a wait until its
// context ends, with the caller's deadline d sent as a timeout header
// (watchWith). It returns the messages of the call whose handler got to
// its wait, the cause its context ended with, the calls made, and that
// call's error.
//
// On a loaded machine d can pass before the handler gets to its wait:
// the kernel never starts a handler whose deadline has passed, and one
// that starts just before fails its Send. Either way the handler records
// no end. Such a call is made again with ten times the deadline, at most
// the 30 s of streamConfig's MaxTimeoutSeconds, three tries in all.
func (s *server) watchToItsWait(t *testing.T, f *feed, p streamProtocol, d time.Duration) (ns []string, cause error, calls int, err error) {
	t.Helper()
	const maxTimeout = 30 * time.Second
	for calls = 1; ; calls++ {
		// The stream ends at its deadline; the bound, 20 s past it, is for
		// one that does not. It cancels the call's context rather than
		// give it a deadline, which the client would send (watchWith).
		ctx, cancel := context.WithCancel(t.Context())
		bound := time.AfterFunc(d+20*time.Second, cancel)
		ns, err = s.watchWith(ctx, t, p, "/test.v1.Feed/Watch", `{"count":1,"wait":true}`, d)
		expired := !bound.Stop()
		cancel()
		if expired {
			t.Fatalf("%s: the stream did not end within 20 s of its %v deadline: %v, %v", p.name, d, ns, err)
		}
		// The stream's end leaves once its handler has returned: a
		// handler that got to its wait has recorded its end by now.
		select {
		case cause = <-f.ended:
			return ns, cause, calls, err
		default:
		}
		if connect.CodeOf(err) != connect.CodeDeadlineExceeded {
			t.Fatalf("%s: %v, %v before the handler got to its wait; want deadline_exceeded", p.name, ns, err)
		}
		if calls == 3 {
			t.Fatalf("%s: feed.watch's handler did not get to its wait before the deadline in three tries (the last %v)", p.name, d)
		}
		t.Logf("%s: feed.watch (deadline %v) ended before its handler got to its wait: once more with %v", p.name, d, min(10*d, maxTimeout))
		d = min(10*d, maxTimeout)
	}
}

// TestStreamIdle: with an idle timeout, a silent handler (server stream)
// and a silent caller (bidi stream) end the stream with
// deadline_exceeded, KERNEL_TIMEOUT_003, naming who was silent.
func TestStreamIdle(t *testing.T) {
	s, _ := newStreamServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for _, p := range streamProtocols(false) {
		ns, err := s.watch(ctx, t, p, "/test.v1.Feed/Quiet", `{"count":1,"wait":true}`)
		ce := asConnect(t, err)
		info := errorInfo(t, ce)
		if len(ns) != 1 || ce.Code() != connect.CodeDeadlineExceeded || info.Reason != rstream.CodeIdle ||
			info.Metadata[rstream.DetailSilent] != "handler" {
			t.Errorf("%s server stream: %v, %v %v; want 1 message, then %s silent=handler",
				p.name, ns, err, info.Metadata, rstream.CodeIdle)
		}
	}
	for _, p := range streamProtocols(true) {
		c := s.client(t, httpClient(t, true), "/test.v1.Feed/QuietEcho", p.opts...)
		bs := c.CallBidiStream(ctx)
		if err := bs.Send(s.tickMsg(t, "/test.v1.Feed/QuietEcho", 7)); err != nil {
			t.Fatal(err)
		}
		if got, err := bs.Receive(); err != nil || field(got, "n") != "7" {
			t.Fatalf("%s bidi: %v, %v", p.name, got, err)
		}
		_, err := bs.Receive() // the caller sends nothing more
		ce := asConnect(t, err)
		info := errorInfo(t, ce)
		if ce.Code() != connect.CodeDeadlineExceeded || info.Reason != rstream.CodeIdle ||
			info.Metadata[rstream.DetailSilent] != "caller" {
			t.Errorf("%s bidi stream: %v %v; want %s silent=caller", p.name, err, info.Metadata, rstream.CodeIdle)
		}
		_ = bs.CloseRequest()
		_ = bs.CloseResponse()
	}
}

// TestStreamCallerCancels: the caller cancels a server stream and a bidi
// stream after one message. The handler's context ends, and the call is
// logged CANCELLED, KERNEL_CANCELLED_001: the caller left, no transport
// failed.
func TestStreamCallerCancels(t *testing.T) {
	s, f := newStreamServer(t)
	for _, p := range streamProtocols(false) {
		ctx, cancel := context.WithCancel(t.Context())
		c := s.client(t, httpClient(t, p.h2c), "/test.v1.Feed/Watch", p.opts...)
		ss, err := c.CallServerStream(ctx, s.request(t, "/test.v1.Feed/Watch", `{"count":1,"wait":true}`))
		if err != nil || !ss.Receive() {
			t.Fatalf("%s: %v", p.name, errors.Join(err, ss.Err()))
		}
		cancel()
		if cause := f.cause(t); !errors.Is(cause, context.Canceled) {
			t.Errorf("%s server stream: the handler's context ended with %v, want the caller's cancel", p.name, cause)
		}
		_ = ss.Close()
	}
	for _, p := range streamProtocols(true) {
		ctx, cancel := context.WithCancel(t.Context())
		c := s.client(t, httpClient(t, true), "/test.v1.Feed/Echo", p.opts...)
		bs := c.CallBidiStream(ctx)
		if err := bs.Send(s.tickMsg(t, "/test.v1.Feed/Echo", 1)); err != nil {
			t.Fatal(err)
		}
		if _, err := bs.Receive(); err != nil {
			t.Fatalf("%s bidi: %v", p.name, err)
		}
		// connect-go's client resets the stream when its response is
		// closed: its request body is still open.
		cancel()
		_ = bs.CloseResponse()
		if cause := f.cause(t); !errors.Is(cause, context.Canceled) {
			t.Errorf("%s bidi stream: the handler's context ended with %v, want the caller's cancel", p.name, cause)
		}
	}
	for _, full := range []string{"/test.v1.Feed/Watch", "/test.v1.Feed/Echo"} {
		waitLog(t, s, logMessage, "method="+full, "grpcCode=Canceled", "code=KERNEL_CANCELLED_001")
	}
	if n := len(s.logs.Find(func(r pipelinetest.Record) bool { return r.Attrs["code"] == rstream.CodeTransport })); n != 0 {
		t.Errorf("%d streams logged as transport failures", n)
	}
}

// TestStreamRateLimitBeforeTheFirstMessage: a stream the rate limit turns
// away is answered as a unary call: unavailable, KERNEL_UNAVAILABLE_002,
// a RetryInfo and the RateLimit-Policy field; the handler never runs.
func TestStreamRateLimitBeforeTheFirstMessage(t *testing.T) {
	s, _ := newStreamServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	ps := streamProtocols(false)
	if ns, err := s.watch(ctx, t, ps[0], "/test.v1.Feed/Limited", `{"count":1}`); err != nil || len(ns) != 1 {
		t.Fatalf("first call: %v, %v", ns, err)
	}
	for _, p := range ps {
		c := s.client(t, httpClient(t, p.h2c), "/test.v1.Feed/Limited", p.opts...)
		ss, err := c.CallServerStream(ctx, s.request(t, "/test.v1.Feed/Limited", `{"count":1}`))
		if err != nil {
			t.Fatal(err)
		}
		if ss.Receive() {
			t.Fatalf("%s: a message passed the rate limit", p.name)
		}
		ce := asConnect(t, ss.Err())
		if ce.Code() != connect.CodeUnavailable || errorInfo(t, ce).Reason != "KERNEL_UNAVAILABLE_002" || retryInfo(ce) == nil {
			t.Errorf("%s: %v; want unavailable KERNEL_UNAVAILABLE_002 with a RetryInfo", p.name, ce)
		}
		if ss.ResponseHeader().Get("RateLimit-Policy") == "" && ce.Meta().Get("RateLimit-Policy") == "" {
			t.Errorf("%s: no RateLimit-Policy field: %v %v", p.name, ss.ResponseHeader(), ce.Meta())
		}
		_ = ss.Close()
	}
}

// TestBidiNeedsHTTP2: connect-go refuses a bidi stream over HTTP/1.1 with
// 505 HTTP Version Not Supported, and closes the connection: a client
// gets an error at once (the 505, or the closed connection when it was
// still writing), and no operation runs.
func TestBidiNeedsHTTP2(t *testing.T) {
	s, _ := newStreamServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for _, p := range streamProtocols(false)[:2] { // gRPC is HTTP/2 only
		c := s.client(t, httpClient(t, false), "/test.v1.Feed/Echo", p.opts...)
		bs := c.CallBidiStream(ctx)
		_ = bs.Send(s.tickMsg(t, "/test.v1.Feed/Echo", 1))
		_ = bs.CloseRequest()
		// The server answers 505 and closes the connection at once: a
		// client still writing its body may see the closed connection
		// instead of the answer. Either way the call fails at once.
		_, err := bs.Receive()
		got505 := connect.CodeOf(err) == connect.CodeUnknown && strings.Contains(err.Error(), "505 HTTP Version Not Supported")
		if !got505 && !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("%s over HTTP/1.1: %v; want unknown: HTTP status 505 HTTP Version Not Supported", p.name, err)
		}
		_ = bs.CloseResponse()
	}
	req, _ := http.NewRequest(http.MethodPost, s.url+"/test.v1.Feed/Echo", strings.NewReader(""))
	req.Header.Set("Content-Type", "application/connect+json")
	res, err := httpClient(t, false).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusHTTPVersionNotSupported || !res.Close {
		t.Errorf("HTTP/1.1 bidi: %d, close %v; want 505 and the connection closed", res.StatusCode, res.Close)
	}
	if n := len(s.logs.Find(func(r pipelinetest.Record) bool { return r.Attrs["method"] == "/test.v1.Feed/Echo" })); n != 0 {
		t.Errorf("%d calls of Echo logged; want none", n)
	}
}

// TestStreamSendStall: a caller that never reads. The handler's Send
// blocks once flow control is exhausted, and the send stall ends the
// stream: the blocked Send returns, the handler's context ends with
// KERNEL_CANCELLED_002, and the call is logged with it. The caller's
// stream is reset: reading at last, it gets the messages sent, then an
// error.
func TestStreamSendStall(t *testing.T) {
	s, f := newStreamServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for _, p := range streamProtocols(true) {
		// No gzip: the flood fills the flow-control window sooner.
		opts := append([]connect.ClientOption{connect.WithAcceptCompression("gzip", nil, nil)}, p.opts...)
		c := s.client(t, httpClient(t, p.h2c), "/test.v1.Feed/Flood", opts...)
		ss, err := c.CallServerStream(ctx, s.request(t, "/test.v1.Feed/Flood", `{"flood":65536}`))
		if err != nil {
			t.Fatal(err)
		}
		cause := f.cause(t) // the caller has read nothing yet
		if e := pipeline.AsError(cause); e == nil || e.Code() != rstream.CodeSendStall {
			t.Errorf("%s: the handler's context ended with %v, want %s", p.name, cause, rstream.CodeSendStall)
		}
		for ss.Receive() {
		}
		// A reset stream, or the outcome when the blocked write went out
		// within the grace.
		if code := connect.CodeOf(ss.Err()); code != connect.CodeInternal && code != connect.CodeCanceled {
			t.Errorf("%s: the stalled stream ended with %v; want a reset (internal) or canceled", p.name, ss.Err())
		}
		_ = ss.Close()
	}
	if n := len(s.logs.Find(func(r pipelinetest.Record) bool {
		return r.Message == logMessage && r.Attrs["method"] == "/test.v1.Feed/Flood" && r.Attrs["code"] == rstream.CodeSendStall
	})); n != 3 {
		t.Errorf("%d streams logged %s, want 3: %v", n, rstream.CodeSendStall, s.logs.Records())
	}
}

// TestStreamOutlivesServerTimeouts: the server's ReadTimeout and
// WriteTimeout (200 ms) do not end a stream; its own deadline (the
// caller's, 1 s, or ten times that when the handler did not get to its
// wait: see watchToItsWait) does, KERNEL_TIMEOUT_001, on HTTP/1.1 and h2c
// alike.
func TestStreamOutlivesServerTimeouts(t *testing.T) {
	s, f := newStreamServer(t)
	s.url = serveWith(t, &http.Server{Handler: s.handler, ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond}, nil)
	calls := 0
	for _, p := range []streamProtocol{
		{"connect+json http/1.1", false, []connect.ClientOption{connect.WithProtoJSON()}},
		{"grpc h2c", true, []connect.ClientOption{connect.WithGRPC()}},
	} {
		ns, cause, n, err := s.watchToItsWait(t, f, p, time.Second)
		calls += n
		if len(ns) != 1 || connect.CodeOf(err) != connect.CodeDeadlineExceeded {
			t.Errorf("%s: %v, %v; want 1 message, then deadline_exceeded", p.name, ns, err)
		}
		if !errors.Is(cause, context.DeadlineExceeded) {
			t.Errorf("%s: the handler's context ended with %v, want the caller's deadline", p.name, cause)
		}
	}
	c := s.client(t, httpClient(t, true), "/test.v1.Feed/QuietEcho", connect.WithGRPCWeb())
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	bs := c.CallBidiStream(ctx)
	if err := bs.Send(s.tickMsg(t, "/test.v1.Feed/QuietEcho", 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := bs.Receive(); err != nil {
		t.Fatal(err)
	}
	_, err := bs.Receive() // past both server timeouts, the idle clock ends it
	if ce := asConnect(t, err); errorInfo(t, ce).Reason != rstream.CodeIdle {
		t.Errorf("bidi: %v; want %s", err, rstream.CodeIdle)
	}
	_ = bs.CloseRequest()
	_ = bs.CloseResponse()
	if n := len(s.logs.Find(func(r pipelinetest.Record) bool {
		return r.Message == logMessage && r.Attrs["code"] == "KERNEL_TIMEOUT_001"
	})); n != calls {
		t.Errorf("%d streams logged KERNEL_TIMEOUT_001, want %d: %v", n, calls, s.logs.Records())
	}
}

// TestStreamRefusesABadMessage: a client stream's message with a field
// number the input lacks ends the stream with invalid_argument,
// KERNEL_VALIDATION_003, as a unary request is refused. The binary
// protocols carry it; JSON cannot.
func TestStreamRefusesABadMessage(t *testing.T) {
	s, _ := newStreamServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for _, p := range streamProtocols(false)[1:] {
		c := s.client(t, httpClient(t, p.h2c), "/test.v1.Feed/Sum", p.opts...)
		cs := c.CallClientStream(ctx)
		m := s.tickMsg(t, "/test.v1.Feed/Sum", 1)
		m.SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1))
		_ = cs.Send(m)
		_, err := cs.CloseAndReceive()
		ce := asConnect(t, err)
		if info := errorInfo(t, ce); ce.Code() != connect.CodeInvalidArgument || info.Reason != "KERNEL_VALIDATION_003" {
			t.Errorf("%s: %v %v; want invalid_argument KERNEL_VALIDATION_003", p.name, err, info)
		}
	}
}

// TestStreamMessageOverTheReadLimit: a client stream's message larger
// than WithReadLimit ends the stream with invalid_argument,
// KERNEL_VALIDATION_001, naming the limit: the caller's fault, never a
// transport failure.
func TestStreamMessageOverTheReadLimit(t *testing.T) {
	s, _ := newStreamServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for _, p := range streamProtocols(false) {
		c := s.client(t, httpClient(t, p.h2c), "/test.v1.Feed/Sum", p.opts...)
		cs := c.CallClientStream(ctx)
		// 5 MiB: over the default limit of 4 MiB.
		_ = cs.Send(s.request(t, "/test.v1.Feed/Sum", `{"n":1,"pad":"`+strings.Repeat("y", 5<<20)+`"}`).Msg)
		_, err := cs.CloseAndReceive()
		ce := asConnect(t, err)
		info := errorInfo(t, ce)
		if ce.Code() != connect.CodeInvalidArgument || info.Reason != "KERNEL_VALIDATION_001" ||
			!strings.Contains(ce.Message(), "larger than 4194304 bytes") {
			t.Errorf("%s: %v %v; want invalid_argument KERNEL_VALIDATION_001 over 4194304 bytes", p.name, err, info)
		}
	}
}

// TestStreamEndedReadsCloseTheHTTP1Connection: a client stream over
// HTTP/1.1 whose body ends inside a message fails, and the adapter makes
// the connection's reads fail. net/http's read in the background can then
// fail too, which ends the context of every later request on that
// connection. So the answer closes the connection, and the next call, on
// a new connection, succeeds.
func TestStreamEndedReadsCloseTheHTTP1Connection(t *testing.T) {
	s, _ := newStreamServer(t)
	c, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// An envelope that promises 100 bytes, and 7 of them.
	req, _ := http.NewRequest(http.MethodPost, s.url+"/test.v1.Feed/Sum",
		strings.NewReader("\x00\x00\x00\x00\x64"+`{"n":1}`))
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("Connect-Protocol-Version", "1")
	if err := req.Write(c); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if !res.Close || !strings.Contains(string(body), `"error"`) {
		t.Errorf("the truncated stream: close=%v %q; want an error that closes the connection", res.Close, body)
	}
	cs := s.client(t, httpClient(t, false), "/test.v1.Feed/Sum", connect.WithProtoJSON()).CallClientStream(t.Context())
	if err := cs.Send(s.tickMsg(t, "/test.v1.Feed/Sum", 2)); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CloseAndReceive(); err != nil {
		t.Errorf("a call on a new connection: %v", err)
	}
}
