package main

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// runMainEnv makes the test binary behave as the shop binary: tests that
// need a real process (signals, exit codes) re-run os.Args[0] with it set,
// without building anything.
const runMainEnv = "SHOP_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		if path := os.Getenv(handlerLogEnv); path != "" {
			extraKernelOptions = append(extraKernelOptions, handlerLogOption(path))
		}
		main() // exits
	}
	goleak.VerifyTestMain(m)
}
