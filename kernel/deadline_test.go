package kernel_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
)

// deadlineKernel builds a kernel with two operations that report the
// deadline their handler's context carries (or wait for it to end, when
// the input is "block"): test.capped has TimeoutSeconds 2, test.free has
// none.
func deadlineKernel(t *testing.T, config string) *kernel.Kernel {
	t.Helper()
	reg := operations.NewRegistry()
	fn := func(ctx context.Context, in string) (time.Time, error) {
		if in == "block" {
			<-ctx.Done()
			return time.Time{}, ctx.Err()
		}
		d, _ := ctx.Deadline()
		return d, nil
	}
	for _, id := range []string{"test.capped", "test.free"} {
		if err := operations.Register(reg, operations.Descriptor{ID: id}, fn); err != nil {
			t.Fatal(err)
		}
	}
	k, err := kernel.New(kernel.WithRegistry(reg), kernel.WithConfigJSON([]byte(config)))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

const deadlineConfig = `{"Sundial":{"Kernel":{"MaxTimeoutSeconds":10,
	"Resilience":{"Operations":{"test.capped":{"TimeoutSeconds":2}}}}}}`

// TestOperationAndKernelTimeoutsCapDeadlines: the per-operation
// TimeoutSeconds is the default deadline and caps what the caller sends;
// MaxTimeoutSeconds caps every deadline, however far in the future; the
// earliest of all wins, the parent context's included.
func TestOperationAndKernelTimeoutsCapDeadlines(t *testing.T) {
	far := time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		config string
		op     string
		caller time.Duration // 0: none; -1: far future
		parent time.Duration // 0: none
		want   time.Duration
	}{
		{"operation default, caller sends none", deadlineConfig, "test.capped", 0, 0, 2 * time.Second},
		{"earlier caller kept", deadlineConfig, "test.capped", time.Second, 0, time.Second},
		{"operation caps a later caller", deadlineConfig, "test.capped", 5 * time.Second, 0, 2 * time.Second},
		{"operation caps a far-future caller", deadlineConfig, "test.capped", -1, 0, 2 * time.Second},
		{"kernel cap without operation timeout", deadlineConfig, "test.free", 0, 0, 10 * time.Second},
		{"kernel cap bounds a far-future caller", deadlineConfig, "test.free", -1, 0, 10 * time.Second},
		{"caller under the kernel cap", deadlineConfig, "test.free", 3 * time.Second, 0, 3 * time.Second},
		{"parent context deadline earlier", deadlineConfig, "test.capped", 5 * time.Second, 500 * time.Millisecond, 500 * time.Millisecond},
		{"default kernel cap", `{}`, "test.free", -1, 0, kernel.DefaultMaxTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				k := deadlineKernel(t, tc.config)
				start := time.Now()
				ctx := t.Context()
				if tc.parent > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tc.parent)
					defer cancel()
				}
				in := "report"
				req := kernel.Unary{Input: &in}
				switch {
				case tc.caller < 0:
					req.Deadline = far
				case tc.caller > 0:
					req.Deadline = start.Add(tc.caller)
				}
				o := k.Op(tc.op).Invoke(ctx, req)
				if o.Err != nil {
					t.Fatalf("Invoke = %v", o.Err)
				}
				inv := o.Invocation
				got, _ := o.Output.(time.Time)
				if got.Sub(start) != tc.want {
					t.Errorf("handler's deadline = start+%v, want start+%v", got.Sub(start), tc.want)
				}
				if d, _ := inv.Deadline(); !d.Equal(got) {
					t.Errorf("inv.Deadline() = %v, want the handler's %v", d, got)
				}
			})
		})
	}
}

// TestOperationTimeoutReleasesHandler: a caller's 5 s deadline on an
// operation with TimeoutSeconds 2 ends the blocked handler at 2 s with
// TIMEOUT, the operation's own deadline binding; the handler's own report
// of its context's end is the TIMEOUT's cause.
func TestOperationTimeoutReleasesHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := deadlineKernel(t, deadlineConfig)
		start := time.Now()
		in := "block"
		o := k.Op("test.capped").Invoke(t.Context(), kernel.Unary{Caller: kernel.Caller{Deadline: start.Add(5 * time.Second)}, Input: &in})
		if pipelinetest.CodeOf(o.Err) != pipeline.CodeTimeout {
			t.Errorf("Invoke = %v; want %s", o.Err, pipeline.CodeTimeout)
		}
		if el := time.Since(start); el != 2*time.Second {
			t.Errorf("handler released after %v, want 2s", el)
		}
		if src := o.Invocation.Timing().Source; src != pipeline.DeadlineOperation {
			t.Errorf("DeadlineSource() = %v, want operation", src)
		}
		if cd, _ := pipelinetest.CallerDeadline(o.Invocation); !cd.Equal(start.Add(5 * time.Second)) {
			t.Errorf("CallerDeadline() = %v, want start+5s", cd)
		}
	})
}
