package systemtest

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/sundial-go/sundial/adapters/grpcadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
)

// chatLine is a message of the bidi stream chat.shout, each way.
type chatLine struct {
	Text string `json:"text"`
}

// shout answers each line with the line in capitals.
func shout(_ context.Context, in *operations.Receiver[chatLine], out *operations.Sender[chatLine]) error {
	for {
		m, err := in.Recv()
		if err != nil {
			return ignoreEOF(err)
		}
		if err := out.Send(chatLine{Text: strings.ToUpper(m.Text)}); err != nil {
			return err
		}
	}
}

// TestGRPCJSBidiStream: @grpc/grpc-js, a client nobody here wrote, runs a
// bidi stream on a Sundial gRPC server over loopback. It sends a message,
// waits for its reply, and sends the next; after the third reply it
// half-closes, and gets the status OK.
func TestGRPCJSBidiStream(t *testing.T) {
	node, modules := npmPackage(t, "@grpc/grpc-js")
	reg := operations.NewRegistry()
	if err := operations.RegisterBidiStream(reg, operations.Descriptor{ID: "chat.shout"}, shout); err != nil {
		t.Fatal(err)
	}
	k, err := kernel.New(kernel.WithRegistry(reg))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	a, err := grpcadapter.New(k)
	if err != nil {
		t.Fatal(err)
	}
	full := ""
	for _, m := range a.Methods() {
		if m.OperationID == "chat.shout" {
			full = m.FullName
		}
	}
	srv := grpc.NewServer()
	a.Register(srv)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		srv.Stop()
		<-served
	}()
	script, err := filepath.Abs(filepath.Join("testdata", "grpcjs", "bidi.js"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script, ln.Addr().String(), full, "one", "two", "three")
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node bidi.js: %v; output %q", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	t.Logf("@grpc/grpc-js bidi stream %s: %q", full, lines)
	var st struct {
		Code    int    `json:"code"`
		Details string `json:"details"`
	}
	if len(lines) != 4 || strings.Join(lines[:3], " ") != "ONE TWO THREE" ||
		json.Unmarshal([]byte(lines[3]), &st) != nil || st.Code != 0 {
		t.Errorf("node client got %q, want ONE, TWO, THREE and the status OK (code 0)", lines)
	}
}

// ignoreEOF returns nil for io.EOF, the caller's last message, and err
// otherwise.
func ignoreEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}
