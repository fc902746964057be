package systemtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/sundial-go/sundial/adapters/grpcadapter"
	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/samples/shop/app"
	"github.com/sundial-go/sundial/samples/shop/internal/shopcmd"
)

// The adapter benchmarks send orders.create over a real 127.0.0.1
// listener, through Sundial (the adapter, the kernel with its built-in
// middleware, the shop's handler) and through a bare server doing the same
// decoding, validation, work and encoding by hand, at 1 and 64 calls in
// flight. Each reports requests/s and the p50 and p99 latency of its
// calls; the parent logs the Sundial/bare ratios of the last pair.
//
// The client runs on the same two cores as the server, so the figures are
// those of the whole exchange, not of the server alone.

// benchShopConfig is the shop's own configuration (shop.json: every call
// bounded by MaxTimeoutSeconds 30, orders.create rate- and
// concurrency-limited) with the limits raised so that no benchmark
// reaches them, and a breaker added: the whole built-in stack runs on
// every call and never rejects.
const benchShopConfig = `{"Sundial":{"Kernel":{"Resilience":{"Operations":{"orders.create":{
	"FailureThreshold":5,"BreakSeconds":30,
	"PermitLimit":1000000000,"WindowSeconds":1,
	"ConcurrencyLimit":100000}}}}}}`

// benchConns are the numbers of calls in flight.
var benchConns = []int{1, 64}

// loadResult is what one measured run saw.
type loadResult struct {
	rps      float64
	p50, p99 time.Duration
}

// runLoad makes b.N calls with conns goroutines and reports the figures.
func runLoad(b *testing.B, conns int, call func() error) loadResult {
	b.Helper()
	lat := make([]time.Duration, b.N)
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for range conns {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) || failed.Load() != nil {
					return
				}
				t := time.Now()
				if err := call(); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
				lat[i] = time.Since(t)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if p := failed.Load(); p != nil {
		b.Fatal(*p)
	}
	slices.Sort(lat)
	r := loadResult{
		rps: float64(b.N) / elapsed.Seconds(),
		p50: lat[len(lat)/2],
		p99: lat[min(len(lat)*99/100, len(lat)-1)],
	}
	b.ReportMetric(r.rps, "req/s")
	b.ReportMetric(float64(r.p50.Microseconds()), "p50-µs")
	b.ReportMetric(float64(r.p99.Microseconds()), "p99-µs")
	return r
}

// logRatio logs the second side's figures over the first's.
func logRatio(b *testing.B, conns int, label string, first, second loadResult) {
	if first.rps == 0 || second.rps == 0 {
		return
	}
	b.Logf("conns=%d: %s throughput %.2fx, p50 %.2fx, p99 %.2fx", conns, label,
		second.rps/first.rps, float64(second.p50)/float64(first.p50), float64(second.p99)/float64(first.p99))
}

// benchPair runs, at conns calls in flight, the bare side and the Sundial
// side of a load (run returns the figures of one side) and logs their
// ratios.
func benchPair(b *testing.B, conns int, run func(b *testing.B, sundial bool) loadResult) {
	benchSides(b, conns, [2]string{"side=bare", "side=sundial"}, "Sundial/bare", run)
}

// benchSides runs, at conns calls in flight, the two sides of a
// comparison one after the other (run gets false, then true) and logs
// the second's figures over the first's under label.
func benchSides(b *testing.B, conns int, sides [2]string, label string, run func(b *testing.B, second bool) loadResult) {
	b.Run(fmt.Sprintf("conns=%d", conns), func(b *testing.B) {
		var r [2]loadResult
		for i, side := range sides {
			b.Run(side, func(b *testing.B) { r[i] = run(b, i == 1) })
		}
		logRatio(b, conns, label, r[0], r[1])
	})
}

// newBenchKernel returns the shop's kernel under benchShopConfig.
func newBenchKernel(b *testing.B) *kernel.Kernel {
	b.Helper()
	k, err := shopcmd.NewKernel("", kernel.WithConfigJSON([]byte(benchShopConfig)), kernel.WithWorkers(shopcmd.ServeWorkerIdle)) // as serve
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = k.Wait(context.Background()) })
	return k
}

// serveHTTP serves h on 127.0.0.1 until the benchmark ends and returns
// the URL of /orders.
func serveHTTP(b *testing.B, h http.Handler) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: shopcmd.DefaultReadHeaderTimeout}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	b.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return "http://" + ln.Addr().String() + "/orders"
}

// checkOrder is CreateOrder's constraints checked by hand, as a bare
// server would, for the baselines.
func checkOrder(c app.CreateOrder) error {
	switch n := utf8.RuneCountInString(c.Name); {
	case n < 1 || n > 100:
		return errors.New("name must have 1 to 100 characters")
	case c.Amount < 1 || c.Amount > 10000:
		return errors.New("amount must be 1 to 10000")
	case c.Currency != "" && c.Currency != "EUR" && c.Currency != "USD":
		return errors.New("currency must be EUR or USD")
	}
	return nil
}

// bareEcho is orders.create by hand on echo: bind, validate, work, encode.
func bareEcho(shop *app.Shop) *echo.Echo {
	e := echo.New()
	e.POST("/orders", func(c echo.Context) error {
		var in app.CreateOrder
		if err := c.Bind(&in); err != nil {
			return err
		}
		if err := checkOrder(in); err != nil {
			return c.JSON(http.StatusBadRequest, map[string]string{"error": err.Error()})
		}
		out, err := shop.CreateOrder(c.Request().Context(), in)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusCreated, out)
	})
	return e
}

// sundialEcho is orders.create through Sundial's HTTP adapter on echo.
func sundialEcho(b *testing.B) *echo.Echo {
	e := echo.New()
	if _, err := httpadapter.Mount(e, newBenchKernel(b)); err != nil {
		b.Fatal(err)
	}
	return e
}

// BenchmarkShopHTTP: orders.create over HTTP/1.1 keep-alive connections.
func BenchmarkShopHTTP(b *testing.B) {
	const body = `{"name":"widget","amount":3}`
	for _, conns := range benchConns {
		benchPair(b, conns, func(b *testing.B, sundial bool) loadResult {
			h := http.Handler(bareEcho(app.New()))
			if sundial {
				h = sundialEcho(b)
			}
			url := serveHTTP(b, h)
			tr := &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns, DisableCompression: true}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr}
			return runLoad(b, conns, func() error {
				resp, err := client.Post(url, "application/json", bytes.NewReader([]byte(body)))
				if err != nil {
					return err
				}
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err == nil && resp.StatusCode != http.StatusCreated {
					err = fmt.Errorf("POST /orders: status %d", resp.StatusCode)
				}
				return err
			})
		})
	}
}

// serveGRPC serves srv on 127.0.0.1 and returns a client connection to
// it; both end with the benchmark.
func serveGRPC(b *testing.B, srv *grpc.Server) *grpc.ClientConn {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		conn.Close()
		srv.Stop()
		<-done
	})
	return conn
}

// createMethod is orders.create as the gRPC adapter describes it.
func createMethod(b *testing.B, a *grpcadapter.Adapter) grpcadapter.Method {
	b.Helper()
	for _, m := range a.Methods() {
		if m.OperationID == "orders.create" {
			return m
		}
	}
	b.Fatal("the gRPC adapter serves no orders.create")
	return grpcadapter.Method{}
}

// bareGRPC registers orders.create by hand on srv, with the messages the
// adapter describes (the repository has no generated code, so both sides
// decode and encode with dynamicpb): decode, validate, work, encode.
func bareGRPC(srv *grpc.Server, m grpcadapter.Method, shop *app.Shop) {
	in, out := m.Input, m.Output
	field := func(md protoreflect.MessageDescriptor, name protoreflect.Name) protoreflect.FieldDescriptor {
		return md.Fields().ByName(name)
	}
	inName, inAmount := field(in, "name"), field(in, "amount")
	outID, outName, outAmount := field(out, "id"), field(out, "name"), field(out, "amount")
	service, method := splitMethod(m.FullName)
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: service,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: method,
			Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				req := dynamicpb.NewMessage(in)
				if err := dec(req); err != nil {
					return nil, err
				}
				c := app.CreateOrder{Name: req.Get(inName).String(), Amount: int(req.Get(inAmount).Int())}
				if err := checkOrder(c); err != nil {
					return nil, err
				}
				o, err := shop.CreateOrder(ctx, c)
				if err != nil {
					return nil, err
				}
				resp := dynamicpb.NewMessage(out)
				resp.Set(outID, protoreflect.ValueOfString(o.ID))
				resp.Set(outName, protoreflect.ValueOfString(o.Name))
				resp.Set(outAmount, protoreflect.ValueOf(convertInt(outAmount, o.Amount)))
				return resp, nil
			},
		}},
	}, struct{}{})
}

// convertInt returns n as the Go value of an integer field's kind.
func convertInt(fd protoreflect.FieldDescriptor, n int) any {
	switch fd.Kind() {
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return int32(n)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return uint32(n)
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return uint64(n)
	}
	return int64(n)
}

// splitMethod splits "/pkg.Service/Method".
func splitMethod(full string) (service, method string) {
	for i := len(full) - 1; i > 0; i-- {
		if full[i] == '/' {
			return full[1:i], full[i+1:]
		}
	}
	return "", full
}

// BenchmarkShopGRPC: orders.create over one HTTP/2 connection, the way a
// grpc-go client calls.
func BenchmarkShopGRPC(b *testing.B) {
	for _, conns := range benchConns {
		benchPair(b, conns, func(b *testing.B, sundial bool) loadResult {
			a := benchGRPCAdapter(b)
			m := createMethod(b, a)
			srv := grpc.NewServer()
			if sundial {
				a.Register(srv)
			} else {
				bareGRPC(srv, m, app.New())
			}
			return grpcCreateLoad(b, conns, m, serveGRPC(b, srv))
		})
	}
}

// BenchmarkGRPCRecvTimeout: orders.create through the gRPC adapter on a
// server with grpcadapter.ServerOptions, as the shop serves it, with the
// bound on the request message's arrival off (WithRecvTimeout(0)) and at
// its default (5 s): what the bound — a goroutine and a timer per call —
// costs a call that arrives at once.
func BenchmarkGRPCRecvTimeout(b *testing.B) {
	for _, conns := range benchConns {
		benchSides(b, conns, [2]string{"recv=off", "recv=default"}, "bound/no bound", func(b *testing.B, bound bool) loadResult {
			d := time.Duration(0)
			if bound {
				d = 5 * time.Second // WithRecvTimeout's default
			}
			a := benchGRPCAdapter(b, grpcadapter.WithRecvTimeout(d))
			srv := grpc.NewServer(grpcadapter.DefaultBounds().ServerOptions()...)
			a.Register(srv)
			return grpcCreateLoad(b, conns, createMethod(b, a), serveGRPC(b, srv))
		})
	}
}

// benchGRPCAdapter returns the shop's gRPC adapter on a kernel under
// benchShopConfig.
func benchGRPCAdapter(b *testing.B, opts ...grpcadapter.Option) *grpcadapter.Adapter {
	b.Helper()
	a, err := grpcadapter.New(newBenchKernel(b), append([]grpcadapter.Option{grpcadapter.WithPackage(shopcmd.GRPCPackage)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	return a
}

// grpcCreateLoad calls m (orders.create) b.N times over conn from conns
// goroutines and reports the figures.
func grpcCreateLoad(b *testing.B, conns int, m grpcadapter.Method, conn *grpc.ClientConn) loadResult {
	in, out := m.Input.Fields(), m.Output.Fields()
	req := dynamicpb.NewMessage(m.Input)
	req.Set(in.ByName("name"), protoreflect.ValueOfString("widget"))
	req.Set(in.ByName("amount"), protoreflect.ValueOf(convertInt(in.ByName("amount"), 3)))
	ctx := context.Background()
	return runLoad(b, conns, func() error {
		resp := dynamicpb.NewMessage(m.Output)
		if err := conn.Invoke(ctx, m.FullName, req, resp); err != nil {
			return err
		}
		if resp.Get(out.ByName("id")).String() == "" {
			return errors.New("orders.create: response without an id")
		}
		return nil
	})
}

// plainOrder is CreateOrder without its validate tags: the unvalidated
// twin of BenchmarkShopConstraints.
type plainOrder struct {
	Name     string `json:"name"`
	Amount   int    `json:"amount"`
	Currency string `json:"currency,omitempty"`
}

// BenchmarkShopConstraints: orders.create called in-process through the
// whole pipeline (limits raised, as benchShopConfig), with the shop's
// input (validate tags: name 1-100 characters, amount 1-10000, currency
// one of EUR USD, checked before the invocation) and with an untagged
// twin, measured seconds apart; their difference is what checking the
// constraints costs a valid call (the bound: 1 µs). "check" is
// Descriptor.CheckConstraints alone.
func BenchmarkShopConstraints(b *testing.B) {
	plain := orderKernel(b, func(reg *operations.Registry, shop *app.Shop) error {
		return operations.Register(reg, operations.Descriptor{ID: "orders.create"},
			func(ctx context.Context, in plainOrder) (app.Order, error) {
				return shop.CreateOrder(ctx, app.CreateOrder(in))
			})
	})
	tagged := orderKernel(b, func(reg *operations.Registry, shop *app.Shop) error {
		return operations.Register(reg, operations.Descriptor{ID: "orders.create"}, shop.CreateOrder)
	})
	ctx := context.Background()
	b.Run("call=unvalidated", func(b *testing.B) {
		b.ReportAllocs()
		defer reportCPU(b)()
		for b.Loop() {
			if _, err := kernel.Call[plainOrder, app.Order](ctx, plain, "orders.create", plainOrder{Name: "widget", Amount: 3, Currency: "EUR"}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("call=validated", func(b *testing.B) {
		b.ReportAllocs()
		defer reportCPU(b)()
		for b.Loop() {
			if _, err := kernel.Call[app.CreateOrder, app.Order](ctx, tagged, "orders.create", app.CreateOrder{Name: "widget", Amount: 3, Currency: "EUR"}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("check", func(b *testing.B) {
		d := descriptorOf(tagged, "orders.create")
		in := &app.CreateOrder{Name: "widget", Amount: 3, Currency: "EUR"}
		b.ReportAllocs()
		defer reportCPU(b)()
		for b.Loop() {
			if err := d.CheckConstraints(in); err != nil {
				b.Fatal(err)
			}
		}
	})
	// A charge with a receipt email and an invoice: the validator decides
	// email and pattern itself (its email regexp is most of the cost).
	b.Run("check=charge-email", func(b *testing.B) {
		d := descriptorOf(newBenchKernel(b), "billing.charge")
		in := &app.Charge{Amount: 3, ReceiptEmail: "ada@example.com", Invoice: "INV-42"}
		b.ReportAllocs()
		defer reportCPU(b)()
		for b.Loop() {
			if err := d.CheckConstraints(in); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// orderKernel returns a kernel with the shop's configuration (limits
// raised, benchShopConfig) and the one operation register adds, on a new
// shop.
func orderKernel(b *testing.B, register func(*operations.Registry, *app.Shop) error) *kernel.Kernel {
	b.Helper()
	reg := operations.NewRegistry()
	if err := register(reg, app.New()); err != nil {
		b.Fatal(err)
	}
	k, err := kernel.New(kernel.WithRegistry(reg), kernel.WithConfigJSON(app.DefaultConfig),
		kernel.WithConfigJSON([]byte(benchShopConfig)), kernel.WithWorkers(shopcmd.ServeWorkerIdle))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = k.Wait(context.Background()) })
	return k
}

// reportCPU starts counting the process's CPU time (user and system, all
// threads: the garbage collector's too); the function it returns reports
// it per operation as cpu-ns/op. On a shared machine, wall-clock ns/op
// also counts the time other processes held the cores; cpu-ns/op does
// not.
func reportCPU(b *testing.B) func() {
	start := cpuTime()
	return func() {
		if b.N > 0 {
			b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
		}
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// descriptorOf returns the descriptor of the operation id in k, or nil.
func descriptorOf(k *kernel.Kernel, id string) *operations.Descriptor {
	for _, op := range k.Operations() {
		if op.Descriptor().ID == id {
			return op.Descriptor()
		}
	}
	return nil
}
