package adapters_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sundial-go/sundial/adapters/cliadapter"
	"github.com/sundial-go/sundial/adapters/grpcadapter"
	"github.com/sundial-go/sundial/adapters/httpadapter"
	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience"
)

// classIn is the input of the operations of the priority tests: Hold
// makes a checkout hold its slot until released.
type classIn struct {
	Hold bool `json:"hold"`
}

// classOut reports the class the call ran at, and for a relay the class
// its downstream calls ran at over HTTP and gRPC.
type classOut struct {
	Class     string `json:"class"`
	HTTPClass string `json:"httpClass,omitempty"`
	GRPCClass string `json:"grpcClass,omitempty"`
}

type classKey struct{}

// priorityConfig: shop.class and shop.relay are critical, shop.browse
// default; shop.checkout is critical with one slot and no queue.
const priorityConfig = `{"Sundial": {"Kernel": {"Resilience": {"Operations": {
	"shop.class":    {"Priority": "critical"},
	"shop.relay":    {"Priority": "critical"},
	"shop.checkout": {"Priority": "critical", "ConcurrencyLimit": 1}}}}}}`

// priorityRig is one kernel served over HTTP and gRPC on loopback, and
// run by the CLI.
type priorityRig struct {
	k        *kernel.Kernel
	reg      *operations.Registry
	ga       *grpcadapter.Adapter
	httpURL  string
	cc       *grpc.ClientConn
	client   *http.Client
	entered  chan struct{}
	release  chan struct{}
	httpDown *http.Client // the relay's outbound client (httpadapter.Transport)
}

func newPriorityRig(t *testing.T) *priorityRig {
	t.Helper()
	r := &priorityRig{reg: operations.NewRegistry(), entered: make(chan struct{}, 1), release: make(chan struct{})}
	class := func(ctx context.Context, _ classIn) (classOut, error) {
		return classOut{Class: ctx.Value(classKey{}).(pipeline.Priority).String()}, nil
	}
	for _, d := range []operations.Descriptor{
		{ID: "shop.class", Method: "POST", Path: "/class"},
		{ID: "shop.browse", Method: "POST", Path: "/browse"},
	} {
		if err := operations.Register(r.reg, d, class); err != nil {
			t.Fatal(err)
		}
	}
	if err := operations.Register(r.reg, operations.Descriptor{ID: "shop.checkout", Method: "POST", Path: "/checkout"},
		func(ctx context.Context, in classIn) (classOut, error) {
			if in.Hold {
				r.entered <- struct{}{}
				<-r.release
			}
			return classOut{Class: ctx.Value(classKey{}).(pipeline.Priority).String()}, nil
		}); err != nil {
		t.Fatal(err)
	}
	// The relay calls shop.class downstream over HTTP and over gRPC with
	// its own context: the class travels as baggage.
	if err := operations.Register(r.reg, operations.Descriptor{ID: "shop.relay", Method: "POST", Path: "/relay"},
		func(ctx context.Context, _ classIn) (classOut, error) {
			out := classOut{Class: ctx.Value(classKey{}).(pipeline.Priority).String()}
			req, err := http.NewRequestWithContext(ctx, "POST", r.httpURL+"/class", strings.NewReader("{}"))
			if err != nil {
				return out, err
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := r.httpDown.Do(req)
			if err != nil {
				return out, err
			}
			defer resp.Body.Close()
			var down classOut
			if err := json.NewDecoder(resp.Body).Decode(&down); err != nil {
				return out, err
			}
			out.HTTPClass = down.Class
			if err := r.ga.Call(ctx, r.cc, "shop.class", classIn{}, &down); err != nil {
				return out, err
			}
			out.GRPCClass = down.Class
			return out, nil
		}); err != nil {
		t.Fatal(err)
	}
	mark := pipeline.MiddlewareFunc(func(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
		return next(context.WithValue(ctx, classKey{}, inv.Priority()), inv)
	})
	k, err := kernel.New(kernel.WithRegistry(r.reg), kernel.WithConfigJSON([]byte(priorityConfig)), kernel.UseAt(pipeline.StageHandle, mark))
	if err != nil {
		t.Fatal(err)
	}
	r.k = k

	r.httpURL = serveHTTP(t, k)
	r.client = &http.Client{Transport: &http.Transport{}}
	r.httpDown = &http.Client{Transport: httpadapter.NewTransport(&http.Transport{})}
	r.ga, r.cc = serveGRPC(t, k, grpc.WithUnaryInterceptor(grpcadapter.UnaryClientInterceptor(0)))
	t.Cleanup(func() {
		r.client.CloseIdleConnections()
		r.httpDown.CloseIdleConnections()
		k.Close()
	})
	return r
}

// answer is one call's outcome as a protocol reports it.
type answer struct {
	status     int // HTTP status, gRPC code, or CLI exit code
	code       string
	retryAfter int64
	out        classOut
}

// viaHTTP posts to the operation's path with the priority header (""
// none).
func (r *priorityRig) viaHTTP(t *testing.T, path, priority string) answer {
	t.Helper()
	req, _ := http.NewRequest("POST", r.httpURL+path, strings.NewReader("{}"))
	req.Header.Set("Content-Type", "application/json")
	if priority != "" {
		req.Header.Set(httpadapter.HeaderPriority, priority)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode}
	if resp.StatusCode != 200 {
		var p httpadapter.Problem
		if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
			t.Fatal(err)
		}
		a.code = p.Code
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			var n int64
			if err := json.Unmarshal([]byte(ra), &n); err != nil {
				t.Fatalf("Retry-After %q: %v", ra, err)
			}
			a.retryAfter = n
			if d, _ := p.Details[pipelinetest.DetailRetryAfter].(float64); int64(d) != n {
				t.Errorf("details.retryAfter = %v, Retry-After %d", p.Details[pipelinetest.DetailRetryAfter], n)
			}
		}
		return a
	}
	if err := json.NewDecoder(resp.Body).Decode(&a.out); err != nil {
		t.Fatal(err)
	}
	return a
}

// viaGRPC calls the operation with the metadata sundial-priority.
func (r *priorityRig) viaGRPC(t *testing.T, id, priority string) answer {
	t.Helper()
	ctx := context.Background()
	if priority != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "sundial-priority", priority)
	}
	var a answer
	err := r.ga.Call(ctx, r.cc, id, classIn{}, &a.out)
	st := status.Convert(err)
	a.status = int(st.Code())
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			a.code = d.GetReason()
		case *errdetails.RetryInfo:
			a.retryAfter = int64(d.GetRetryDelay().AsDuration() / time.Second)
		}
	}
	return a
}

// viaCLI runs the operation's command with --priority.
func (r *priorityRig) viaCLI(t *testing.T, id, priority string) answer {
	t.Helper()
	root := &cobra.Command{Use: "app"}
	if err := cliadapter.AddCommands(root, r.reg, func() (*kernel.Kernel, error) { return r.k, nil }, cliadapter.WithSignals()); err != nil {
		t.Fatal(err)
	}
	group, name, _ := strings.Cut(id, ".")
	args := []string{group, name}
	if priority != "" {
		args = append(args, "--priority", priority)
	}
	var stdout, stderr bytes.Buffer
	root.SetArgs(args)
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	a := answer{status: cliadapter.Execute(context.Background(), root)}
	if a.status != 0 {
		var p httpadapter.Problem
		if err := json.NewDecoder(&stderr).Decode(&p); err != nil {
			t.Fatalf("stderr %q: %v", stderr.String(), err)
		}
		a.code = p.Code
		if d, ok := p.Details[pipelinetest.DetailRetryAfter].(float64); ok {
			a.retryAfter = int64(d)
		}
		return a
	}
	if err := json.Unmarshal(stdout.Bytes(), &a.out); err != nil {
		t.Fatalf("stdout %q: %v", stdout.String(), err)
	}
	return a
}

// protocols runs f once per protocol.
func (r *priorityRig) protocols(t *testing.T, f func(t *testing.T, call func(id, priority string) answer, ok, unavailable, invalid int)) {
	t.Run("HTTP", func(t *testing.T) {
		f(t, func(id, p string) answer {
			_, name, _ := strings.Cut(id, ".")
			return r.viaHTTP(t, "/"+name, p)
		}, 200, 503, 400)
	})
	t.Run("gRPC", func(t *testing.T) {
		f(t, func(id, p string) answer { return r.viaGRPC(t, id, p) }, int(codes.OK), int(codes.Unavailable), int(codes.InvalidArgument))
	})
	t.Run("CLI", func(t *testing.T) {
		f(t, func(id, p string) answer { return r.viaCLI(t, id, p) }, 0, 6, 2)
	})
}

// TestPriorityConformance: on HTTP (Sundial-Priority), gRPC (metadata
// sundial-priority) and the CLI (--priority) the same value lowers a
// call's class and never raises it; a value naming no class is the same
// VALIDATION KERNEL_VALIDATION_009; and a call shed by a full
// concurrency limit gets the same UNAVAILABLE KERNEL_UNAVAILABLE_008 with
// a retry-after of 1 second (HTTP 503 + Retry-After and
// details.retryAfter, gRPC Unavailable + RetryInfo, CLI exit 6 and
// details.retryAfter); Status counts the three as shed.
func TestPriorityConformance(t *testing.T) {
	r := newPriorityRig(t)
	r.protocols(t, func(t *testing.T, call func(id, priority string) answer, ok, unavailable, invalid int) {
		for _, tt := range []struct{ id, priority, want string }{
			{"shop.class", "", "critical"},
			{"shop.class", "sheddable", "sheddable"},
			{"shop.class", "default", "default"},
			{"shop.browse", "critical", "default"}, // raising is refused
			{"shop.browse", "sheddable", "sheddable"},
		} {
			if a := call(tt.id, tt.priority); a.status != ok || a.out.Class != tt.want {
				t.Errorf("%s with priority %q = %+v, want %d and class %s", tt.id, tt.priority, a, ok, tt.want)
			}
		}
		if a := call("shop.class", "urgent"); a.status != invalid || a.code != "KERNEL_VALIDATION_009" {
			t.Errorf("priority \"urgent\" = %+v, want %d %s", a, invalid, "KERNEL_VALIDATION_009")
		}

		// A critical call holds checkout's one slot: a sheddable one is shed.
		held := make(chan kernel.Outcome, 1)
		go func() {
			held <- opOf(r.k, "shop.checkout").Invoke(context.Background(), kernel.Unary{Input: &classIn{Hold: true}})
		}()
		<-r.entered
		a := call("shop.checkout", "sheddable")
		r.release <- struct{}{}
		if out := <-held; out.Err != nil {
			t.Fatalf("holder = %v", out.Err)
		}
		if a.status != unavailable || a.code != resilience.CodeShed || a.retryAfter != 1 {
			t.Errorf("shed call = %+v, want %d %s with a retry-after of 1", a, unavailable, resilience.CodeShed)
		}
	})
	var got resilience.Rejections
	for _, op := range r.k.Status().Operations {
		if op.ID == "shop.checkout" {
			got = op.Rejections
		}
	}
	if got.Shed != 3 || got.Concurrency != 0 {
		t.Errorf("shop.checkout's Rejections = %+v, want Shed 3 (one per protocol), Concurrency 0", got)
	}
}

// TestPriorityCarriedDownstream: a call its caller lowered carries its
// class to the services its handler calls, through the outbound HTTP
// transport and the gRPC client interceptor (baggage sundial.priority);
// a call at its operation's class carries nothing, and the downstream
// operation keeps its own class.
func TestPriorityCarriedDownstream(t *testing.T) {
	r := newPriorityRig(t)
	for _, tt := range []struct{ priority, want string }{
		{"sheddable", "sheddable"},
		{"default", "default"},
		{"", "critical"},
	} {
		a := r.viaHTTP(t, "/relay", tt.priority)
		if a.status != 200 || a.out.HTTPClass != tt.want || a.out.GRPCClass != tt.want {
			t.Errorf("relay with priority %q = %+v; want its downstream calls at %s over HTTP and gRPC", tt.priority, a, tt.want)
		}
	}
}
