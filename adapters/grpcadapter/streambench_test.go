package grpcadapter_test

import (
	"context"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/sundial-go/sundial/adapters/grpcadapter"
)

// bareFeed serves the feed's Watch and Echo on a bare grpc-go server, with
// the same messages as the adapter's (its descriptors), doing the same work:
// Watch sends count messages of n = 1..count, then waits for the end if
// wait is set; Echo echoes until the end.
func bareFeed(b *testing.B, in, out protoreflect.MessageDescriptor) *grpc.ClientConn {
	b.Helper()
	count, wait := in.Fields().ByName("count"), in.Fields().ByName("wait")
	n := out.Fields().ByName("n")
	watch := func(_ any, ss grpc.ServerStream) error {
		req := dynamicpb.NewMessage(in)
		if err := ss.RecvMsg(req); err != nil {
			return err
		}
		for i := range req.Get(count).Int() {
			m := dynamicpb.NewMessage(out)
			m.Set(n, protoreflect.ValueOfInt64(i+1))
			if err := ss.SendMsg(m); err != nil {
				return err
			}
		}
		if wait != nil && req.Get(wait).Bool() {
			<-ss.Context().Done()
			return ss.Context().Err()
		}
		return nil
	}
	echo := func(_ any, ss grpc.ServerStream) error {
		for {
			m := dynamicpb.NewMessage(out)
			if err := ss.RecvMsg(m); err != nil {
				if err == io.EOF {
					return nil
				}
				return err
			}
			if err := ss.SendMsg(m); err != nil {
				return err
			}
		}
	}
	srv := grpc.NewServer()
	srv.RegisterService(&grpc.ServiceDesc{ServiceName: "bare.v1.Feed", HandlerType: (*any)(nil), Streams: []grpc.StreamDesc{
		{StreamName: "Watch", Handler: watch, ServerStreams: true},
		{StreamName: "Echo", Handler: echo, ServerStreams: true, ClientStreams: true},
	}}, struct{}{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close(); srv.Stop() })
	return conn
}

// BenchmarkServerStream measures the messages a second of one server
// stream over a loopback connection: through the adapter and the kernel
// (a Go value per message, converted) and on a bare grpc-go server sending
// the same dynamic messages, in the same run. b.N messages go on one
// stream; the client reads each.
func BenchmarkServerStream(b *testing.B) {
	h, _ := streamHarness(b, "", harnessOpt{})
	m := h.method(b, "/test.v1.Feed/Watch")
	bare := bareFeed(b, m.Input, m.Output)
	for _, c := range []struct {
		name string
		conn *grpc.ClientConn
		full string
	}{{"sundial", h.conn, "/test.v1.Feed/Watch"}, {"bare", bare, "/bare.v1.Feed/Watch"}} {
		b.Run(c.name, func(b *testing.B) {
			cs, err := c.conn.NewStream(b.Context(), &grpc.StreamDesc{ServerStreams: true}, c.full)
			if err != nil {
				b.Fatal(err)
			}
			req := dynamicpb.NewMessage(m.Input)
			req.Set(m.Input.Fields().ByName("count"), protoreflect.ValueOfInt64(int64(b.N)))
			if err := cs.SendMsg(req); err != nil {
				b.Fatal(err)
			}
			_ = cs.CloseSend()
			b.ReportAllocs()
			start := time.Now()
			got := 0
			for {
				if err := cs.RecvMsg(dynamicpb.NewMessage(m.Output)); err != nil {
					if err != io.EOF {
						b.Fatal(err)
					}
					break
				}
				got++
			}
			if got != b.N {
				b.Fatalf("%d messages, want %d", got, b.N)
			}
			b.ReportMetric(float64(got)/time.Since(start).Seconds(), "msgs/s")
		})
	}
}

// BenchmarkIdleStream measures the memory and goroutines of one open,
// idle stream, client and server in one process: through the adapter and
// the kernel, and on a bare grpc-go server. A bidi stream (Echo) waits in
// Recv; a server stream (Watch) sends one message and waits for its
// context to end. Each round opens 1,000 streams and reads the heap and
// stacks in use before and after: bytes/stream is both,
// stack-bytes/stream the goroutine stacks alone.
func BenchmarkIdleStream(b *testing.B) {
	const streams = 1000
	h, fa := streamHarness(b, "", harnessOpt{})
	echo, watch := h.method(b, "/test.v1.Feed/Echo"), h.method(b, "/test.v1.Feed/Watch")
	bareEcho := bareFeed(b, echo.Input, echo.Output)
	bareWatch := bareFeed(b, watch.Input, watch.Output)
	// open opens one stream of m and reads its first message: the stream
	// is then open on both sides.
	open := func(ctx context.Context, conn *grpc.ClientConn, full string, m grpcadapter.Method) error {
		cs, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, full)
		if err != nil {
			return err
		}
		req := dynamicpb.NewMessage(m.Input)
		if f := m.Input.Fields().ByName("wait"); f != nil {
			req.Set(m.Input.Fields().ByName("count"), protoreflect.ValueOfInt64(1))
			req.Set(f, protoreflect.ValueOfBool(true))
		}
		if err := cs.SendMsg(req); err != nil {
			return err
		}
		if m.Input.Fields().ByName("wait") != nil {
			// A server stream's request is its only message.
			if err := cs.CloseSend(); err != nil {
				return err
			}
		}
		return cs.RecvMsg(dynamicpb.NewMessage(m.Output))
	}
	for _, c := range []struct {
		name string
		conn *grpc.ClientConn
		full string
		m    grpcadapter.Method
	}{
		{"bidi/sundial", h.conn, "/test.v1.Feed/Echo", echo},
		{"bidi/bare", bareEcho, "/bare.v1.Feed/Echo", echo},
		{"server/sundial", h.conn, "/test.v1.Feed/Watch", watch},
		{"server/bare", bareWatch, "/bare.v1.Feed/Watch", watch},
	} {
		b.Run(c.name, func(b *testing.B) {
			var bytes, stacks, goroutines float64
			for b.Loop() {
				ctx, cancel := context.WithCancel(context.Background())
				heap0, stack0 := inUse()
				g0 := runtime.NumGoroutine()
				for range streams {
					if err := open(ctx, c.conn, c.full, c.m); err != nil {
						b.Fatal(err)
					}
				}
				heap1, stack1 := inUse()
				bytes += float64(heap1+stack1-heap0-stack0) / streams
				stacks += float64(stack1-stack0) / streams
				goroutines += float64(runtime.NumGoroutine()-g0) / streams
				cancel()
				for end := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > g0 && time.Now().Before(end); {
					for len(fa.ctxEnded) > 0 {
						<-fa.ctxEnded
					}
					time.Sleep(time.Millisecond)
				}
			}
			b.ReportMetric(bytes/float64(b.N), "bytes/stream")
			b.ReportMetric(stacks/float64(b.N), "stack-bytes/stream")
			b.ReportMetric(goroutines/float64(b.N), "goroutines/stream")
		})
	}
}

// inUse returns the bytes of heap and of goroutine stacks in use, after
// a collection.
func inUse() (heap, stack int64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse), int64(ms.StackInuse)
}
