package grpcadapter_test

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/sundial-go/sundial/adapters/grpcadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	rstream "github.com/sundial-go/sundial/resilience/stream"
)

// Streaming test operations.

type tick struct {
	N     int    `json:"n"`
	Pad   string `json:"pad"`
	Small int8   `json:"small"`
}

type watchIn struct {
	Count int    `json:"count"` // ticks to send
	Fail  bool   `json:"fail"`  // then fail with UNAVAILABLE FEED_DOWN, retry in 3 s
	Wait  bool   `json:"wait"`  // then wait for the context to end
	Flood int    `json:"flood"` // then send ticks of this many bytes until Send fails
	Tag   string `json:"tag"`
}

// feedApp records what the streaming handlers saw.
type feedApp struct {
	ctxEnded chan error   // a handler's context ended: its cause
	opened   atomic.Int64 // bidi streams whose handler started
	watched  atomic.Int64 // server streams whose handler started
	sent     atomic.Int64 // bytes of padding Send accepted (flood)
}

func newFeedApp() *feedApp { return &feedApp{ctxEnded: make(chan error, 256)} }

func (fa *feedApp) watch(ctx context.Context, in watchIn, out *operations.Sender[tick]) error {
	fa.watched.Add(1)
	for i := range in.Count {
		if err := out.Send(tick{N: i + 1}); err != nil {
			return err
		}
	}
	switch {
	case in.Fail:
		return pipeline.NewError(pipeline.KindUnavailable, "FEED_DOWN", "The feed is down.").
			WithRetryAfter(3 * time.Second)
	case in.Wait:
		<-ctx.Done()
		fa.ctxEnded <- context.Cause(ctx)
		return ctx.Err()
	case in.Flood > 0:
		pad := strings.Repeat("x", in.Flood)
		for {
			if err := out.Send(tick{Pad: pad}); err != nil {
				fa.ctxEnded <- context.Cause(ctx)
				return err
			}
			fa.sent.Add(int64(in.Flood))
		}
	}
	return nil
}

func (fa *feedApp) echo(ctx context.Context, in *operations.Receiver[tick], out *operations.Sender[tick]) error {
	fa.opened.Add(1)
	for {
		m, err := in.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			fa.ctxEnded <- context.Cause(ctx)
			return err
		}
		if err := out.Send(m); err != nil {
			return err
		}
	}
}

func (fa *feedApp) sum(ctx context.Context, in *operations.Receiver[tick]) (tick, error) {
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

func (fa *feedApp) register(t testing.TB, reg *operations.Registry) {
	t.Helper()
	for _, err := range []error{
		operations.RegisterServerStream(reg, operations.Descriptor{ID: "feed.watch"}, fa.watch),
		operations.RegisterServerStream(reg, operations.Descriptor{ID: "work.stream-capped"}, fa.watch),
		operations.RegisterBidiStream(reg, operations.Descriptor{ID: "feed.echo"}, fa.echo),
		operations.RegisterClientStream(reg, operations.Descriptor{ID: "feed.sum"}, fa.sum),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// streamHarness serves the test and feed operations on a TCP listener.
// Every feed operation has the Stream configuration streamJSON (a JSON
// object; "" for none).
func streamHarness(t testing.TB, streamJSON string, ho harnessOpt) (*harness, *feedApp) {
	t.Helper()
	return streamHarnessCapped(t, streamJSON, 200*time.Millisecond, ho)
}

// streamHarnessCapped is streamHarness with capped as the TimeoutSeconds
// of work.capped and work.stream-capped.
func streamHarnessCapped(t testing.TB, streamJSON string, capped time.Duration, ho harnessOpt) (*harness, *feedApp) {
	t.Helper()
	fa := newFeedApp()
	ho.tcp = true
	ho.register = fa.register
	if streamJSON == "" {
		streamJSON = "{}"
	}
	cfg := `{"Sundial":{"Kernel":{"MaxTimeoutSeconds":30,"Resilience":{"Operations":{
	"work.limited":{"PermitLimit":1,"WindowSeconds":60},
	"work.capped":{"TimeoutSeconds":` + strconv.FormatFloat(capped.Seconds(), 'f', -1, 64) + `},
	"work.stream-capped":{"TimeoutSeconds":` + strconv.FormatFloat(capped.Seconds(), 'f', -1, 64) + `},
	"feed.watch":{"Stream":` + streamJSON + `},
	"feed.echo":{"Stream":` + streamJSON + `},
	"feed.sum":{"Stream":` + streamJSON + `}
}}}}}`
	ho.kernel = append(ho.kernel, kernel.WithConfigJSON([]byte(cfg)))
	return newHarness(t, ho), fa
}

// openStream opens a stream of the adapter's method full on conn.
func (h *harness) openStream(ctx context.Context, t testing.TB, conn *grpc.ClientConn, full string) (grpc.ClientStream, grpcadapter.Method) {
	t.Helper()
	m := h.method(t, full)
	cs, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, full)
	if err != nil {
		t.Fatal(err)
	}
	return cs, m
}

// send sends a message of descriptor d with the given fields.
func send(t *testing.T, cs grpc.ClientStream, d protoreflect.MessageDescriptor, fields map[string]any) {
	t.Helper()
	msg := dynamicpb.NewMessage(d)
	for k, v := range fields {
		msg.Set(d.Fields().ByName(protoreflect.Name(k)), protoreflect.ValueOf(v))
	}
	if err := cs.SendMsg(msg); err != nil {
		t.Fatalf("SendMsg: %v", err)
	}
}

// drain reads the stream to its end and returns the n fields of the
// messages and the final status.
func drain(cs grpc.ClientStream, d protoreflect.MessageDescriptor) ([]int64, *status.Status) {
	var ns []int64
	for {
		msg := dynamicpb.NewMessage(d)
		if err := cs.RecvMsg(msg); err != nil {
			if err == io.EOF {
				return ns, nil
			}
			return ns, status.Convert(err)
		}
		ns = append(ns, msg.Get(d.Fields().ByName("n")).Int())
	}
}

// reasonOf returns the ErrorInfo reason, ErrorInfo metadata and
// RetryInfo delay of st.
func reasonOf(st *status.Status) (string, map[string]string, time.Duration) {
	var (
		reason string
		md     map[string]string
		retry  time.Duration
	)
	for _, d := range st.Details() {
		switch x := d.(type) {
		case *errdetails.ErrorInfo:
			reason, md = x.GetReason(), x.GetMetadata()
		case *errdetails.RetryInfo:
			retry = x.GetRetryDelay().AsDuration()
		}
	}
	return reason, md, retry
}

// TestStreamKinds: a server stream sends every message, then OK; a bidi
// stream echoes each message; a client stream answers its messages with
// one reply. The same Go types give each method's messages.
func TestStreamKinds(t *testing.T) {
	h, _ := streamHarness(t, "", harnessOpt{})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	cs, m := h.openStream(ctx, t, h.conn, "/test.v1.Feed/Watch")
	send(t, cs, m.Input, map[string]any{"count": int64(3)})
	_ = cs.CloseSend() // a server stream's caller half-closes after its request
	if ns, st := drain(cs, m.Output); st != nil || len(ns) != 3 || ns[2] != 3 {
		t.Errorf("Watch(count 3) = %v, %v; want 1 2 3, OK", ns, st)
	}

	cs, m = h.openStream(ctx, t, h.conn, "/test.v1.Feed/Echo")
	for i := range 5 {
		send(t, cs, m.Input, map[string]any{"n": int64(i)})
	}
	_ = cs.CloseSend()
	if ns, st := drain(cs, m.Output); st != nil || len(ns) != 5 || ns[4] != 4 {
		t.Errorf("Echo(0..4) = %v, %v; want 0..4, OK", ns, st)
	}

	cs, m = h.openStream(ctx, t, h.conn, "/test.v1.Feed/Sum")
	for i := range 5 {
		send(t, cs, m.Input, map[string]any{"n": int64(i)})
	}
	_ = cs.CloseSend()
	if ns, st := drain(cs, m.Output); st != nil || len(ns) != 1 || ns[0] != 10 {
		t.Errorf("Sum(0..4) = %v, %v; want 10, OK", ns, st)
	}
	h.waitLog(t, "grpc call", "method=/test.v1.Feed/Sum", "grpcCode=OK", "operation=feed.sum")

	if err := h.adapter.Call(ctx, h.conn, "feed.watch", watchIn{Count: 1}, nil); err == nil || !strings.Contains(err.Error(), "server-stream") {
		t.Errorf("Call(feed.watch) = %v, want a refusal naming the server stream", err)
	}
}

// TestStreamOutcomeInTrailers: a handler's error is the status, with the
// same ErrorInfo and RetryInfo as for a unary call, whether it fails
// before its first message or after two.
func TestStreamOutcomeInTrailers(t *testing.T) {
	h, _ := streamHarness(t, "", harnessOpt{})
	for _, count := range []int64{0, 2} {
		cs, m := h.openStream(t.Context(), t, h.conn, "/test.v1.Feed/Watch")
		send(t, cs, m.Input, map[string]any{"count": count, "fail": true})
		_ = cs.CloseSend() // a server stream's caller half-closes after its request
		ns, st := drain(cs, m.Output)
		reason, _, retry := reasonOf(st)
		if int64(len(ns)) != count || st.Code() != codes.Unavailable || reason != "FEED_DOWN" || retry != 3*time.Second {
			t.Errorf("after %d messages: %d messages, %v %q retry %v; want %d, Unavailable FEED_DOWN retry 3s",
				count, len(ns), st.Code(), reason, retry, count)
		}
	}
}

// TestStreamRefusesABadMessage: a caller's message that does not fit the
// input type ends a bidi stream with InvalidArgument, KERNEL_VALIDATION_001
// naming the field, after the messages before it were answered: the
// caller's fault, not a transport failure.
func TestStreamRefusesABadMessage(t *testing.T) {
	h, _ := streamHarness(t, "", harnessOpt{})
	cs, m := h.openStream(t.Context(), t, h.conn, "/test.v1.Feed/Echo")
	send(t, cs, m.Input, map[string]any{"n": int64(1)})
	send(t, cs, m.Input, map[string]any{"small": int32(300)})
	ns, st := drain(cs, m.Output)
	reason, md, _ := reasonOf(st)
	if len(ns) != 1 || st.Code() != codes.InvalidArgument || reason != "KERNEL_VALIDATION_001" || md["field"] != "small" {
		t.Errorf("%d messages, %v %q %v; want 1, InvalidArgument KERNEL_VALIDATION_001 field=small", len(ns), st.Code(), reason, md)
	}
}

// TestStreamDeadlineMidStream: the operation's deadline ends a server
// stream and a bidi stream mid-stream; the caller gets DeadlineExceeded
// with KERNEL_TIMEOUT_001 in the trailers, after the messages sent.
func TestStreamDeadlineMidStream(t *testing.T) {
	// work.stream-capped's TimeoutSeconds is d; the caller's deadline is
	// 20 s later. Stream returns once the handler has returned, so when
	// the stream's end arrives, a handler that sent its two messages and
	// reached its wait has already reported its context's end. When it
	// has not, the deadline passed before the handler started or before
	// its sends, and nothing under test failed: the stream is opened
	// again on a new server with ten times the deadline, three tries.
	for d := 200 * time.Millisecond; ; d *= 10 {
		h, fa := streamHarnessCapped(t, "", d, harnessOpt{})
		ctx, cancel := context.WithTimeout(t.Context(), d+20*time.Second)
		start := time.Now()
		cs, m := h.openStream(ctx, t, h.conn, "/test.v1.Work/StreamCapped")
		send(t, cs, m.Input, map[string]any{"count": int64(2), "wait": true})
		_ = cs.CloseSend() // a server stream's caller half-closes after its request
		ns, st := drain(cs, m.Output)
		took := time.Since(start)
		cancel()
		reason, _, _ := reasonOf(st)
		var cause error
		waited := false
		select {
		case cause = <-fa.ctxEnded:
			waited = true
		default:
		}
		if !waited {
			if st.Code() != codes.DeadlineExceeded || reason != "KERNEL_TIMEOUT_001" || len(ns) >= 2 {
				t.Fatalf("%d messages, %v %q, and the handler never reached its wait; want DeadlineExceeded KERNEL_TIMEOUT_001", len(ns), st.Code(), reason)
			}
			if d >= 20*time.Second {
				t.Fatalf("the handler did not reach its wait before its deadline in three tries (the last %v)", d)
			}
			t.Logf("the %v deadline passed before the handler started (%d started) or sent its two messages (%d arrived): once more with %v", d, fa.watched.Load(), len(ns), 10*d)
			continue
		}
		if len(ns) != 2 || st.Code() != codes.DeadlineExceeded || reason != "KERNEL_TIMEOUT_001" {
			t.Errorf("%d messages, %v %q; want 2, DeadlineExceeded KERNEL_TIMEOUT_001", len(ns), st.Code(), reason)
		}
		if took < d {
			t.Errorf("the stream ended after %v, before its %v deadline", took, d)
		}
		if !errors.Is(cause, context.DeadlineExceeded) {
			t.Errorf("the handler's context ended with %v, want the deadline", cause)
		}
		return
	}
}

// TestStreamIdle: with an idle timeout, a silent handler (server stream)
// and a silent caller (bidi) end the stream with DeadlineExceeded,
// KERNEL_TIMEOUT_003, naming who was silent.
func TestStreamIdle(t *testing.T) {
	h, _ := streamHarness(t, `{"IdleSeconds":0.15}`, harnessOpt{})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	cs, m := h.openStream(ctx, t, h.conn, "/test.v1.Feed/Watch")
	send(t, cs, m.Input, map[string]any{"count": int64(1), "wait": true})
	_ = cs.CloseSend() // a server stream's caller half-closes after its request
	ns, st := drain(cs, m.Output)
	reason, md, _ := reasonOf(st)
	if len(ns) != 1 || st.Code() != codes.DeadlineExceeded || reason != rstream.CodeIdle || md[rstream.DetailSilent] != "handler" {
		t.Errorf("server stream: %d messages, %v %q %v; want 1, DeadlineExceeded %s silent=handler",
			len(ns), st.Code(), reason, md, rstream.CodeIdle)
	}

	cs, m = h.openStream(ctx, t, h.conn, "/test.v1.Feed/Echo")
	send(t, cs, m.Input, map[string]any{"n": int64(7)})
	ns, st = drain(cs, m.Output) // the caller sends nothing more
	reason, md, _ = reasonOf(st)
	if len(ns) != 1 || st.Code() != codes.DeadlineExceeded || reason != rstream.CodeIdle || md[rstream.DetailSilent] != "caller" {
		t.Errorf("bidi stream: %d messages, %v %q %v; want 1, DeadlineExceeded %s silent=caller",
			len(ns), st.Code(), reason, md, rstream.CodeIdle)
	}
}

// TestStreamCallerCancels: the caller cancels a server stream and a bidi
// stream; the handler's context ends, and the kernel's outcome is
// CANCELLED, KERNEL_CANCELLED_001: the caller left, no transport failed.
func TestStreamCallerCancels(t *testing.T) {
	h, fa := streamHarness(t, "", harnessOpt{})
	for _, full := range []string{"/test.v1.Feed/Watch", "/test.v1.Feed/Echo"} {
		ctx, cancel := context.WithCancel(t.Context())
		cs, m := h.openStream(ctx, t, h.conn, full)
		if full == "/test.v1.Feed/Watch" {
			send(t, cs, m.Input, map[string]any{"count": int64(1), "wait": true})
			_ = cs.CloseSend()
		} else {
			send(t, cs, m.Input, map[string]any{"n": int64(1)})
		}
		if err := cs.RecvMsg(dynamicpb.NewMessage(m.Output)); err != nil {
			t.Fatal(err)
		}
		cancel()
		if cause := <-fa.ctxEnded; !errors.Is(cause, context.Canceled) {
			t.Errorf("%s: the handler's context ended with %v, want the caller's cancel", full, cause)
		}
		h.waitLog(t, "grpc call", "method="+full, "code=KERNEL_CANCELLED_001")
	}
	if n := len(h.findLog("grpc call", "code="+rstream.CodeTransport)); n != 0 {
		t.Errorf("%d streams logged as transport failures", n)
	}
}

// TestStreamSendStall: a caller that never reads. The handler's Send
// blocks once flow control is exhausted, and the send stall ends the
// stream: the handler's context ends, and the caller, reading at last,
// gets every message, then Canceled, KERNEL_CANCELLED_002. Until then
// the server held at most grpc-go's per-stream write quota (64 KiB) and
// one message beyond what the caller's window (64 KiB) took.
func TestStreamSendStall(t *testing.T) {
	const (
		window = 64 << 10
		size   = 1000
	)
	h, fa := streamHarness(t, `{"SendStallSeconds":0.2}`, harnessOpt{})
	conn, err := grpc.NewClient(h.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(window), grpc.WithInitialConnWindowSize(window))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cs, m := h.openStream(t.Context(), t, conn, "/test.v1.Feed/Watch")
	send(t, cs, m.Input, map[string]any{"flood": int64(size)})
	_ = cs.CloseSend() // a server stream's caller half-closes after its request
	if cause := <-fa.ctxEnded; !errors.Is(cause, context.Canceled) {
		t.Errorf("the handler's context ended with %v, want the send stall", cause)
	}
	sent := fa.sent.Load()
	if most := int64(2*window + size); sent > most {
		t.Errorf("Send accepted %d bytes for a caller that does not read, want at most %d", sent, most)
	}
	ns, st := drain(cs, m.Output)
	reason, _, _ := reasonOf(st)
	if st.Code() != codes.Canceled || reason != rstream.CodeSendStall {
		t.Errorf("after %d messages: %v %q, want Canceled %s", len(ns), st.Code(), reason, rstream.CodeSendStall)
	}
	if int64(len(ns))*size != sent {
		t.Errorf("the caller read %d messages, want the %d Send accepted", len(ns), sent/size)
	}
}

// TestIdleBidiStreamsAreNotPaced: 100 bidi streams open on one
// connection and send nothing. The listener's guard neither holds them
// back nor refuses them: every handler starts at once. The guard still
// paces unary calls that stall (TestStallingConnectionGetsGoAway).
func TestIdleBidiStreamsAreNotPaced(t *testing.T) {
	const streams = 100
	b := grpcadapter.DefaultBounds()
	h, fa := streamHarness(t, "", harnessOpt{server: b.ServerOptions()})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	before := grpcadapter.HeldStreams()
	for range streams {
		h.openStream(ctx, t, h.conn, "/test.v1.Feed/Echo")
	}
	waitFor(t, "every bidi stream's handler to start", func() bool { return fa.opened.Load() == streams })
	if n := grpcadapter.HeldStreams() - before; n != 0 {
		t.Errorf("the guard held back %d idle bidi streams, want 0", n)
	}
	// A unary call on the same connection is served meanwhile.
	if _, st := h.call(t.Context(), t, "/test.v1.Work/Tiny", `{"n":1}`); st != nil {
		t.Fatal(st)
	}
	cancel()
	for range streams {
		<-fa.ctxEnded
	}
}

// TestServerStreamRequestIsBounded: a server stream's request must arrive
// within WithRecvTimeout, as a unary request. A caller that never sends
// it is answered DeadlineExceeded, KERNEL_TIMEOUT_001, and the handler
// never runs.
func TestServerStreamRequestIsBounded(t *testing.T) {
	const bound = 100 * time.Millisecond
	h, fa := streamHarness(t, "", harnessOpt{adapter: []grpcadapter.Option{grpcadapter.WithRecvTimeout(bound)}})
	start := time.Now()
	cs, m := h.openStream(t.Context(), t, h.conn, "/test.v1.Feed/Watch")
	ns, st := drain(cs, m.Output)
	reason, _, _ := reasonOf(st)
	if len(ns) != 0 || st.Code() != codes.DeadlineExceeded || reason != "KERNEL_TIMEOUT_001" {
		t.Errorf("%d messages, %v %q; want none, DeadlineExceeded KERNEL_TIMEOUT_001", len(ns), st.Code(), reason)
	}
	if took := time.Since(start); took < bound {
		t.Errorf("answered after %v, before WithRecvTimeout %v", took, bound)
	}
	if n := fa.watched.Load(); n != 0 {
		t.Errorf("the handler ran %d times", n)
	}
	h.waitLog(t, "grpc call", "method=/test.v1.Feed/Watch", "code=KERNEL_TIMEOUT_001")
}

// TestOutboundStreamClocks: with StreamClientInterceptor, WithStreamClocks
// ends an outbound stream whose server went silent with TIMEOUT,
// KERNEL_TIMEOUT_003, and one whose server stopped reading with CANCELLED,
// KERNEL_CANCELLED_002: the blocked RecvMsg or SendMsg returns the outcome.
func TestOutboundStreamClocks(t *testing.T) {
	const clock = 150 * time.Millisecond
	h, _ := streamHarness(t, "", harnessOpt{})
	conn, err := grpc.NewClient(h.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10),
		grpc.WithChainStreamInterceptor(grpcadapter.StreamClientInterceptor(0)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	m := h.method(t, "/test.v1.Feed/Echo")
	desc := &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}

	// The server echoes one message, then waits for the next: silent.
	cs, err := conn.NewStream(t.Context(), desc, "/test.v1.Feed/Echo", grpcadapter.WithStreamClocks(clock, 0))
	if err != nil {
		t.Fatal(err)
	}
	send(t, cs, m.Input, map[string]any{"n": int64(1)})
	if err := cs.RecvMsg(dynamicpb.NewMessage(m.Output)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = cs.RecvMsg(dynamicpb.NewMessage(m.Output))
	if e, ok := errors.AsType[*pipeline.Error](err); !ok || e.Kind() != pipeline.KindTimeout || e.Code() != rstream.CodeIdle {
		t.Errorf("RecvMsg of a silent server = %v, want TIMEOUT %s", err, rstream.CodeIdle)
	}
	if took := time.Since(start); took < clock {
		t.Errorf("the idle clock fired after %v, want at least %v", took, clock)
	}

	// The caller does not read the echoes: the server's Send blocks, it
	// stops reading, and the caller's SendMsg blocks in turn.
	cs, err = conn.NewStream(t.Context(), desc, "/test.v1.Feed/Echo", grpcadapter.WithStreamClocks(0, clock))
	if err != nil {
		t.Fatal(err)
	}
	pad := strings.Repeat("x", 16<<10)
	msg := dynamicpb.NewMessage(m.Input)
	msg.Set(m.Input.Fields().ByName("pad"), protoreflect.ValueOfString(pad))
	for {
		if err = cs.SendMsg(msg); err != nil {
			break
		}
	}
	if e, ok := errors.AsType[*pipeline.Error](err); !ok || e.Kind() != pipeline.KindCanceled || e.Code() != rstream.CodeSendStall {
		t.Errorf("SendMsg to a server that does not read = %v, want CANCELLED %s", err, rstream.CodeSendStall)
	}
}
