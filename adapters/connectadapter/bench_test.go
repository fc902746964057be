package connectadapter_test

import (
	"context"
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// BenchmarkConnectUnary compares a unary Connect call (binary protobuf,
// h2c, loopback) of an operation with the same call of a bare connect-go
// handler of the same dynamic messages that does the operation's work
// itself: "bare" is the floor, "sundial" adds the kernel's pipeline.
func BenchmarkConnectUnary(b *testing.B) {
	s := newServer(b)
	md := s.method(b, "/test.v1.Items/Get")
	bare := connect.NewUnaryHandler("/bare.v1.Items/Get",
		func(_ context.Context, req *connect.Request[dynamicpb.Message]) (*connect.Response[dynamicpb.Message], error) {
			out := dynamicpb.NewMessage(md.Output())
			id := req.Msg.Get(md.Input().Fields().ByName("id")).String()
			out.Set(md.Output().Fields().ByName("id"), protoreflect.ValueOfString(id))
			out.Set(md.Output().Fields().ByName("name"), protoreflect.ValueOfString("item "+id))
			return connect.NewResponse(out), nil
		},
		connect.WithSchema(md),
		connect.WithRequestInitializer(func(_ connect.Spec, x any) error {
			*x.(*dynamicpb.Message) = *dynamicpb.NewMessage(md.Input())
			return nil
		}))
	mux := http.NewServeMux()
	mux.Handle("/bare.v1.Items/Get", bare)
	bareURL := serve(b, mux, nil)
	hc := httpClient(b, true)
	for _, c := range []struct{ name, url string }{
		{"bare", bareURL + "/bare.v1.Items/Get"},
		{"sundial", s.url + "/test.v1.Items/Get"},
	} {
		b.Run(c.name, func(b *testing.B) {
			init := func(_ connect.Spec, x any) error {
				*x.(*dynamicpb.Message) = *dynamicpb.NewMessage(md.Output())
				return nil
			}
			client := connect.NewClient[dynamicpb.Message, dynamicpb.Message](hc, c.url,
				connect.WithSchema(md), connect.WithResponseInitializer(init))
			req := s.request(b, "/test.v1.Items/Get", `{"id":"42"}`)
			b.ReportAllocs()
			for b.Loop() {
				res, err := client.CallUnary(context.Background(), req)
				if err != nil || field(res.Msg, "name") != "item 42" {
					b.Fatal(err)
				}
			}
		})
	}
}
