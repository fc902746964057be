package pipelinetest

import (
	"testing"
	"time"
)

// startWait bounds how long HandlerStarted waits for either answer.
const startWait = 10 * time.Second

// HandlerStarted tells whether the handler of a call already answered
// started. The kernel does not start a handler whose deadline has passed.
// On a loaded machine a short deadline can pass first. A test that needs
// the handler to have run asks this, and calls again with a longer
// deadline when it did not.
//
// The handler sends on started when it starts; HandlerStarted returns
// the value. The handler must then stall until the test releases it.
// running is the kernel's count of running invocations
// (kernel.Kernel.Running). A stalled handler keeps it above 0. So running
// at 0 with nothing on started means the handler never ran.
// HandlerStarted polls both every millisecond. It fails t after 10 s of
// neither.
func HandlerStarted[T any](t testing.TB, started <-chan T, running func() int) (v T, ok bool) {
	t.Helper()
	for end := time.Now().Add(startWait); time.Now().Before(end); time.Sleep(time.Millisecond) {
		select {
		case v := <-started:
			return v, true
		default:
		}
		if running() == 0 {
			return v, false
		}
	}
	t.Fatalf("the call's chain neither started its handler nor returned in %v", startWait)
	return v, false
}
