package kernel_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/sundial-go/sundial/resilience/cluster/redistest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(redistest.StopSharedAfter(m))
}
