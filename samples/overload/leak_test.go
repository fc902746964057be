package main

import (
	"testing"

	"go.uber.org/goleak"
)

// The peers start goroutines of their own at init (kratos' and go-zero's
// CPU samplers, go-zero's signal handler), which live as long as the
// process: they are running before TestMain, and ignored.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }
