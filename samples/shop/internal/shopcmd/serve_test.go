package shopcmd

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/resilience"
)

// limitKindOptions returns kernel options under which building the
// shop's kernel calls build: orders.get names a limit of kind "probe".
func limitKindOptions(build func() (resilience.Limit, error)) []kernel.Option {
	return []kernel.Option{
		kernel.WithLimitKind("probe", func(string, json.RawMessage) (resilience.Limit, error) { return build() }),
		kernel.WithConfigJSON([]byte(`{"Sundial":{"Kernel":{"Resilience":{"Operations":{
			"orders.get":{"Limits":{"probe":{}}}}}}}}`)),
	}
}

// testTelemetry returns the shop's telemetry without OTLP, shut down
// with t.
func testTelemetry(t *testing.T) *shopTelemetry {
	t.Helper()
	tel, err := startTelemetry(context.Background(), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tel.shutdown(slog.New(slog.DiscardHandler)) })
	return tel
}

// TestStartKernelStoppedWhileBuilding ends the context while the
// shop's kernel is still being built: startKernel returns at once with
// no kernel and an error carrying the context's cause, and Serve stops
// cleanly with nothing served.
func TestStartKernelStoppedWhileBuilding(t *testing.T) {
	started := make(chan struct{}, 2)
	release := make(chan struct{})
	defer close(release)
	opts := limitKindOptions(func() (resilience.Limit, error) {
		started <- struct{}{}
		<-release
		return nil, errors.New("released")
	})
	o := ServeOptions{KernelOptions: opts}
	o.setDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-started
		cancel()
	}()
	k, err := startKernel(ctx, o, testTelemetry(t))
	if k != nil || !errors.Is(err, errStoppedStarting) || !errors.Is(err, context.Canceled) {
		t.Fatalf("startKernel, context canceled while building = %v, %v; want no kernel and %v with %v",
			k, err, errStoppedStarting, context.Canceled)
	}

	ctx, cancel = context.WithCancel(context.Background())
	go func() {
		<-started
		cancel()
	}()
	served := false
	o = ServeOptions{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", KernelOptions: opts,
		Ready: func(string) { served = true }}
	if err := Serve(ctx, o); err != nil || served {
		t.Errorf("Serve, context canceled while building = %v, served %v; want nil, nothing served", err, served)
	}
}

// TestStartKernelRaisesAPanic has building the kernel panic: the panic
// is raised again on startKernel's caller, where a direct call would
// raise it and a recover can see it.
func TestStartKernelRaisesAPanic(t *testing.T) {
	opts := limitKindOptions(func() (resilience.Limit, error) { panic("probe: building failed") })
	o := ServeOptions{KernelOptions: opts}
	o.setDefaults()
	defer func() {
		if v := recover(); v != "probe: building failed" {
			t.Errorf("startKernel recovered %v, want the build's panic", v)
		}
	}()
	k, err := startKernel(context.Background(), o, testTelemetry(t))
	t.Errorf("startKernel returned %v, %v; want the build's panic", k, err)
}
