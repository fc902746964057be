package prototest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// TestProtocRejectsMethodNamedLikeItsInput: a
// schema whose method Charge takes a message named Charge, printed as
// grpcurl prints it, does not compile ("Charge" is not a message type).
// It shows that compileProtos can fail; the shop and the chain sample pass it
// (TestProtocAndBufAcceptTheSchema in samples/shop and samples/chain).
func TestProtocRejectsMethodNamedLikeItsInput(t *testing.T) {
	bin, err := exec.LookPath("protoc")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("protoc not found; run `make deps`")
		}
		t.Skip("protoc not found; run `make deps`")
	}
	fd, err := protodesc.NewFile(chargeFile(), new(protoregistry.Files))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	paths := writeFiles(t, []protoreflect.FileDescriptor{fd}, dir)
	src, err := os.ReadFile(filepath.Join(dir, paths[0]))
	if err != nil {
		t.Fatal(err)
	}
	err = protoc(bin, dir, t.TempDir(), paths)
	if err == nil || !strings.Contains(err.Error(), "is not a message type") {
		t.Fatalf("protoc(method Charge taking message Charge) = %v, want \"is not a message type\"\n%s", err, src)
	}
}

// TestBufRejectsNonstandardNames shows that lintProtos can fail: buf's
// RPC_REQUEST_STANDARD_NAME rejects a method Pay taking a message named
// Charge (a schema protoc compiles).
func TestBufRejectsNonstandardNames(t *testing.T) {
	fdp := chargeFile()
	fdp.Service[0].Method[0].Name = new("Pay")
	fd, err := protodesc.NewFile(fdp, new(protoregistry.Files))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeFiles(t, []protoreflect.FileDescriptor{fd}, dir)
	err = lint(dir)
	if err == nil || !strings.Contains(err.Error(), `RPC request type "Charge" should be named "PayRequest"`) {
		t.Fatalf("buf lint(method Pay taking message Charge) = %v, want RPC_REQUEST_STANDARD_NAME (should be named \"PayRequest\")", err)
	}
}

// chargeFile is a shop.v1 that protoc refuses: method Billing/Charge
// takes and returns message Charge.
func chargeFile() *descriptorpb.FileDescriptorProto {
	return &descriptorpb.FileDescriptorProto{
		Name: new("shop/v1/operations.proto"), Package: new("shop.v1"), Syntax: new("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{{
			Name: new("Charge"),
			Field: []*descriptorpb.FieldDescriptorProto{{
				Name: new("amount"), JsonName: new("amount"), Number: new(int32(1)),
				Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(), Type: descriptorpb.FieldDescriptorProto_TYPE_INT64.Enum(),
			}},
		}},
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name: new("Billing"),
			Method: []*descriptorpb.MethodDescriptorProto{{
				Name: new("Charge"), InputType: new(".shop.v1.Charge"), OutputType: new(".shop.v1.Charge"),
			}},
		}},
	}
}

// TestProtocGenGoNeedsGoPackage shows what generateGo checks: protoc-gen-go
// refuses a file without go_package (and without M flags), and generates
// Go that builds from the same file with one.
func TestProtocGenGoNeedsGoPackage(t *testing.T) {
	if _, err := exec.LookPath("protoc"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("protoc not found; run `make deps`")
		}
		t.Skip("protoc not found; run `make deps`")
	}
	build := func(fdp *descriptorpb.FileDescriptorProto) error {
		fd, err := protodesc.NewFile(fdp, new(protoregistry.Files))
		if err != nil {
			t.Fatal(err)
		}
		_, err = generateGo(t, []protoreflect.FileDescriptor{fd})
		return err
	}
	fdp := chargeFile()
	fdp.Service[0].Method[0].Name = new("Pay")
	if err := build(fdp); err == nil || !strings.Contains(err.Error(), "unable to determine Go import path") {
		t.Errorf("generateGo(no go_package) = %v, want protoc-gen-go's \"unable to determine Go import path\"", err)
	}
	fdp.Options = &descriptorpb.FileOptions{GoPackage: new("example.com/gen/shop/v1;shopv1")}
	if err := build(fdp); err != nil {
		t.Errorf("generateGo(with go_package) = %v", err)
	}
}
