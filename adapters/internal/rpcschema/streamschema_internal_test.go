package rpcschema

import (
	"strings"
	"testing"

	"github.com/jhump/protoreflect/v2/protoprint"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/sundial-go/sundial/operations"
)

// TestStreamMethodFlags: each operation kind gives its method the stream
// flags a reflected .proto prints as "stream", and the file stays valid.
func TestStreamMethodFlags(t *testing.T) {
	msg := func(name string) *descriptorpb.DescriptorProto {
		return &descriptorpb.DescriptorProto{Name: new(name)}
	}
	svc := &descriptorpb.ServiceDescriptorProto{Name: new("Ticks")}
	kinds := map[string]operations.Kind{"One": operations.Unary, "Watch": operations.ServerStream,
		"Sum": operations.ClientStream, "Echo": operations.BidiStream}
	for _, name := range []string{"One", "Watch", "Sum", "Echo"} {
		svc.Method = append(svc.Method, streamMethod(&descriptorpb.MethodDescriptorProto{
			Name: new(name), InputType: new(".ticks.v1.Tick"), OutputType: new(".ticks.v1.Tick"),
		}, kinds[name]))
	}
	fp := &descriptorpb.FileDescriptorProto{Name: new("ticks/v1/ticks.proto"), Package: new("ticks.v1"),
		Syntax: new("proto3"), MessageType: []*descriptorpb.DescriptorProto{msg("Tick")},
		Service: []*descriptorpb.ServiceDescriptorProto{svc}}
	fd, err := protodesc.NewFile(fp, nil)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := new(protoprint.Printer).PrintProtoFile(fd, &b); err != nil {
		t.Fatal(err)
	}
	src := b.String()
	for _, want := range []string{
		"rpc One ( Tick ) returns ( Tick );",
		"rpc Watch ( Tick ) returns ( stream Tick );",
		"rpc Sum ( stream Tick ) returns ( Tick );",
		"rpc Echo ( stream Tick ) returns ( stream Tick );",
	} {
		if !strings.Contains(src, want) {
			t.Errorf("the printed .proto lacks %q:\n%s", want, src)
		}
	}
}
