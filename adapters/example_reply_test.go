package adapters_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/labstack/echo/v4"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/sundial-go/sundial/adapters/grpcadapter"
	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
)

// Greeting is the input of greetings.say, Hello its output.
type Greeting struct {
	Name string `json:"name"`
}

type Hello struct {
	Text string `json:"text"`
}

// A middleware adds a response fact through the invocation's Reply: a
// field is an HTTP response header and gRPC header metadata, whichever
// protocol the call came in by (a note would be a line on the CLI's
// standard error).
func Example_replyField() {
	reg := operations.NewRegistry()
	err := operations.Register(reg, operations.Descriptor{ID: "greetings.say", Method: "POST", Path: "/greetings"},
		func(_ context.Context, in Greeting) (Hello, error) { return Hello{Text: "hello, " + in.Name}, nil })
	if err != nil {
		log.Fatal(err)
	}
	servedBy := pipeline.MiddlewareFunc(func(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
		inv.Reply().Set("Served-By", "replica-a")
		return next(ctx, inv)
	})
	k, err := kernel.New(kernel.WithRegistry(reg), kernel.UseAt(pipeline.StageDiagnostics, servedBy))
	if err != nil {
		log.Fatal(err)
	}
	defer k.Close()

	// Over HTTP: a response header.
	e := echo.New()
	if _, err := httpadapter.Mount(e, k); err != nil {
		log.Fatal(err)
	}
	web := httptest.NewServer(e) // on 127.0.0.1
	defer web.Close()
	resp, err := http.Post(web.URL+"/greetings", "application/json", strings.NewReader(`{"name":"ada"}`))
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	fmt.Println("HTTP:", resp.StatusCode, resp.Header.Get("Served-By"))

	// Over gRPC: header metadata.
	a, err := grpcadapter.New(k, grpcadapter.WithPackage("greet.v1"))
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(a.UnaryServerInterceptor()))
	a.Register(srv)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	m := a.Methods()[0]
	req := dynamicpb.NewMessage(m.Input)
	req.Set(m.Input.Fields().ByName("name"), protoreflect.ValueOfString("ada"))
	var md metadata.MD
	if err := conn.Invoke(context.Background(), m.FullName, req, dynamicpb.NewMessage(m.Output), grpc.Header(&md)); err != nil {
		log.Fatal(err)
	}
	fmt.Println("gRPC:", m.FullName, md.Get("served-by"))
	// Output:
	// HTTP: 200 replica-a
	// gRPC: /greet.v1.Greetings/Say [replica-a]
}
