// Package prototest checks, in tests, that the gRPC schemas a server
// describes through server reflection are what other languages' tools
// accept: it exports the descriptors the way grpcurl does
// (-proto-out-dir), prints them as .proto source, compiles them with
// protoc and lints them with buf.
//
// protoc is Debian's protobuf-compiler (`make deps` installs it); when it
// is not on PATH the test fails with the command that installs it under
// CI (CI set), and is skipped otherwise, like redistest. buf is the path
// in SUNDIAL_BUF, else the bufVersion that `make deps` installs, else
// built from the Go module proxy with `go run`.
package prototest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jhump/protoreflect/v2/protoprint"
	"google.golang.org/grpc"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

// bufVersion is the buf release Check lints with.
const bufVersion = "v1.75.0"

// BufConfig is the buf.yaml Check lints with: buf's STANDARD rules except
//
//   - SERVICE_SUFFIX: Sundial names a service after the first segment of
//     its operation IDs ("billing.charge" -> shop.v1.Billing), and renaming
//     every service to …Service would break every existing client;
//   - FIELD_LOWER_SNAKE_CASE: a field's name is its JSON name (the json tag),
//     so that one input means the same over HTTP, gRPC and the CLI;
//
// and with google.protobuf.Empty allowed as a request and as a response
// (the message of an operation's struct{} input or output, shared by
// every such method).
const BufConfig = `version: v2
lint:
  use:
    - STANDARD
  except:
    - SERVICE_SUFFIX
    - FIELD_LOWER_SNAKE_CASE
  rpc_allow_google_protobuf_empty_requests: true
  rpc_allow_google_protobuf_empty_responses: true
`

// Export asks the reflection service on conn for every service except
// gRPC's own (grpc.*) and returns the files that describe them with
// their imports, in dependency order, as grpcurl receives them.
func Export(tb testing.TB, conn grpc.ClientConnInterface) []protoreflect.FileDescriptor {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		tb.Fatalf("prototest: reflection: %v", err)
	}
	defer stream.CloseSend()
	ask := func(req *reflectionpb.ServerReflectionRequest) *reflectionpb.ServerReflectionResponse {
		tb.Helper()
		if err := stream.Send(req); err != nil {
			tb.Fatalf("prototest: reflection: %v", err)
		}
		resp, err := stream.Recv()
		if err != nil {
			tb.Fatalf("prototest: reflection: %v", err)
		}
		if e := resp.GetErrorResponse(); e != nil {
			tb.Fatalf("prototest: reflection(%v): %s", req, e.GetErrorMessage())
		}
		return resp
	}
	var services []string
	for _, s := range ask(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}).GetListServicesResponse().GetService() {
		if !strings.HasPrefix(s.GetName(), "grpc.") {
			services = append(services, s.GetName())
		}
	}
	if len(services) == 0 {
		tb.Fatal("prototest: reflection lists no application services")
	}
	set := &descriptorpb.FileDescriptorSet{}
	seen := map[string]bool{}
	for _, svc := range services {
		resp := ask(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: svc}})
		for _, b := range resp.GetFileDescriptorResponse().GetFileDescriptorProto() {
			fdp := new(descriptorpb.FileDescriptorProto)
			if err := proto.Unmarshal(b, fdp); err != nil {
				tb.Fatalf("prototest: %s: %v", svc, err)
			}
			if !seen[fdp.GetName()] {
				seen[fdp.GetName()] = true
				set.File = append(set.File, fdp)
			}
		}
	}
	files, err := protodesc.NewFiles(set)
	if err != nil {
		tb.Fatalf("prototest: the files reflection sent do not resolve: %v", err)
	}
	var out []protoreflect.FileDescriptor
	files.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		out = append(out, fd)
		return true
	})
	slices.SortFunc(out, func(a, b protoreflect.FileDescriptor) int { return strings.Compare(a.Path(), b.Path()) })
	return out
}

// writeFiles prints the files that are not google/protobuf's well-known types
// (protoc and buf have those built in) as .proto source under dir, as
// grpcurl's -proto-out-dir does, and returns their paths relative to dir.
func writeFiles(tb testing.TB, files []protoreflect.FileDescriptor, dir string) []string {
	tb.Helper()
	var own []protoreflect.FileDescriptor
	var paths []string
	for _, fd := range files {
		if strings.HasPrefix(fd.Path(), "google/protobuf/") {
			continue
		}
		own = append(own, fd)
		paths = append(paths, fd.Path())
	}
	if err := (&protoprint.Printer{}).PrintProtosToFileSystem(own, dir); err != nil {
		tb.Fatalf("prototest: printing .proto files: %v", err)
	}
	return paths
}

// compileProtos compiles the .proto files (paths relative to dir) with
// protoc and fails the test with protoc's output when it rejects them.
func compileProtos(tb testing.TB, dir string, paths []string) {
	tb.Helper()
	bin, err := exec.LookPath("protoc")
	if err != nil {
		msg := "prototest: protoc not found; run `make deps` (or: apt-get install -y protobuf-compiler)"
		if os.Getenv("CI") != "" {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	if err := protoc(bin, dir, tb.TempDir(), paths); err != nil {
		tb.Fatalf("%v\n%s", err, dump(dir, paths))
	}
}

// protoc compiles paths (relative to dir) into a descriptor set in out.
func protoc(bin, dir, out string, paths []string) error {
	args := []string{"-I", dir, "--descriptor_set_out=" + filepath.Join(out, "out.binpb"), "--include_imports"}
	if msg, err := run(bin, dir, append(args, paths...)...); err != nil {
		return fmt.Errorf("protoc rejects the exported schema: %v\n%s", err, msg)
	}
	return nil
}

// lintProtos runs `buf lint` with BufConfig on dir and fails the test
// with buf's findings.
func lintProtos(tb testing.TB, dir string, paths []string) {
	tb.Helper()
	if err := lint(dir); err != nil {
		tb.Fatalf("%v\n%s", err, dump(dir, paths))
	}
}

// installedBuf returns the buf of bufVersion that `make deps` installs
// (in GOBIN, else GOPATH/bin), or "" when there is none: installing it
// once there, before the tests, spares every package that lints a `go run`
// build of its own.
func installedBuf() string {
	gobin, err := exec.LookPath("go")
	if err != nil {
		return ""
	}
	dir, err := exec.Command(gobin, "env", "GOBIN").Output()
	if err != nil {
		return ""
	}
	bin := strings.TrimSpace(string(dir))
	if bin == "" {
		gp, err := exec.Command(gobin, "env", "GOPATH").Output()
		if err != nil {
			return ""
		}
		bin = filepath.Join(strings.TrimSpace(strings.SplitN(string(gp), string(os.PathListSeparator), 2)[0]), "bin")
	}
	bin = filepath.Join(bin, "buf")
	v, err := exec.Command(bin, "--version").Output()
	if err != nil || strings.TrimSpace(string(v)) != strings.TrimPrefix(bufVersion, "v") {
		return ""
	}
	return bin
}

// lint runs `buf lint` with BufConfig in dir.
func lint(dir string) error {
	if err := os.WriteFile(filepath.Join(dir, "buf.yaml"), []byte(BufConfig), 0o644); err != nil {
		return err
	}
	var out []byte
	var err error
	if bin := os.Getenv("SUNDIAL_BUF"); bin != "" {
		out, err = run(bin, dir, "lint")
	} else if bin := installedBuf(); bin != "" {
		out, err = run(bin, dir, "lint")
	} else {
		gobin, lerr := exec.LookPath("go")
		if lerr != nil {
			return fmt.Errorf("prototest: buf lint needs the go command: %w", lerr)
		}
		// `go run pkg@version` builds buf outside this module (its
		// dependencies stay out of Sundial's go.mod) and caches the build.
		out, err = runEnv(gobin, dir, []string{"GOFLAGS=-mod=mod", "GOWORK=off"}, "run", "github.com/bufbuild/buf/cmd/buf@"+bufVersion, "lint")
	}
	if err != nil {
		return fmt.Errorf("buf lint rejects the exported schema: %v\n%s", err, out)
	}
	return nil
}

// Check exports the schemas served on conn, writes them under a temporary
// directory, compiles them with protoc and lints them with buf; it returns
// the directory.
func Check(tb testing.TB, conn grpc.ClientConnInterface) string {
	tb.Helper()
	dir := tb.TempDir()
	paths := writeFiles(tb, Export(tb, conn), dir)
	compileProtos(tb, dir, paths)
	lintProtos(tb, dir, paths)
	return dir
}

func run(bin, dir string, args ...string) ([]byte, error) { return runEnv(bin, dir, nil, args...) }

func runEnv(bin, dir string, env []string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	return cmd.CombinedOutput()
}

// dump returns the .proto files, for the failure message.
func dump(dir string, paths []string) string {
	var b bytes.Buffer
	for _, p := range paths {
		src, _ := os.ReadFile(filepath.Join(dir, p))
		b.WriteString("--- " + p + "\n")
		b.Write(src)
	}
	return b.String()
}
