package systemtest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/pipeline"
)

// handlerStarts watches the calls of one operation of a shop in this
// process: the chains that entered the pipeline and returned (at
// StageDiagnostics, outside the kernel's deadline check) and the
// handlers that started (at StageHandle, past it). On a loaded machine a
// call's deadline can pass before the kernel starts its handler; the
// kernel then answers TIMEOUT without running it. ran tells that from a
// handler that runs.
type handlerStarts struct {
	op                         string
	entered, returned, started atomic.Int64
}

func newHandlerStarts(op string) *handlerStarts { return &handlerStarts{op: op} }

// options returns the kernel options that install the counters.
func (s *handlerStarts) options() []kernel.Option {
	return []kernel.Option{
		kernel.UseAt(pipeline.StageDiagnostics, pipeline.MiddlewareFunc(s.chain)),
		kernel.UseAt(pipeline.StageHandle, pipeline.MiddlewareFunc(s.handle)),
	}
}

func (s *handlerStarts) chain(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
	if inv.OperationID() != s.op {
		return next(ctx, inv)
	}
	s.entered.Add(1)
	defer s.returned.Add(1)
	return next(ctx, inv)
}

func (s *handlerStarts) handle(ctx context.Context, inv *pipeline.Invocation, next pipeline.Handler) (any, error) {
	if inv.OperationID() == s.op {
		s.started.Add(1)
	}
	return next(ctx, inv)
}

// mark returns the number of handlers started so far, for ran.
func (s *handlerStarts) mark() int64 { return s.started.Load() }

// ran reports whether the handler of the call just answered started,
// mark being what mark returned before the call. The answer can leave at
// the deadline before the call's chain reached the kernel's deadline
// check: a chain that passed it before the deadline reaches the handler,
// one that had not returns without it. Until one of the two, ran waits
// (10 s at most).
func (s *handlerStarts) ran(t *testing.T, mark int64) bool {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if s.started.Load() > mark {
			return true
		}
		if s.entered.Load() == s.returned.Load() {
			return s.started.Load() > mark
		}
	}
	t.Fatalf("%s: the call's handler neither started nor did its chain return in 10 s", s.op)
	return false
}
