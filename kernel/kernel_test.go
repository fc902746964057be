package kernel_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

type echoIn struct {
	Text string `json:"text"`
}

func (e *echoIn) Validate() error {
	if e.Text == "invalid" {
		return errors.New("text must not be 'invalid'")
	}
	return nil
}

type echoOut struct {
	Text string `json:"text"`
}

func newRegistry(t *testing.T, fn func(context.Context, echoIn) (echoOut, error)) *operations.Registry {
	t.Helper()
	reg := operations.NewRegistry()
	if fn == nil {
		fn = func(_ context.Context, in echoIn) (echoOut, error) { return echoOut(in), nil }
	}
	if err := operations.Register(reg, operations.Descriptor{ID: "test.echo"}, fn); err != nil {
		t.Fatal(err)
	}
	return reg
}

func recorder(trace *[]string, name string) pipeline.Middleware {
	return pipeline.MiddlewareFunc(func(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
		*trace = append(*trace, name)
		return next(ctx, inv)
	})
}

func TestStageOrder(t *testing.T) {
	var trace []string
	opts := []kernel.Option{kernel.WithRegistry(newRegistry(t, func(_ context.Context, in echoIn) (echoOut, error) {
		trace = append(trace, "handler")
		return echoOut(in), nil
	}))}
	// Register application middleware in reverse stage order, two per
	// stage: the kernel must still sort by stage and keep registration
	// order within a stage.
	stages := pipelinetest.Stages()
	for i := len(stages) - 1; i >= 0; i-- {
		s := stages[i]
		opts = append(opts,
			kernel.UseAt(s, recorder(&trace, s.String()+"/app1")),
			kernel.UseAt(s, recorder(&trace, s.String()+"/app2")))
	}
	k, err := kernel.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	for call := range 3 {
		trace = trace[:0]
		if _, err := kernel.Call[echoIn, echoOut](context.Background(), k, "test.echo", echoIn{Text: "hi"}); err != nil {
			t.Fatalf("call %d: %v", call, err)
		}
		var want []string
		for _, s := range stages {
			want = append(want, s.String()+"/app1", s.String()+"/app2")
		}
		want = append(want, "handler")
		if got := strings.Join(trace, " "); got != strings.Join(want, " ") {
			t.Errorf("call %d order:\n got %s\nwant %s", call, got, strings.Join(want, " "))
		}
	}
}

func TestInvokeAllocations(t *testing.T) {
	k, err := kernel.New(kernel.WithRegistry(newRegistry(t, nil)),
		kernel.UseAt(pipeline.StageAuthentication, recorder(new([]string), "x")),
		kernel.WithConfigJSON([]byte(`{"Sundial":{"Kernel":{"UseBuiltInMiddleware":false}}}`)))
	if err != nil {
		t.Fatal(err)
	}
	in := &echoIn{Text: "hi"}
	ctx := context.Background()
	req, op := kernel.Unary{Input: in}, k.Op("test.echo")
	// The invocation and the boxing of the handler's result are the only
	// allocations: the compiled chain itself allocates nothing per call.
	if n := testing.AllocsPerRun(200, func() { _ = op.Invoke(ctx, req) }); n > 2 {
		t.Errorf("AllocsPerRun(Op.Invoke) = %v, want at most 2 (the invocation, the boxed output)", n)
	}
}

func TestPanicBecomesUnexpected(t *testing.T) {
	var logs bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	boom := pipeline.MiddlewareFunc(func(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
		if inv.Input().(*echoIn).Text == "mw" {
			panic("middleware secret")
		}
		return next(ctx, inv)
	})
	k, err := kernel.New(kernel.WithLogger(logger), kernel.UseAt(pipeline.StageTenant, boom),
		kernel.WithRegistry(newRegistry(t, func(_ context.Context, in echoIn) (echoOut, error) {
			panic("handler secret: " + in.Text)
		})))
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{"handler", "mw"} {
		_, err := kernel.Call[echoIn, echoOut](context.Background(), k, "test.echo", echoIn{Text: text})
		e := pipeline.AsError(err)
		if e == nil || e.Kind() != pipeline.KindUnexpected || e.Code() != pipeline.CodeUnexpected {
			t.Fatalf("panic in %s: outcome = %v, want UNEXPECTED", text, err)
		}
		if strings.Contains(e.Message(), "secret") {
			t.Errorf("panic in %s leaked its text: %q", text, e.Message())
		}
	}
	if !strings.Contains(logs.String(), "handler secret: handler") || !strings.Contains(logs.String(), "middleware secret") {
		t.Errorf("panics not logged: %s", logs.String())
	}
}

func TestValidationBuiltIn(t *testing.T) {
	called := false
	k, err := kernel.New(kernel.WithRegistry(newRegistry(t, func(_ context.Context, in echoIn) (echoOut, error) {
		called = true
		return echoOut(in), nil
	})))
	if err != nil {
		t.Fatal(err)
	}
	_, err = kernel.Call[echoIn, echoOut](context.Background(), k, "test.echo", echoIn{Text: "invalid"})
	if e := pipeline.AsError(err); e == nil || e.Kind() != pipeline.KindValidation || e.Message() != "text must not be 'invalid'" {
		t.Errorf("Call(invalid) = %v, want VALIDATION with the validator's message", err)
	}
	if called {
		t.Error("handler ran although validation failed")
	}
}

func TestUnknownOperationAndHost(t *testing.T) {
	var trace []string
	k, err := kernel.New(kernel.UseAt(pipeline.StageAuthentication, recorder(&trace, "auth")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kernel.Call[echoIn, echoOut](context.Background(), k, "no.such", echoIn{}); pipelinetest.KindOf(err) != pipeline.KindNotFound {
		t.Errorf("Call(unknown) = %v, want NOT_FOUND", err)
	}
	o := k.Host(context.Background(), kernel.HostCall{Caller: kernel.Caller{Route: "GET /healthz"}, Handler: func(context.Context, *pipeline.Invocation) (any, error) {
		return "ok", nil
	}})
	if o.Err != nil || o.Output != "ok" || strings.Join(trace, ",") != "auth" || o.Invocation.Name() != "GET /healthz" {
		t.Errorf("Invoke(host) = %v, output %v, trace %v; want the host pipeline with app middleware", o.Err, o.Output, trace)
	}
}

func TestHostInvocationHasDeadline(t *testing.T) {
	k, err := kernel.New(kernel.WithConfigJSON([]byte(`{"Sundial":{"Kernel":{"MaxTimeoutSeconds":0.05}}}`)))
	if err != nil {
		t.Fatal(err)
	}
	o := k.Host(context.Background(), kernel.HostCall{Caller: kernel.Caller{Route: "GET /slow"}, Handler: func(ctx context.Context, _ *pipeline.Invocation) (any, error) {
		<-ctx.Done() // released by MaxTimeoutSeconds
		return nil, ctx.Err()
	}})
	if pipelinetest.CodeOf(o.Err) != pipeline.CodeTimeout || o.Invocation.Timing().Source != pipeline.DeadlineKernel {
		t.Errorf("host call past MaxTimeoutSeconds = %v (deadline source %v), want %s (kernel)", o.Err, o.Invocation.Timing().Source, pipeline.CodeTimeout)
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name, json, want string
	}{
		{"unknown kernel key", `{"Sundial":{"Kernel":{"MaxTimeoutSecs":1}}}`, "Sundial.Kernel.MaxTimeoutSecs: unknown key"},
		{"max timeout type", `{"Sundial":{"Kernel":{"MaxTimeoutSeconds":"10"}}}`, "Sundial.Kernel.MaxTimeoutSeconds: want a number"},
		{"max timeout zero", `{"Sundial":{"Kernel":{"MaxTimeoutSeconds":0}}}`, "Sundial.Kernel.MaxTimeoutSeconds: must be greater than 0"},
		{"builtin type", `{"Sundial":{"Kernel":{"UseBuiltInMiddleware":"no"}}}`, "Sundial.Kernel.UseBuiltInMiddleware: want a boolean"},
		{"kernel not object", `{"Sundial":{"Kernel":[]}}`, "Sundial.Kernel: want an object"},
		{"bad json", `{"Sundial":`, "kernel: config"},
		{"not an object", `[1,2]`, "kernel: config: the document must be a JSON object"},
		{"sundial scalar", `{"Sundial":7}`, "kernel: config: Sundial: want an object"},
		{"delimiter in key", `{"Sundial::Kernel":{"MaxTimeoutSeconds":1}}`, `kernel: config: Sundial::Kernel: keys must not contain "::"`},
		{"resilience key", `{"Sundial":{"Kernel":{"Resilience":{"PermitLimt":1}}}}`, "Sundial.Kernel.Resilience.PermitLimt"},
		{"operation id", `{"Sundial":{"Kernel":{"Resilience":{"Operations":{"Orders.Create":{"PermitLimit":1}}}}}}`, "Sundial.Kernel.Resilience.Operations.Orders.Create"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := kernel.New(kernel.WithConfigJSON([]byte(tt.json)))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New(%s) = %v, want an error containing %q", tt.json, err, tt.want)
			}
		})
	}
	if _, err := kernel.New(kernel.WithConfigFile(filepath.Join(t.TempDir(), "missing.json"))); err == nil {
		t.Error("New(missing config file) = nil error")
	}
	if _, err := kernel.New(kernel.UseAt(pipeline.Stage(99), recorder(nil, "x"))); err == nil {
		t.Error("UseAt(invalid stage) accepted")
	}
}

func TestBuiltInOffSkipsResilienceSection(t *testing.T) {
	// With the built-ins off the Resilience section is not read at all, so
	// even a broken one does not fail New.
	k, err := kernel.New(kernel.WithConfigJSON([]byte(`{"Sundial":{"Kernel":{"UseBuiltInMiddleware":false,"Resilience":{"PermitLimit":-1}}}}`)))
	if err != nil {
		t.Fatalf("New = %v, want nil", err)
	}
	if k.Settings().UseBuiltInMiddleware || k.PolicyFor("orders.create").Limited() {
		t.Error("built-ins off but a policy is in force")
	}
}

func TestConfigLayersAndEnv(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "shop.json")
	if err := os.WriteFile(file, []byte(`{"Sundial":{"Kernel":{"Resilience":{"Operations":{"orders.create":{"PermitLimit":7}}}}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{
		"SUNDIAL_KERNEL__MAXTIMEOUTSECONDS=12.5",
		"SUNDIAL_KERNEL__RESILIENCE__OPERATIONS__ORDERS_CREATE__CONCURRENCYLIMIT=3",
		"OTHER=1",
	}
	k, err := kernel.New(
		kernel.WithConfigJSON([]byte(`{"Sundial":{"Kernel":{"Resilience":{"PermitLimit":1000,"Operations":{"orders.create":{"PermitLimit":2,"WindowSeconds":60}}}}}}`)),
		kernel.WithConfigFile(file),
		kernel.WithEnv("SUNDIAL_"),
		kernel.WithEnviron(func() []string { return env }),
	)
	if err != nil {
		t.Fatal(err)
	}
	if got := k.Settings().MaxTimeout; got != 12500*time.Millisecond {
		t.Errorf("MaxTimeout = %v, want 12.5s from the environment", got)
	}
	p := k.PolicyFor("orders.create")
	if p.PermitLimit != 7 || p.Window != time.Minute || p.ConcurrencyLimit != 3 {
		t.Errorf("PolicyFor(orders.create) = %+v, want PermitLimit 7 (file), Window 60s (JSON), ConcurrencyLimit 3 (env)", p)
	}
	if p := k.PolicyFor("orders.get"); p.PermitLimit != 1000 || p.Window != time.Second {
		t.Errorf("PolicyFor(orders.get) = %+v, want the section defaults", p)
	}
	env = []string{"SUNDIAL_KERNEL__MAXTIMEOUTSECONDS=soon"}
	if _, err := kernel.New(kernel.WithEnv("SUNDIAL_"), kernel.WithEnviron(func() []string { return env })); err == nil ||
		!strings.Contains(err.Error(), "Sundial.Kernel.MaxTimeoutSeconds") {
		t.Errorf("New(env MaxTimeoutSeconds=soon) = %v, want an error naming the key", err)
	}
}

func TestUnregisteredOperationPolicyIsLogged(t *testing.T) {
	var logs bytes.Buffer
	_, err := kernel.New(kernel.WithRegistry(newRegistry(t, nil)), kernel.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))),
		kernel.WithConfigJSON([]byte(`{"Sundial":{"Kernel":{"Resilience":{"Operations":{"test.echo":{"PermitLimit":5},"test.ecoh":{"PermitLimit":5}}}}}}`)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "Sundial.Kernel.Resilience.Operations.test.ecoh: no operation") || strings.Contains(logs.String(), "Operations.test.echo:") {
		t.Errorf("log = %q, want a warning for test.ecoh only", logs.String())
	}
}
