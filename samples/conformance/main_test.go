package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/sundial-go/sundial/adapters/grpcadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
)

// start runs the program as the runner does: a ServerCompatRequest on
// its standard input, a ServerCompatResponse on its standard output. It
// returns the server's base URL; the program stops when the test ends.
func start(t *testing.T) string {
	t.Helper()
	var msg []byte
	msg = protowire.AppendTag(msg, 6, protowire.VarintType) // message_receive_limit
	msg = protowire.AppendVarint(msg, 1<<20)
	in := bytes.NewReader(append(binary.BigEndian.AppendUint32(nil, uint32(len(msg))), msg...))
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, in, outW) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	var n [4]byte
	if _, err := io.ReadFull(outR, n[:]); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, binary.BigEndian.Uint32(n[:]))
	if _, err := io.ReadFull(outR, b); err != nil {
		t.Fatal(err)
	}
	var host string
	var port uint64
	for len(b) > 0 {
		num, typ, m := protowire.ConsumeTag(b)
		b = b[m:]
		switch {
		case num == 1 && typ == protowire.BytesType:
			v, m := protowire.ConsumeString(b)
			host, b = v, b[m:]
		case num == 2 && typ == protowire.VarintType:
			v, m := protowire.ConsumeVarint(b)
			port, b = v, b[m:]
		default:
			t.Fatalf("unexpected field %d in the response", num)
		}
	}
	return "http://" + host + ":" + strconv.FormatUint(port, 10)
}

// methods returns the descriptors of the program's methods, by full name.
func methods(t *testing.T) map[string]grpcadapter.Method {
	t.Helper()
	reg := operations.NewRegistry()
	if err := register(reg); err != nil {
		t.Fatal(err)
	}
	k, err := kernel.New(kernel.WithRegistry(reg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close() })
	g, err := grpcadapter.New(k)
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]grpcadapter.Method)
	for _, m := range g.Methods() {
		out[m.FullName] = m
	}
	return out
}

// client returns a connect-go client of the method m at base.
func client(m grpcadapter.Method, base string, h2c bool, opts ...connect.ClientOption) *connect.Client[dynamicpb.Message, dynamicpb.Message] {
	p := new(http.Protocols)
	if h2c {
		p.SetUnencryptedHTTP2(true)
	} else {
		p.SetHTTP1(true)
	}
	hc := &http.Client{Transport: &http.Transport{Protocols: p, TLSClientConfig: &tls.Config{}}}
	init := func(_ connect.Spec, x any) error {
		if msg, ok := x.(*dynamicpb.Message); ok {
			*msg = *dynamicpb.NewMessage(m.Output)
		}
		return nil
	}
	return connect.NewClient[dynamicpb.Message, dynamicpb.Message](hc, base+m.FullName,
		append([]connect.ClientOption{connect.WithResponseInitializer(init)}, opts...)...)
}

// message returns a message of d given as protobuf JSON.
func message(t *testing.T, d protoreflect.MessageDescriptor, js string) *dynamicpb.Message {
	t.Helper()
	m := dynamicpb.NewMessage(d)
	if err := protojson.Unmarshal([]byte(js), m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestConformanceProgram: one call of each kind over Connect, gRPC and
// gRPC-Web. The program echoes the request's headers, sends the headers,
// trailers and data the request asks for, and answers with the status it
// asks for, with the request's echo as a detail.
func TestConformanceProgram(t *testing.T) {
	base := start(t)
	ms := methods(t)
	unary := ms["/connectrpc.conformance.v1.ConformanceService/Unary"]
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for _, p := range []struct {
		name string
		h2c  bool
		opts []connect.ClientOption
	}{
		{"connect", false, nil},
		{"grpc", true, []connect.ClientOption{connect.WithGRPC()}},
		{"grpcweb", false, []connect.ClientOption{connect.WithGRPCWeb()}},
	} {
		c := client(unary, base, p.h2c, p.opts...)
		req := connect.NewRequest(message(t, unary.Input, `{"responseDefinition":{
			"responseHeaders":[{"name":"x-custom-header","value":["foo"]}],
			"responseData":"aGk=","responseTrailers":[{"name":"x-custom-trailer","value":["bing"]}]}}`))
		req.Header().Set("X-Conformance-Test", "v1")
		res, err := c.CallUnary(ctx, req)
		if err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
		js, _ := protojson.Marshal(res.Msg)
		if !bytes.Contains(js, []byte(`"data":"aGk="`)) || !bytes.Contains(js, []byte(`"name":"X-Conformance-Test"`)) {
			t.Errorf("%s: %s; want the data and the echoed header", p.name, js)
		}
		if h, tr := res.Header().Get("X-Custom-Header"), res.Trailer().Get("X-Custom-Trailer"); h != "foo" || tr != "bing" {
			t.Errorf("%s: header %q, trailer %q; want foo, bing", p.name, h, tr)
		}
		_, err = c.CallUnary(ctx, connect.NewRequest(message(t, unary.Input,
			`{"responseDefinition":{"error":{"code":8,"message":"no more"}}}`)))
		var ce *connect.Error
		if !errors.As(err, &ce) || ce.Code() != connect.CodeResourceExhausted || ce.Message() != "no more" ||
			len(ce.Details()) != 1 || ce.Details()[0].Type() != "connectrpc.conformance.v1.ConformancePayload.RequestInfo" {
			t.Errorf("%s: %v; want resource_exhausted, no more, the request's echo", p.name, err)
		}
	}
	ss := ms["/connectrpc.conformance.v1.ConformanceService/ServerStream"]
	c := client(ss, base, true, connect.WithGRPC())
	stream, err := c.CallServerStream(ctx, connect.NewRequest(message(t, ss.Input, `{"responseDefinition":{
		"responseHeaders":[{"name":"x-custom-header","value":["foo"]}],
		"responseData":["YQ==","Yg=="],"responseTrailers":[{"name":"x-custom-trailer","value":["bing"]}]}}`)))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for stream.Receive() {
		n++
	}
	if err := stream.Err(); err != nil || n != 2 {
		t.Errorf("server stream: %d messages, %v; want 2", n, err)
	}
	if h, tr := stream.ResponseHeader().Get("X-Custom-Header"), stream.ResponseTrailer().Get("X-Custom-Trailer"); h != "foo" || tr != "bing" {
		t.Errorf("server stream: header %q, trailer %q; want foo, bing", h, tr)
	}
	_ = stream.Close()
}
