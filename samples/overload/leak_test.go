package main

import (
	"testing"

	"go.uber.org/goleak"
)

// The peers start goroutines of their own when imported (their CPU
// samplers, go-zero's signal handler); they are not this package's.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/go-kratos/aegis/ratelimit/bbr.cpuproc"),
		goleak.IgnoreAnyFunction("github.com/go-kratos/aegis/internal/cpu.init.0.func1"),
		goleak.IgnoreAnyFunction("github.com/zeromicro/go-zero/core/stat.init.1.func1"),
		goleak.IgnoreAnyFunction("github.com/zeromicro/go-zero/core/proc.init.1.func1"))
}
