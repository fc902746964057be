package systemtest

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/sundial-go/sundial/adapters/grpcadapter/prototest"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/samples/shop/internal/shopcmd"
)

// grpcShop is `shop serve` in-process on 127.0.0.1, seen from gRPC.
type grpcShop struct {
	*shopServer
	addr  string
	conn  *grpc.ClientConn
	files *reflectedFiles
}

// startShopGRPC runs the shop (HTTP and gRPC) and connects a gRPC client.
// The method descriptors come from the server's reflection service, as
// grpcurl gets them.
func startShopGRPC(t *testing.T, o shopcmd.ServeOptions) *grpcShop {
	t.Helper()
	out := &syncBuffer{}
	o.Stdout = out
	s := startShopHTTP(t, o) // returns once both listeners are up
	g := &grpcShop{shopServer: s, addr: grpcAddrOf(t, out)}
	conn, err := grpc.NewClient(g.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	g.conn = conn
	g.files = reflectServer(t, conn)
	return g
}

// reflectedFiles is what a reflection client learned of the server.
type reflectedFiles struct {
	services []string
	byName   map[protoreflect.FullName]protoreflect.ServiceDescriptor
}

// reflectServer lists the server's services and loads the file of every one of
// them through the reflection service (v1), as grpcurl does.
func reflectServer(t *testing.T, conn *grpc.ClientConn) *reflectedFiles {
	t.Helper()
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(t.Context())
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
			t.Fatalf("reflection %v: %s", req, e.GetErrorMessage())
		}
		return resp
	}
	rf := &reflectedFiles{byName: map[protoreflect.FullName]protoreflect.ServiceDescriptor{}}
	list := ask(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
	for _, s := range list.GetListServicesResponse().GetService() {
		rf.services = append(rf.services, s.GetName())
	}
	slices.Sort(rf.services)
	fdps := map[string]*descriptorpb.FileDescriptorProto{}
	for _, svc := range rf.services {
		resp := ask(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: svc}})
		for _, b := range resp.GetFileDescriptorResponse().GetFileDescriptorProto() {
			fdp := new(descriptorpb.FileDescriptorProto)
			if err := proto.Unmarshal(b, fdp); err != nil {
				t.Fatal(err)
			}
			fdps[fdp.GetName()] = fdp
		}
	}
	set := &descriptorpb.FileDescriptorSet{}
	for _, fdp := range fdps {
		set.File = append(set.File, fdp)
	}
	files, err := protodesc.NewFiles(set)
	if err != nil {
		t.Fatalf("the reflected files do not resolve: %v", err)
	}
	files.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		svcs := fd.Services()
		for i := range svcs.Len() {
			rf.byName[svcs.Get(i).FullName()] = svcs.Get(i)
		}
		return true
	})
	return rf
}

// method returns the reflected descriptor of /service/method.
func (rf *reflectedFiles) method(t *testing.T, service, method string) protoreflect.MethodDescriptor {
	t.Helper()
	sd, ok := rf.byName[protoreflect.FullName(service)]
	if !ok {
		t.Fatalf("reflection does not describe service %s", service)
	}
	md := sd.Methods().ByName(protoreflect.Name(method))
	if md == nil {
		t.Fatalf("reflection does not describe %s/%s", service, method)
	}
	return md
}

// call invokes /service/method with a request given as JSON, built from
// the reflected descriptors, and returns the response as JSON (compact,
// encoding/json's key order) and the status (nil for OK).
func (g *grpcShop) call(ctx context.Context, t *testing.T, service, method, reqJSON string, opts ...grpc.CallOption) (string, *status.Status) {
	t.Helper()
	md := g.files.method(t, service, method)
	req := requestMessage(t, md, reqJSON)
	resp := dynamicpb.NewMessage(md.Output())
	if err := g.conn.Invoke(ctx, "/"+service+"/"+method, req, resp, opts...); err != nil {
		return "", status.Convert(err)
	}
	b, err := protojson.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	b, _ = json.Marshal(v)
	return string(b), nil
}

// requestMessage returns the request message of md given as JSON, with
// its unknown keys as unknown fields (splitUnknown).
func requestMessage(t *testing.T, md protoreflect.MethodDescriptor, reqJSON string) *dynamicpb.Message {
	t.Helper()
	req := dynamicpb.NewMessage(md.Input())
	known, unknown := splitUnknown(t, md.Input(), reqJSON)
	if err := protojson.Unmarshal(known, req); err != nil {
		t.Fatalf("%s: request %s: %v", md.FullName(), reqJSON, err)
	}
	req.SetUnknown(unknown)
	return req
}

// splitUnknown returns the JSON object reqJSON without the keys that are
// neither the JSON name nor the name of a field of md, and those keys'
// values as unknown protobuf fields numbered from 1000 (in key order),
// each a length-delimited field holding the value's JSON: what a client
// built from a newer schema sends (the binary wire has numbers, not
// names, so a key in the wrong case is such a field too). grpcurl rejects
// these keys itself; the table needs them on the wire to see the server's
// input policy.
func splitUnknown(t *testing.T, md protoreflect.MessageDescriptor, reqJSON string) ([]byte, protoreflect.RawFields) {
	t.Helper()
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(reqJSON), &obj); err != nil {
		return []byte(reqJSON), nil
	}
	var raw protoreflect.RawFields
	for i, k := range slices.Sorted(maps.Keys(obj)) {
		if md.Fields().ByJSONName(k) != nil || md.Fields().ByName(protoreflect.Name(k)) != nil {
			continue
		}
		raw = protowire.AppendTag(raw, protowire.Number(1000+i), protowire.BytesType)
		raw = protowire.AppendBytes(raw, obj[k])
		delete(obj, k)
	}
	known, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return known, raw
}

func errorInfoOf(st *status.Status) *errdetails.ErrorInfo {
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei
		}
	}
	return nil
}

func retryInfoOf(st *status.Status) *errdetails.RetryInfo {
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri
		}
	}
	return nil
}

// waitGRPCRecord waits for the call record of op with code.
func (l shopLogs) waitGRPCRecord(t *testing.T, op, code string) pipelinetest.Record {
	t.Helper()
	return l.waitGRPCRecordWhere(t, func(r pipelinetest.Record) bool { return r.Attrs["operation"] == op && r.Attrs["code"] == code })
}

// waitGRPCRecordWhere waits for a gRPC call record that match accepts.
func (l shopLogs) waitGRPCRecordWhere(t *testing.T, match func(pipelinetest.Record) bool) pipelinetest.Record {
	t.Helper()
	return l.waitWhere(t, func(r pipelinetest.Record) bool { return r.Message == "grpc call" && match(r) })
}

// The README's quickstart over gRPC: orders.create admits 2 calls per 60 s.
func TestShopGRPCThreeOrders(t *testing.T) {
	g := startShopGRPC(t, shopcmd.ServeOptions{})
	for i, want := range []string{`{"amount":"1","id":"ord-1","name":"widget"}`, `{"amount":"1","id":"ord-2","name":"widget"}`} {
		out, st := g.call(t.Context(), t, "shop.v1.Orders", "Create", `{"name":"widget","amount":1}`)
		if st != nil || out != want {
			t.Fatalf("order %d = %s %v, want OK %s", i+1, out, st, want)
		}
	}
	_, st := g.call(t.Context(), t, "shop.v1.Orders", "Create", `{"name":"widget","amount":1}`)
	if st.Code() != codes.Unavailable {
		t.Fatalf("order 3 = %v, want Unavailable", st)
	}
	ei, ri := errorInfoOf(st), retryInfoOf(st)
	if ei.GetReason() != resilience.CodeRateLimited || ei.GetDomain() != "sundial" || ei.GetMetadata()["id"] != "orders.create" {
		t.Errorf("order 3 ErrorInfo = %v, want reason %s, domain sundial, id orders.create", ei, resilience.CodeRateLimited)
	}
	if d := ri.GetRetryDelay().AsDuration(); ri == nil || d < time.Second || d > 60*time.Second || d%time.Second != 0 {
		t.Errorf("order 3 RetryInfo = %v, want whole seconds in [1s, 60s]", ri)
	} else if ei.GetMetadata()["retryAfter"] != fmt.Sprint(int(d.Seconds())) {
		t.Errorf("order 3 ErrorInfo retryAfter = %q, RetryInfo %v: want the same", ei.GetMetadata()["retryAfter"], d)
	}
	t.Logf("order 3: %v %v", st.Code(), st.Details())
	g.logs.waitGRPCRecord(t, "orders.create", resilience.CodeRateLimited)
}

// TestShopGRPCDeadlineCutsLongCall: a 300 ms grpc-timeout cuts a 2 s
// export: DeadlineExceeded no sooner than the deadline, the handler's
// context ended by it, and the server's record says TIMEOUT. The caller
// waits for the server (patientContext), so the attribution is the
// server's deadline whatever the machine's speed; a client's own
// cancellation near the deadline is TestInboundAttribution's. A handler
// whose deadline passed before it could start never runs: the call is
// then made again with ten times the deadline and the export's length,
// three tries in all.
func TestShopGRPCDeadlineCutsLongCall(t *testing.T) {
	starts := newHandlerStarts("reports.export")
	g := startShopGRPC(t, shopcmd.ServeOptions{KernelOptions: starts.options()})
	var (
		start time.Time
		took  time.Duration
		// Of the call whose handler ran: its deadline, the export's length
		// and the call's trace ID (each call has one of its own, which the
		// server's record carries).
		d, export time.Duration
		traceID   string
	)
	for try, scale := 1, 1; ; try, scale = try+1, 10*scale {
		d, export = time.Duration(scale)*300*time.Millisecond, time.Duration(scale)*2*time.Second
		traceID = fmt.Sprintf("4bf92f3577b34da6a3ce929d0e0e%04d", try)
		md := metadata.Pairs("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
		mark := starts.mark()
		start = time.Now()
		ctx := patientContext{metadata.NewOutgoingContext(t.Context(), md), start.Add(d)}
		_, st := g.call(ctx, t, "shop.v1.Reports", "Export", fmt.Sprintf(`{"delayMs":%d}`, export.Milliseconds()))
		took = time.Since(start)
		if st.Code() != codes.DeadlineExceeded {
			t.Fatalf("Export(%v) with a %v deadline = %v, want DeadlineExceeded", export, d, st)
		}
		if starts.ran(t, mark) {
			break
		}
		if try == 3 {
			t.Fatalf("the export's handler did not start before its deadline in 3 tries (the last %v)", d)
		}
		t.Logf("the export's handler did not start before its %v deadline: once more, with ten times it", d)
	}
	if took < d-10*time.Millisecond {
		t.Errorf("a %v deadline on a %v export returned after %v, before the deadline", d, export, took)
	}
	select {
	case ended := <-g.probe.ctxEnded:
		if e := ended.Sub(start); e < d-50*time.Millisecond {
			t.Errorf("the handler's context ended %v after the call, before the %v deadline", e, d)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the handler's context did not end")
	}
	rec := g.logs.waitGRPCRecordWhere(t, func(r pipelinetest.Record) bool {
		return r.Attrs["operation"] == "reports.export" && r.Attrs["code"] == pipeline.CodeTimeout && r.Attrs["traceId"] == traceID
	})
	if rec.Attrs["grpcCode"] != "DeadlineExceeded" {
		t.Errorf("log record = %v, want grpcCode DeadlineExceeded", rec.Attrs)
	}
}

func TestShopGRPCClientCancel(t *testing.T) {
	g := startShopGRPC(t, shopcmd.ServeOptions{})
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		for op := range g.probe.started {
			if op == "reports.export" {
				time.Sleep(50 * time.Millisecond) // mid-call
				cancel()
				return
			}
		}
	}()
	_, st := g.call(ctx, t, "shop.v1.Reports", "Export", `{"delayMs":5000}`)
	if st.Code() != codes.Canceled {
		t.Fatalf("Export canceled by the client = %v, want Canceled", st)
	}
	select {
	case <-g.probe.ctxEnded:
	case <-time.After(3 * time.Second):
		t.Fatal("the handler's context did not end")
	}
	rec := g.logs.waitGRPCRecord(t, "reports.export", pipeline.CodeCanceled)
	if rec.Attrs["grpcCode"] != "Canceled" {
		t.Errorf("log record = %v, want grpcCode Canceled", rec.Attrs)
	}
}

func TestShopGRPCReflection(t *testing.T) {
	g := startShopGRPC(t, shopcmd.ServeOptions{})
	for _, want := range []string{"shop.v1.Orders", "shop.v1.Reports", "shop.v1.Billing", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} {
		if !slices.Contains(g.files.services, want) {
			t.Errorf("reflection lists %v, want %s among them", g.files.services, want)
		}
	}
	methods := map[string]string{ // method -> input message
		"shop.v1.Orders/Create":  "shop.v1.CreateRequest",
		"shop.v1.Orders/Get":     "shop.v1.GetRequest",
		"shop.v1.Reports/Export": "shop.v1.ExportRequest",
		"shop.v1.Billing/Charge": "shop.v1.ChargeRequest",
	}
	for m, in := range methods {
		svc, name, _ := strings.Cut(m, "/")
		if got := g.files.method(t, svc, name).Input().FullName(); string(got) != in {
			t.Errorf("reflection: %s takes %s, want %s", m, got, in)
		}
	}
	// Call through the reflected descriptors: create, then get.
	out, st := g.call(t.Context(), t, "shop.v1.Orders", "Create", `{"name":"lamp","amount":2}`)
	if st != nil || out != `{"amount":"2","id":"ord-1","name":"lamp"}` {
		t.Fatalf("Create = %s %v", out, st)
	}
	if out, st := g.call(t.Context(), t, "shop.v1.Orders", "Get", `{"id":"ord-1"}`); st != nil || out != `{"amount":"2","id":"ord-1","name":"lamp"}` {
		t.Errorf("Get(ord-1) = %s %v", out, st)
	}
	_, st = g.call(t.Context(), t, "shop.v1.Orders", "Get", `{"id":"ord-9"}`)
	if st.Code() != codes.NotFound || errorInfoOf(st).GetReason() != "SHOP_NOT_FOUND_001" || st.Message() != "Order 'ord-9' does not exist." {
		t.Errorf("Get(ord-9) = %v, want NotFound SHOP_NOT_FOUND_001", st)
	}
}

// TestProtocAndBufAcceptTheSchema exports the shop's gRPC schema through
// server reflection over a real loopback listener, prints it as .proto
// source as grpcurl -proto-out-dir does, compiles it with protoc and lints
// it with buf (docs/grpc.md, "Schemas other tools accept"), then
// generates Go from it with protoc-gen-go, without M flags, and builds it.
// A method named like its input fails protoc with `"Charge" is not a message
// type` (TestProtocRejectsMethodNamedLikeItsInput).
func TestProtocAndBufAcceptTheSchema(t *testing.T) {
	g := startShopGRPC(t, shopcmd.ServeOptions{})
	prototest.Check(t, g.conn)
	prototest.GenerateGo(t, g.conn)
}

func TestShopGRPCHealth(t *testing.T) {
	g := startShopGRPC(t, shopcmd.ServeOptions{})
	hc := healthpb.NewHealthClient(g.conn)
	for _, svc := range []string{"", "shop.v1.Orders", "shop.v1.Reports", "shop.v1.Billing"} {
		resp, err := hc.Check(t.Context(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health Check(%q) = %v, %v; want SERVING", svc, resp, err)
		}
	}
}

// TestShopGRPCMalformedTimeout sends grpc-timeout values grpc-go cannot
// parse, over raw HTTP/2 (grpc-go's client never sends them): grpc-go
// rejects each call itself, and the server stays healthy.
func TestShopGRPCMalformedTimeout(t *testing.T) {
	g := startShopGRPC(t, shopcmd.ServeOptions{})
	tr := &http2.Transport{
		AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}
	defer tr.CloseIdleConnections()
	for _, timeout := range []string{"bogus", "1x", "-5S", "123456789S", ""} {
		t.Run(fmt.Sprintf("%q", timeout), func(t *testing.T) {
			// An empty message: flag 0, length 0.
			req, err := http.NewRequest("POST", "http://"+g.addr+"/shop.v1.Orders/Get", strings.NewReader("\x00\x00\x00\x00\x00"))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/grpc")
			req.Header.Set("TE", "trailers")
			req.Header["Grpc-Timeout"] = []string{timeout}
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			st := resp.Header.Get("Grpc-Status") + resp.Trailer.Get("Grpc-Status")
			msg := resp.Header.Get("Grpc-Message") + resp.Trailer.Get("Grpc-Message")
			if st != fmt.Sprint(int(codes.Internal)) || !strings.Contains(msg, "grpc-timeout") {
				t.Errorf("grpc-timeout %q: HTTP %d grpc-status %q grpc-message %q, want grpc-go's Internal malformed grpc-timeout", timeout, resp.StatusCode, st, msg)
			}
		})
	}
	if resp, err := healthpb.NewHealthClient(g.conn).Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health after malformed timeouts = %v, %v; want SERVING", resp, err)
	}
	if _, st := g.call(t.Context(), t, "shop.v1.Orders", "Create", `{"name":"widget","amount":1}`); st != nil {
		t.Errorf("Create after malformed timeouts = %v, want OK", st)
	}
}

// TestShopGRPCGracefulShutdown stops serve while a call is in flight:
// within the grace period the call finishes; past it, it is canceled and
// serve reports the exhausted grace.
func TestShopGRPCGracefulShutdown(t *testing.T) {
	tests := []struct {
		name    string
		grace   time.Duration
		delayMs int
		want    codes.Code
		wantErr bool
	}{
		{"in-flight call finishes", 5 * time.Second, 600, codes.OK, false},
		{"grace exhausted", 300 * time.Millisecond, 10000, codes.Unavailable, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, logs := &syncBuffer{}, new(pipelinetest.LogSink)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			o := shopcmd.ServeOptions{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", Grace: tt.grace, Stdout: out}
			p := newProbe()
			o.Logger = logs.Logger()
			o.KernelOptions = []kernel.Option{kernel.UseAt(pipeline.StageHandle, p)}
			ready := make(chan struct{})
			o.Ready = func(string) { close(ready) }
			done := make(chan error, 1)
			go func() { done <- shopcmd.Serve(ctx, o) }()
			<-ready
			addr := grpcAddrOf(t, out)
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			g := &grpcShop{conn: conn, files: reflectServer(t, conn)}
			res := make(chan *status.Status, 1)
			go func() {
				_, st := g.call(context.Background(), t, "shop.v1.Reports", "Export", fmt.Sprintf(`{"delayMs":%d}`, tt.delayMs))
				res <- st
			}()
			// Signal once the call runs.
			<-p.started
			signalled := time.Now()
			cancel()
			st := <-res
			err = <-done
			took := time.Since(signalled)
			if st.Code() != tt.want {
				t.Errorf("in-flight call = %v, want %v", st, tt.want)
			}
			if (err != nil) != tt.wantErr {
				t.Errorf("serve() = %v, want error %v", err, tt.wantErr)
			}
			if took > tt.grace+2*time.Second {
				t.Errorf("serve returned %v after the signal, want within the grace period %v", took, tt.grace)
			}
			// No new calls once it is down.
			if _, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.WaitForReady(false)); status.Code(err) != codes.Unavailable {
				t.Errorf("health after shutdown = %v, want Unavailable", err)
			}
		})
	}
}

// grpcAddrOf reads the gRPC address from serve's stdout.
func grpcAddrOf(t *testing.T, out *syncBuffer) string {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(out.String()))
	for sc.Scan() {
		if a, ok := strings.CutPrefix(sc.Text(), "shop: serving gRPC on "); ok {
			if !strings.HasPrefix(a, "127.0.0.1:") {
				t.Fatalf("serve listens for gRPC on %s, want 127.0.0.1", a)
			}
			return a
		}
	}
	t.Fatalf("serve printed no gRPC address:\n%s", out)
	return ""
}

// TestShopShutdownWaitsForStragglers stops serve while a handler that
// ignores its context still runs after its answer left at the deadline:
// serve waits for it within the grace period, and past it reports the
// invocations still running. A handler whose deadline (TimeoutSeconds
// 0.2) passed before it could start never runs, and leaves no straggler:
// the story then starts over on a fresh shop with ten times the deadline,
// three tries in all.
func TestShopShutdownWaitsForStragglers(t *testing.T) {
	tests := []struct {
		name    string
		grace   time.Duration
		release bool // release the handler once the shutdown started
	}{
		{"straggler returns within the grace period", 5 * time.Second, true},
		{"grace exhausted", 300 * time.Millisecond, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// serve returns once the grace period is over, at the latest.
			waitServe := func(done <-chan error) error {
				t.Helper()
				select {
				case err := <-done:
					return err
				case <-time.After(tt.grace + 10*time.Second):
					t.Fatalf("serve did not return within %v of the signal", tt.grace+10*time.Second)
					return nil
				}
			}
			var (
				env    *shopEnv
				logs   shopLogs
				cancel context.CancelFunc
				done   chan error
			)
			for try, d := 1, 200*time.Millisecond; ; try, d = try+1, 10*d {
				env = newShopEnv(t, fmt.Sprintf(`{"TimeoutSeconds": %g}`, d.Seconds()))
				t.Cleanup(env.releaseStalled)
				var ctx context.Context
				ctx, cancel = context.WithCancel(context.Background())
				t.Cleanup(cancel)
				out := &syncBuffer{}
				logs = newShopLogs()
				o := shopcmd.ServeOptions{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", Grace: tt.grace, Stdout: out,
					Logger: logs.Logger(), KernelOptions: env.kernelOptions()}
				ready := make(chan struct{})
				o.Ready = func(string) { close(ready) }
				done = make(chan error, 1)
				go func() { done <- shopcmd.Serve(ctx, o) }()
				select {
				case <-ready:
				case err := <-done:
					t.Fatalf("serve() = %v before listening", err)
				}
				conn, err := grpc.NewClient(grpcAddrOf(t, out), grpc.WithTransportCredentials(insecure.NewCredentials()))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { conn.Close() })
				g := &grpcShop{conn: conn, files: reflectServer(t, conn)}
				mark := env.starts.mark()
				// The call is answered at its deadline; the bound, 20 s past
				// it, is for one that is not. It cancels the call's context
				// rather than give it a deadline: that would go to the
				// server as grpc-timeout, and its passing would end the
				// call in the very DeadlineExceeded checked for.
				cctx, ccancel := context.WithCancel(t.Context())
				bound := time.AfterFunc(d+20*time.Second, ccancel)
				_, st := g.call(cctx, t, "shop.v1.Tests", "Flaky", `{"mode":"stall"}`)
				expired := !bound.Stop()
				ccancel()
				if expired {
					t.Fatalf("a stalled call under TimeoutSeconds %g: no answer within 20 s of the deadline (%v)", d.Seconds(), st)
				}
				if st.Code() != codes.DeadlineExceeded {
					t.Fatalf("a stalled call under TimeoutSeconds %g = %v, want DeadlineExceeded", d.Seconds(), st)
				}
				if env.starts.ran(t, mark) {
					break
				}
				if try == 3 {
					t.Fatalf("the stalled call's handler did not start before its deadline in 3 tries (the last %v)", d)
				}
				t.Logf("the stalled call's handler did not start before its %v deadline: once more on a fresh shop, with ten times it", d)
				// Nothing runs: this shop stops at once.
				cancel()
				if err := waitServe(done); err != nil {
					t.Fatalf("serve() = %v with nothing running, want nil", err)
				}
			}
			signalled := time.Now()
			cancel()
			if tt.release {
				env.releaseStalled()
			}
			err := waitServe(done)
			took := time.Since(signalled)
			late := logs.Find(pipelinetest.Message("kernel: late result discarded"))
			if tt.release {
				if err != nil || len(late) != 1 {
					t.Errorf("serve() = %v with %d late-result records, want nil after the straggler returned and logged its result", err, len(late))
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "still running") {
				t.Errorf("serve() = %v, want the invocations still running", err)
			}
			if took < tt.grace || took > tt.grace+2*time.Second {
				t.Errorf("serve returned %v after the signal, want at the end of the grace period %v", took, tt.grace)
			}
		})
	}
}

// TestShopWatchOrdersOverGRPC: orders.watch is a server stream of the
// shop's gRPC service, as reflection describes it: a client that learns
// the method through reflection, as grpcurl does, gets an event for each
// order created, from the one after its sequence number on.
func TestShopWatchOrdersOverGRPC(t *testing.T) {
	g := startShopGRPC(t, shopcmd.ServeOptions{})
	for _, name := range []string{"lamp", "desk"} {
		if out, st := g.call(t.Context(), t, "shop.v1.Orders", "Create", `{"name":"`+name+`","amount":1}`); st != nil {
			t.Fatalf("Create = %s %v", out, st)
		}
	}
	md := g.files.method(t, "shop.v1.Orders", "Watch")
	if !md.IsStreamingServer() || md.IsStreamingClient() {
		t.Fatalf("shop.v1.Orders/Watch: streaming (client %v, server %v), want a server stream", md.IsStreamingClient(), md.IsStreamingServer())
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cs, err := g.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/shop.v1.Orders/Watch")
	if err != nil {
		t.Fatal(err)
	}
	req := dynamicpb.NewMessage(md.Input())
	req.Set(md.Input().Fields().ByName("after"), protoreflect.ValueOfInt64(1))
	if err := cs.SendMsg(req); err != nil {
		t.Fatal(err)
	}
	_ = cs.CloseSend()
	ev := dynamicpb.NewMessage(md.Output())
	if err := cs.RecvMsg(ev); err != nil {
		t.Fatal(err)
	}
	seq := ev.Get(md.Output().Fields().ByName("seq")).Int()
	order := ev.Get(md.Output().Fields().ByName("order")).Message()
	if name := order.Get(order.Descriptor().Fields().ByName("name")).String(); seq != 2 || name != "desk" {
		t.Errorf("the first event after 1: seq %d, order %q; want seq 2, desk", seq, name)
	}
}
