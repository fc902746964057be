package systemtest

import (
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/sundial-go/sundial/samples/shop/internal/shopcmd"
)

// runMainEnv makes the test binary behave as the shop binary: tests that
// need a real process (signals, exit codes) re-run os.Args[0] with it set,
// without building anything.
const runMainEnv = "SHOP_TEST_RUN_MAIN"

// childEnv is the environment of a shop process a test starts: the
// test's own without its SUNDIAL_ and OTEL_ variables, runMainEnv set,
// extra added — and, for a binary built with -race, no second of sleep at
// exit (the race runtime's default atexit_sleep_ms is 1000), so that a
// test waiting for the process to end does not wait for nothing.
func childEnv(extra ...string) []string {
	var env []string
	gorace := "atexit_sleep_ms=0"
	for _, kv := range os.Environ() {
		switch {
		case strings.HasPrefix(kv, "SUNDIAL_"), strings.HasPrefix(kv, "OTEL_"):
		case strings.HasPrefix(kv, "GORACE="):
			gorace = strings.TrimPrefix(kv, "GORACE=") + " " + gorace
		default:
			env = append(env, kv)
		}
	}
	return append(append(env, runMainEnv+"=1", "GORACE="+gorace), extra...)
}

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		if path := os.Getenv(handlerLogEnv); path != "" {
			shopcmd.ExtraKernelOptions = append(shopcmd.ExtraKernelOptions, handlerLogOption(path))
		}
		if path := os.Getenv(handlerStartedEnv); path != "" {
			shopcmd.ExtraKernelOptions = append(shopcmd.ExtraKernelOptions, handlerStartedOption(path))
		}
		os.Exit(shopcmd.Run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	goleak.VerifyTestMain(m)
}
