// Package prototest checks, in tests, that other languages' tools accept
// the gRPC schemas a server describes through server reflection. It
// exports the descriptors the way grpcurl does (-proto-out-dir). It prints
// them as .proto source. Check compiles them with protoc and lints them
// with buf. GenerateGo generates Go from them with protoc-gen-go.
//
// protoc is Debian's protobuf-compiler; `make deps` installs it. When it
// is not on PATH, the test fails under CI (CI set), naming the command
// that installs it. Otherwise it is skipped, like redistest. buf is the
// path in SUNDIAL_BUF, else the bufVersion that `make deps` installs. Else
// it is built from the Go module proxy with `go run`.
package prototest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
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

// BufConfig is the buf.yaml Check lints with. It has buf's STANDARD rules
// except these two:
//
//   - SERVICE_SUFFIX. Sundial names a service after the first segment of
//     its operation IDs: "billing.charge" -> shop.v1.Billing. Renaming
//     every service to …Service would break every existing client.
//   - FIELD_LOWER_SNAKE_CASE. A field's name is its JSON name (the json
//     tag), so one input means the same over HTTP, gRPC and the CLI.
//
// It allows google.protobuf.Empty as a request and as a response. That is
// the message of an operation's struct{} input or output, shared by every
// such method.
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
// gRPC's own (grpc.*). It returns the files that describe them with their
// imports, in dependency order, as grpcurl receives them.
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

// installedBuf returns the buf of bufVersion that `make deps` installs, in
// GOBIN, else GOPATH/bin. It returns "" when there is none. Installing it
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

// Check exports the schemas served on conn and writes them under a
// temporary directory. It compiles them with protoc and lints them with
// buf. It returns the directory.
func Check(tb testing.TB, conn grpc.ClientConnInterface) string {
	tb.Helper()
	dir := tb.TempDir()
	paths := writeFiles(tb, Export(tb, conn), dir)
	compileProtos(tb, dir, paths)
	lintProtos(tb, dir, paths)
	return dir
}

// GenerateGo exports the schemas served on conn as Check does. It
// generates Go from them with protoc and protoc-gen-go, without M flags,
// as a Go client of the service would. It then builds the generated
// packages. It returns the module directory holding them. Each file needs
// a go_package option (grpcadapter.WithGoPackagePrefix gives one).
// protoc-gen-go is built from the google.golang.org/protobuf module the
// test's module requires, or taken from the path in SUNDIAL_PROTOC_GEN_GO.
func GenerateGo(tb testing.TB, conn grpc.ClientConnInterface) string {
	tb.Helper()
	dir, err := generateGo(tb, Export(tb, conn))
	if err != nil {
		tb.Fatal(err)
	}
	return dir
}

// generateGo compiles files with protoc and protoc-gen-go into a new
// module and builds it; it returns the module's directory.
func generateGo(tb testing.TB, files []protoreflect.FileDescriptor) (string, error) {
	tb.Helper()
	src := tb.TempDir()
	paths := writeFiles(tb, files, src)
	compileProtos(tb, src, paths) // protoc is there, or the test has ended
	bin, _ := exec.LookPath("protoc")
	mod := goModule(files)
	out := tb.TempDir()
	args := []string{"-I", src, "--plugin=protoc-gen-go=" + protocGenGo(tb), "--go_out=" + out, "--go_opt=module=" + mod}
	if msg, err := run(bin, src, append(args, paths...)...); err != nil {
		return "", fmt.Errorf("prototest: protoc-gen-go rejects the exported schema: %v\n%s\n%s", err, msg, dump(src, paths))
	}
	goMod := "module " + mod + "\n\ngo " + goVersion() + "\n\nrequire google.golang.org/protobuf " + protobufVersion(tb) + "\n"
	if err := os.WriteFile(filepath.Join(out, "go.mod"), []byte(goMod), 0o644); err != nil {
		return "", err
	}
	// The protobuf module is in the module cache: build offline.
	env := []string{"GOFLAGS=-mod=mod", "GOWORK=off", "GOPROXY=off", "GOSUMDB=off"}
	if msg, err := runEnv(goCommand(tb), out, env, "build", "./..."); err != nil {
		return "", fmt.Errorf("prototest: the Go protoc-gen-go generated does not build: %v\n%s", err, msg)
	}
	return out, nil
}

// goVersion is the language version of the running Go, e.g. "1.26".
func goVersion() string {
	v := strings.TrimPrefix(runtime.Version(), "go")
	if major, rest, ok := strings.Cut(v, "."); ok {
		minor, _, _ := strings.Cut(rest, ".")
		return major + "." + minor
	}
	return "1.21"
}

// goModule returns the longest import path that holds every file's
// go_package, the module of the generated code.
func goModule(files []protoreflect.FileDescriptor) string {
	var common []string
	first := true
	for _, fd := range files {
		if strings.HasPrefix(fd.Path(), "google/protobuf/") {
			continue
		}
		opts, _ := fd.Options().(*descriptorpb.FileOptions)
		ip, _, _ := strings.Cut(opts.GetGoPackage(), ";")
		elems := strings.Split(path.Dir(ip), "/")
		if first {
			common, first = elems, false
			continue
		}
		n := 0
		for n < len(common) && n < len(elems) && common[n] == elems[n] {
			n++
		}
		common = common[:n]
	}
	return strings.Join(common, "/")
}

// protocGenGo returns the protoc-gen-go to run: SUNDIAL_PROTOC_GEN_GO, or
// one built from the module cache.
func protocGenGo(tb testing.TB) string {
	tb.Helper()
	if bin := os.Getenv("SUNDIAL_PROTOC_GEN_GO"); bin != "" {
		return bin
	}
	bin := filepath.Join(tb.TempDir(), "protoc-gen-go")
	if msg, err := run(goCommand(tb), "", "build", "-o", bin, "google.golang.org/protobuf/cmd/protoc-gen-go"); err != nil {
		tb.Fatalf("prototest: building protoc-gen-go: %v\n%s", err, msg)
	}
	return bin
}

// protobufVersion is the version of google.golang.org/protobuf the test's
// module requires.
func protobufVersion(tb testing.TB) string {
	tb.Helper()
	v, err := exec.Command(goCommand(tb), "list", "-m", "-f", "{{.Version}}", "google.golang.org/protobuf").Output()
	if err != nil {
		tb.Fatalf("prototest: go list -m google.golang.org/protobuf: %v", err)
	}
	return strings.TrimSpace(string(v))
}

// goCommand returns the go command, or ends the test without one.
func goCommand(tb testing.TB) string {
	tb.Helper()
	bin, err := exec.LookPath("go")
	if err != nil {
		tb.Fatalf("prototest: the go command is needed: %v", err)
	}
	return bin
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
