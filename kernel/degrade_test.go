package kernel_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience"
	"github.com/sundial-go/sundial/resilience/cluster"
	"github.com/sundial-go/sundial/resilience/cluster/redistest"
)

// failedCalls is a go-redis hook that counts the failed commands on the
// keys of each operation ("{sundial:<id>}").
type failedCalls struct {
	mu sync.Mutex
	n  map[string]int
}

func (*failedCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (*failedCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (f *failedCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil {
			return nil
		}
		for _, a := range cmd.Args() {
			s, _ := a.(string)
			if id, ok := strings.CutPrefix(s, "{"+cluster.DefaultKeyPrefix+":"); ok {
				id, _, _ = strings.Cut(id, "}")
				f.mu.Lock()
				f.n[id]++
				f.mu.Unlock()
				break
			}
		}
		return err
	}
}

func (f *failedCalls) of(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n[id]
}

// TestDegradeAfterReachesTheStore: the DegradeAfter key reaches each
// operation's cluster limits, inherited from the section's root or set
// by the operation, and a reload changes it. With Redis gone, an
// operation degrades after exactly DegradeAfter failed store calls: the
// call's own and the checks that follow it. A call whose store call
// failed gets 503 KERNEL_UNAVAILABLE_002 with a retry-after.
func TestDegradeAfterReachesTheStore(t *testing.T) {
	srv := redistest.Start(t)
	failed := &failedCalls{n: map[string]int{}}
	rdb := cluster.NewClient(&redis.Options{Addr: srv.Addr()})
	rdb.AddHook(failed)
	defer rdb.Close()
	path := filepath.Join(t.TempDir(), "config.json")
	doc := func(root, get int) string {
		return wrap(fmt.Sprintf(`{"Scope":"cluster","PermitLimit":1000,"WindowSeconds":3600,"StoreTimeoutMs":1000,
			"OnStoreError":"closed","DegradeAfter":%d,"Operations":{"orders.get":{"DegradeAfter":%d}}}`, root, get))
	}
	writeAtomically(t, path, doc(2, 4))
	var calls int
	k, err := resKernel(t, `{}`, &calls, kernel.WithConfigFile(path), kernel.WithRedis(rdb))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	writeAtomically(t, path, doc(5, 1))
	if res, err := kernel.ReloadResult(k.Reload()); res != kernel.ReloadOK {
		t.Fatalf("Reload = %q, %v", res, err)
	}
	for _, id := range []string{"orders.create", "orders.get"} {
		if out := k.Op(id).Invoke(t.Context(), kernel.Unary{Input: new("x")}); out.Err != nil {
			t.Fatalf("%s with Redis up: %v", id, out.Err)
		}
	}
	srv.Kill()
	for id, want := range map[string]int{"orders.create": 5, "orders.get": 1} {
		out := k.Op(id).Invoke(t.Context(), kernel.Unary{Input: new("x")})
		// Turned away as by the limit, after 1 s: StoreTimeoutMs before
		// degrading, the time until the next try once degraded.
		ra, has := pipeline.AsError(out.Err).RetryAfter()
		if code := pipelinetest.CodeOf(out.Err); code != resilience.CodeRateLimited || !has || ra != time.Second {
			t.Fatalf("%s with Redis gone: %v (retry after %v), want %s after 1s", id, out.Err, ra, resilience.CodeRateLimited)
		}
		deadline := time.Now().Add(10 * time.Second)
		for !k.ClusterStore().Degraded(id) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if !k.ClusterStore().Degraded(id) {
			t.Fatalf("%s: not degraded after %d failed store calls", id, failed.of(id))
		}
		if got := failed.of(id); got != want {
			t.Errorf("%s degraded after %d failed store calls, want DegradeAfter = %d", id, got, want)
		}
	}
}
