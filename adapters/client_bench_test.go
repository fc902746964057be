package adapters_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/sundial-go/sundial/adapters/connectadapter"
	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/kernel/client"
	"github.com/sundial-go/sundial/operations"
)

// BenchmarkClientCall measures one successful call of t.greet through a
// typed client on each transport, beside what a caller writes by hand for
// the same call: kernel.Call in-process, a net/http client through the
// outbound Transport that encodes, checks the status and decodes over
// HTTP, Adapter.Call over gRPC, and a net/http client posting the JSON
// message over Connect. Every server runs on 127.0.0.1 in the same
// process.
func BenchmarkClientCall(b *testing.B) {
	for _, name := range transportNames {
		g := newGreeterB(b)
		k, err := kernel.New(kernel.WithRegistry(g.reg))
		if err != nil {
			b.Fatal(err)
		}
		var (
			tr   client.Transport
			hand func(ctx context.Context, in greet) (greeting, error)
		)
		switch name {
		case "in-process":
			tr = client.Local(k)
			hand = func(ctx context.Context, in greet) (greeting, error) {
				return kernel.Call[greet, greeting](ctx, k, "t.greet", in)
			}
		case "http":
			url := serveHTTP(b, k)
			rt := &http.Transport{MaxIdleConnsPerHost: 8}
			b.Cleanup(rt.CloseIdleConnections)
			tr = httpadapter.ClientTransport(g.reg, url, rt)
			hc := &http.Client{Transport: httpadapter.NewTransport(rt)}
			hand = func(ctx context.Context, in greet) (greeting, error) {
				var out greeting
				body, err := json.Marshal(in)
				if err != nil {
					return out, err
				}
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/greet", bytes.NewReader(body))
				if err != nil {
					return out, err
				}
				req.Header.Set("Content-Type", "application/json")
				resp, err := hc.Do(req)
				if err != nil {
					return out, err
				}
				if err := httpadapter.FromResponse(resp); err != nil {
					return out, err
				}
				defer resp.Body.Close()
				return out, json.NewDecoder(resp.Body).Decode(&out)
			}
		case "grpc":
			ga, cc := serveGRPC(b, k)
			tr = ga.ClientTransport(cc)
			hand = func(ctx context.Context, in greet) (greeting, error) {
				var out greeting
				return out, ga.Call(ctx, cc, "t.greet", in, &out)
			}
		case "connect":
			url := serveConnect(b, k)
			rt := &http.Transport{MaxIdleConnsPerHost: 8}
			b.Cleanup(rt.CloseIdleConnections)
			hc := &http.Client{Transport: rt}
			tr = connectadapter.ClientTransport(g.reg, url, hc, connectadapter.WithPackage("shop.v1"))
			hand = func(ctx context.Context, in greet) (greeting, error) {
				return postConnectJSON(ctx, hc, url+"/shop.v1.T/Greet", in)
			}
		}
		typed, err := client.New[greet, greeting](tr, "t.greet")
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range []struct {
			name string
			call func(ctx context.Context, in greet) (greeting, error)
		}{{"typed", typed.Call}, {"by-hand", hand}} {
			b.Run(name+"/"+c.name, func(b *testing.B) {
				ctx := context.Background()
				in := greet{Name: "ann", Qty: 2}
				b.ReportAllocs()
				for b.Loop() {
					if out, err := c.call(ctx, in); err != nil || out.Text != "hello ann" {
						b.Fatalf("got %+v, %v", out, err)
					}
				}
			})
		}
	}
}

// postConnectJSON makes a unary Connect call of the JSON message in, by
// hand: it sets the deadline header, checks the status and decodes. The
// protobuf JSON mapping writes a 64-bit integer as a string.
func postConnectJSON(ctx context.Context, hc *http.Client, url string, in greet) (greeting, error) {
	var out struct {
		Text string `json:"text"`
		Qty  int    `json:"qty,string"`
	}
	body, err := json.Marshal(in)
	if err != nil {
		return greeting{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return greeting{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if dl, ok := ctx.Deadline(); ok {
		req.Header.Set("Connect-Timeout-Ms", strconv.FormatInt(time.Until(dl).Milliseconds(), 10))
	}
	resp, err := hc.Do(req)
	if err != nil {
		return greeting{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return greeting{}, fmt.Errorf("connect call: %s", resp.Status)
	}
	err = json.NewDecoder(resp.Body).Decode(&out)
	return greeting{Text: out.Text, Qty: out.Qty}, err
}

// newGreeterB registers t.greet for a benchmark: it records nothing.
func newGreeterB(b *testing.B) *greeter {
	g := &greeter{reg: operations.NewRegistry()}
	if err := operations.Register(g.reg, operations.Descriptor{ID: "t.greet", Method: "POST", Path: "/greet"},
		func(_ context.Context, in greet) (greeting, error) {
			return greeting{Text: "hello " + in.Name, Qty: in.Qty}, nil
		}); err != nil {
		b.Fatal(err)
	}
	return g
}
