package systemtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/sundial-go/sundial/adapters/grpcadapter/prototest"
	"github.com/sundial-go/sundial/samples/shop/internal/shopcmd"
)

// connectWebDir holds connect-web and its dependencies, which .ci/deps
// installs from the npm registry (npm ci, at package-lock.json's versions).
const connectWebDir = "testdata/connectweb"

// connectWebPage calls the shop with connect-web's own client: the schema
// is the shop's, read from its gRPC reflection as a descriptor set. The
// module defines callShop(base, service, method, message, headers, web),
// which resolves to the answer or to the error's code, message and
// details, and sets window.ready.
const connectWebPage = `<!doctype html><html><head><title>connect-web</title>
<script type="importmap">%s</script>
<script type="module">
import { createConnectTransport, createGrpcWebTransport } from "@connectrpc/connect-web";
import { createClient, ConnectError, Code } from "@connectrpc/connect";
import { createFileRegistry, fromBinary } from "@bufbuild/protobuf";
import { FileDescriptorSetSchema } from "@bufbuild/protobuf/wkt";
const schema = await (await fetch("/schema.binpb")).arrayBuffer();
const registry = createFileRegistry(fromBinary(FileDescriptorSetSchema, new Uint8Array(schema)));
window.callShop = async (base, service, method, message, headers, web) => {
	const transport = (web ? createGrpcWebTransport : createConnectTransport)({baseUrl: base});
	const client = createClient(registry.getService(service), transport);
	try {
		const res = await client[method](message, {headers});
		return {ok: true, id: res.id, name: res.name};
	} catch (e) {
		const err = ConnectError.from(e);
		return {ok: false, code: Code[err.code], message: err.rawMessage,
			details: err.details.map((d) => ({type: d.type ?? d.desc?.typeName, debug: d.debug}))};
	}
};
window.ready = true;
</script></head><body>connect-web</body></html>`

// TestConnectWebFromChromium opens a page of another origin in a real
// headless Chromium. It calls the shop with @connectrpc/connect-web over
// the Connect protocol and gRPC-Web: it creates an order, then calls
// reports.export with a 300 ms deadline and gets deadline_exceeded, with
// KERNEL_TIMEOUT_001 in the Connect error's ErrorInfo.
func TestConnectWebFromChromium(t *testing.T) {
	t.Parallel()
	bin := chromium(t)
	modules := filepath.Join(connectWebDir, "node_modules")
	if _, err := os.Stat(modules); err != nil {
		msg := "connect-web not installed; run `make deps` (or: npm ci --prefix " + connectWebDir + ")"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	pageURL, origin, setSchema := serveConnectWeb(t, modules)
	g := startShopGRPC(t, shopcmd.ServeOptions{ConnectOrigins: []string{origin}})
	set := &descriptorpb.FileDescriptorSet{}
	for _, fd := range prototest.Export(t, g.conn) {
		set.File = append(set.File, protodesc.ToFileDescriptorProto(fd))
	}
	schema, err := proto.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	setSchema(schema)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b := startBrowser(ctx, t, bin)
	if err := b.navigate(pageURL); err != nil {
		t.Fatalf("open the page: %v", err)
	}
	var ready bool
	if err := b.evaluate(`new Promise((r) => { const tick = () => window.ready ? r(true) : setTimeout(tick, 20); tick(); })`, &ready); err != nil || !ready {
		t.Fatalf("the page's module did not load: %v", err)
	}
	type result struct {
		OK            bool
		ID, Name      string
		Code, Message string
		Details       []struct {
			Type  string
			Debug struct{ Reason string }
		}
	}
	call := func(service, method, message string, headers map[string]string, web bool) result {
		t.Helper()
		h, _ := json.Marshal(headers)
		expr := fmt.Sprintf(`callShop(%q, %q, %q, %s, %s, %t)`, g.url, service, method, message, h, web)
		var r result
		if err := b.evaluate(expr, &r); err != nil {
			t.Fatalf("evaluate %s/%s: %v", service, method, err)
		}
		return r
	}
	for _, web := range []bool{false, true} {
		r := call("shop.v1.Orders", "create", `{"name":"lamp","amount":3}`, nil, web)
		if !r.OK || !strings.HasPrefix(r.ID, "ord-") || r.Name != "lamp" {
			t.Fatalf("create (gRPC-Web %t): %+v", web, r)
		}
		// The deadline goes as the protocol's header, which connect-web's
		// timeoutMs would send too; without timeoutMs the client waits
		// for the server's answer rather than race it with a timer.
		timeout := map[string]string{"Connect-Timeout-Ms": "300"}
		if web {
			timeout = map[string]string{"Grpc-Timeout": "300m"}
		}
		start := time.Now()
		r = call("shop.v1.Reports", "export", `{"delayMs":5000}`, timeout, web)
		if r.OK || r.Code != "DeadlineExceeded" {
			t.Fatalf("export with a 300 ms deadline (gRPC-Web %t): %+v, want DeadlineExceeded", web, r)
		}
		if !web && (len(r.Details) == 0 || r.Details[0].Debug.Reason != "KERNEL_TIMEOUT_001") {
			t.Errorf("the deadline's details: %+v, want ErrorInfo KERNEL_TIMEOUT_001", r.Details)
		}
		if web && (len(r.Details) == 0 || r.Details[0].Type != "google.rpc.ErrorInfo") {
			t.Errorf("the deadline's details over gRPC-Web: %+v, want an ErrorInfo", r.Details)
		}
		if took := time.Since(start); took > 4*time.Second {
			t.Errorf("the deadline's answer took %v", took)
		}
	}
}

// serveConnectWeb serves connectWebPage, with an import map of the
// packages' exports, the modules under /node_modules/ and the schema set
// later with the function it returns, on a 127.0.0.1 port of its own.
func serveConnectWeb(t *testing.T, modules string) (pageURL, origin string, setSchema func([]byte)) {
	t.Helper()
	imports := map[string]string{}
	for _, pkg := range []string{"@connectrpc/connect-web", "@connectrpc/connect", "@bufbuild/protobuf"} {
		b, err := os.ReadFile(filepath.Join(modules, pkg, "package.json"))
		if err != nil {
			t.Fatal(err)
		}
		var meta struct {
			Exports map[string]json.RawMessage `json:"exports"`
		}
		if err := json.Unmarshal(b, &meta); err != nil {
			t.Fatal(err)
		}
		for sub, v := range meta.Exports {
			var cond struct{ Import string }
			if json.Unmarshal(v, &cond) != nil || cond.Import == "" || strings.Contains(sub, "*") {
				continue
			}
			imports[strings.TrimSuffix(pkg+strings.TrimPrefix(sub, "."), "/")] =
				"/node_modules/" + pkg + "/" + strings.TrimPrefix(cond.Import, "./")
		}
	}
	importMap, err := json.Marshal(map[string]any{"imports": imports})
	if err != nil {
		t.Fatal(err)
	}
	schema := make(chan []byte, 1)
	var got []byte
	mux := http.NewServeMux()
	mux.Handle("/node_modules/", http.StripPrefix("/node_modules/", http.FileServer(http.Dir(modules))))
	mux.HandleFunc("/schema.binpb", func(w http.ResponseWriter, _ *http.Request) {
		if got == nil {
			got = <-schema
		}
		_, _ = w.Write(got)
	})
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, connectWebPage, importMap)
	})
	origin = serveOrigin(t, mux)
	return origin + "/", origin, func(b []byte) { schema <- b }
}
