package grpcadapter_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/sundial-go/sundial/adapters/grpcadapter"
	"github.com/sundial-go/sundial/adapters/grpcadapter/prototest"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
)

// TestGoPackagePrefix: with WithGoPackagePrefix every file reflection
// exports has a go_package under the prefix, named as buf's managed mode
// names it, and protoc with protoc-gen-go generates Go from them without
// M flags, Go that builds; a second proto package included.
func TestGoPackagePrefix(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpt{
		adapter: []grpcadapter.Option{grpcadapter.WithGoPackagePrefix("example.com/acme/gen")},
		register: func(t testing.TB, reg *operations.Registry) {
			stamp := func(_ context.Context, in stamped) (stamped, error) { return in, nil }
			if err := operations.Register(reg, operations.Descriptor{ID: "clock.stamp", GRPCService: "other.v2.Clock"}, stamp); err != nil {
				t.Fatal(err)
			}
			newFeedApp().register(t, reg) // stream methods of every kind
		},
	})
	want := map[string]string{
		"test/v1/operations.proto":  "example.com/acme/gen/test/v1;testv1",
		"other/v2/operations.proto": "example.com/acme/gen/other/v2;otherv2",
	}
	for _, fd := range prototest.Export(t, h.conn) {
		w, ok := want[fd.Path()]
		if !ok {
			continue
		}
		if got := fd.Options().(*descriptorpb.FileOptions).GetGoPackage(); got != w {
			t.Errorf("%s: go_package %q, want %q", fd.Path(), got, w)
		}
		delete(want, fd.Path())
	}
	if len(want) > 0 {
		t.Errorf("reflection did not export %v", want)
	}
	dir := prototest.GenerateGo(t, h.conn)
	for _, f := range []string{"test/v1/operations.pb.go", "other/v2/operations.pb.go"} {
		src, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatalf("protoc-gen-go wrote no %s: %v", f, err)
		}
		if pkg := strings.Split(f, "/")[0] + strings.Split(f, "/")[1]; !strings.Contains(string(src), "\npackage "+pkg+"\n") {
			t.Errorf("%s is not package %s", f, pkg)
		}
	}
}

// TestStreamSchema: the reflected schema marks each streaming operation's
// method with the stream flags of its kind ("stream" in the .proto); protoc
// compiles it and buf lints it, as for unary methods.
func TestStreamSchema(t *testing.T) {
	t.Parallel()
	h, _ := streamHarness(t, "", harnessOpt{})
	want := map[string][2]bool{ // client, server streaming
		"Watch": {false, true}, "Echo": {true, true}, "Sum": {true, false}, "Run": {false, false},
	}
	for _, fd := range prototest.Export(t, h.conn) {
		for i := range fd.Services().Len() {
			sd := fd.Services().Get(i)
			for j := range sd.Methods().Len() {
				md := sd.Methods().Get(j)
				w, ok := want[string(md.Name())]
				if !ok {
					continue
				}
				if got := [2]bool{md.IsStreamingClient(), md.IsStreamingServer()}; got != w {
					t.Errorf("%s: streaming (client, server) %v, want %v", md.FullName(), got, w)
				}
				delete(want, string(md.Name()))
			}
		}
	}
	if len(want) > 0 {
		t.Errorf("reflection did not export %v", want)
	}
	prototest.Check(t, h.conn)
}

// TestGoPackagePrefixRejected: New refuses a prefix that is no import
// path.
func TestGoPackagePrefixRejected(t *testing.T) {
	t.Parallel()
	k, err := kernel.New()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a//b", "/a", "a/", "a b", "a;b", "a/../b", "ä"} {
		if _, err := grpcadapter.New(k, grpcadapter.WithGoPackagePrefix(p)); err == nil || !strings.Contains(err.Error(), "WithGoPackagePrefix") {
			t.Errorf("New(WithGoPackagePrefix(%q)) = %v, want an error naming the option", p, err)
		}
	}
	if _, err := grpcadapter.New(k, grpcadapter.WithGoPackagePrefix("example.com/x-y/gen_v1~+")); err != nil {
		t.Errorf("New(a valid prefix) = %v", err)
	}
}
