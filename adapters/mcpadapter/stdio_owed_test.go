package mcpadapter_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"sync"
	"testing"
)

// TestStdioAnswerOfNoMethodPaysNoOther: over stdio, the answer to a
// request the SDK refuses before any handler (a method it does not know)
// pays only for that request. Shutdown still waits for the answer of a
// tool call that is being written.
func TestStdioAnswerOfNoMethodPaysNoOther(t *testing.T) {
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	k := newKernel(t, newProbe(), gatedWriter(func(b []byte) {
		if bytes.Contains(b, []byte(`"msg":"mcp call"`)) {
			once.Do(func() { close(held) })
			<-release
		}
	}))
	_, m := serve(t, k, nil)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = m.ServeStdio(ctx, inR, outW)
		outW.Close()
	}()
	lines := make(chan string, 8)
	go func() {
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	defer func() {
		cancel()
		inW.Close()
		<-served
	}()
	send := func(s string) {
		t.Helper()
		if _, err := io.WriteString(inW, s+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18",` +
		`"capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	wait(t, lines, "the answer to initialize")
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"orders.wait",` +
		`"arguments":{},"_meta":{"sundial/timeoutMs":100}}}`)
	wait(t, held, "the call to be logged")
	send(`{"jsonrpc":"2.0","id":3,"method":"no/such"}`)
	if a := wait(t, lines, "the answer to no/such"); !bytes.Contains([]byte(a), []byte(`"id":3`)) {
		close(release)
		t.Fatalf("answer %s, want the one to no/such", a)
	}
	shutdownAfterRelease(t, m, release)
	if a := wait(t, lines, "the call's answer"); !bytes.Contains([]byte(a), []byte("KERNEL_TIMEOUT_001")) {
		t.Errorf("the call answered %s, want its TIMEOUT", a)
	}
}
