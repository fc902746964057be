package grpcadapter

import (
	"context"
	"fmt"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/emptypb"
)

// TestServerStreamWritesStatus: a unary call served by a grpc-go server
// over a real listener carries a server stream that can write the call's
// status from another goroutine (statusWriter), so the adapter's methods
// run on grpc-go's goroutine with no hand-off (serve). It fails when a
// grpc-go version drops the method: the calls would then take the
// slower path of an application's interceptor.
func TestServerStreamWritesStatus(t *testing.T) {
	found := make(chan string, 1) // the stream's type when it has no WriteStatus, else ""
	srv := grpc.NewServer()
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: "probe.v1.Probe",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Look",
			Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				st := grpc.ServerTransportStreamFromContext(ctx)
				if _, ok := st.(statusWriter); ok {
					found <- ""
				} else {
					found <- fmt.Sprintf("%T", st)
				}
				return &emptypb.Empty{}, dec(&emptypb.Empty{})
			},
		}},
	}, nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.Invoke(t.Context(), "/probe.v1.Probe/Look", &emptypb.Empty{}, &emptypb.Empty{}); err != nil {
		t.Fatal(err)
	}
	if typ := <-found; typ != "" {
		t.Fatalf("grpc-go's server stream, a %s, has no WriteStatus(*status.Status) error", typ)
	}
}
