package grpcadapter_test

import (
	"context"
	"slices"
	"testing"
	"time"

	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/sundial-go/sundial/operations"
)

type stamped struct {
	At   time.Time     `json:"at"`
	Wait time.Duration `json:"wait"`
}

// TestReflectionDescribesEverything lists the services through server
// reflection and resolves the file of each one from what reflection sends,
// as grpcurl does: the adapter's files, their imports (well-known types,
// the main file imported by another package's) and the application's own
// services.
func TestReflectionDescribesEverything(t *testing.T) {
	t.Parallel()
	h, _ := newAcmeHarnessWith(t, func(t testing.TB, reg *operations.Registry) {
		stamp := func(_ context.Context, in stamped) (stamped, error) { return in, nil }
		if err := operations.Register(reg, operations.Descriptor{ID: "clock.stamp", GRPCService: "other.v2.Clock"}, stamp); err != nil {
			t.Fatal(err)
		}
	})
	stream, err := reflectionpb.NewServerReflectionClient(h.conn).ServerReflectionInfo(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer stream.CloseSend()
	ask := func(req *reflectionpb.ServerReflectionRequest) *reflectionpb.ServerReflectionResponse {
		t.Helper()
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if e := resp.GetErrorResponse(); e != nil {
			t.Fatalf("reflection(%v) = %s", req, e.GetErrorMessage())
		}
		return resp
	}
	var services []string
	for _, s := range ask(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}).GetListServicesResponse().GetService() {
		services = append(services, s.GetName())
	}
	for _, want := range []string{"test.v1.Work", "other.v2.Clock", "acme.v1.Work", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"} {
		if !slices.Contains(services, want) {
			t.Errorf("reflection lists %v, want %s among them", services, want)
		}
	}
	// The reflection service sends each file once per stream, so a
	// client accumulates what it receives.
	set := &descriptorpb.FileDescriptorSet{}
	for _, svc := range []string{"test.v1.Work", "other.v2.Clock"} {
		resp := ask(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: svc}})
		for _, b := range resp.GetFileDescriptorResponse().GetFileDescriptorProto() {
			fdp := new(descriptorpb.FileDescriptorProto)
			if err := proto.Unmarshal(b, fdp); err != nil {
				t.Fatal(err)
			}
			set.File = append(set.File, fdp)
		}
		files, err := protodesc.NewFiles(set)
		if err != nil {
			t.Fatalf("the files reflection sent up to %s do not resolve: %v", svc, err)
		}
		d, err := files.FindDescriptorByName(protoreflect.FullName(svc))
		if err != nil {
			t.Fatalf("%s: %v", svc, err)
		}
		if svc == "other.v2.Clock" {
			in := d.(protoreflect.ServiceDescriptor).Methods().ByName("Stamp").Input()
			if in.FullName() != "test.v1.StampRequest" || in.Fields().ByName("at").Message().FullName() != "google.protobuf.Timestamp" ||
				in.Fields().ByName("wait").Message().FullName() != "google.protobuf.Duration" {
				t.Errorf("other.v2.Clock/Stamp input = %v, want test.v1.StampRequest with a Timestamp and a Duration", in)
			}
		}
	}
}
