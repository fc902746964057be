package kernel_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sundial-go/sundial/kernel"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/pipeline/pipelinetest"
	"github.com/sundial-go/sundial/resilience"
)

// workIn is the input of work.do.
type workIn struct{ Panic bool }

// countingLimit admits every call and counts its permits in and out.
type countingLimit struct {
	max           int64
	held, granted atomic.Int64
}

func (l *countingLimit) Acquire(context.Context, *pipeline.Invocation) (resilience.Permit, error) {
	if l.held.Load() >= l.max {
		return resilience.Permit{}, pipeline.NewError(pipeline.KindUnavailable, "APP_FULL_001", "full")
	}
	l.held.Add(1)
	l.granted.Add(1)
	return resilience.NewPermit(l), nil
}

func (l *countingLimit) Release(resilience.Outcome) { l.held.Add(-1) }

// limitKindKernel returns a kernel of one operation, "work.do", whose
// handler panics when its input says so, with the limit kind "count"
// (counting the limits it builds) on the config file doc.
func limitKindKernel(t *testing.T, doc string) (*kernel.Kernel, string, *atomic.Int64, *[]*countingLimit, error) {
	t.Helper()
	reg := operations.NewRegistry()
	if err := operations.Register(reg, operations.Descriptor{ID: "work.do"}, func(_ context.Context, in workIn) (string, error) {
		if in.Panic {
			panic("boom")
		}
		return "done", nil
	}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	var builds atomic.Int64
	var built []*countingLimit
	k, err := kernel.New(kernel.WithRegistry(reg), kernel.WithConfigFile(path),
		kernel.WithLimitKind("count", func(id string, raw json.RawMessage) (resilience.Limit, error) {
			var c struct{ Max int64 }
			if err := json.Unmarshal(raw, &c); err != nil {
				return nil, err
			}
			if c.Max < 1 {
				return nil, errors.New("Max must be at least 1")
			}
			builds.Add(1)
			l := &countingLimit{max: c.Max}
			built = append(built, l)
			return l, nil
		}))
	if err == nil {
		t.Cleanup(func() { k.Close() })
	}
	return k, path, &builds, &built, err
}

const countDoc = `{"Sundial":{"Kernel":{"Resilience":{"Operations":{"work.do":{"PermitLimit":100,"Limits":{"count":{"Max":%s}}}}}}}}`

// TestLimitKindRefusedWithKeyPath: an unknown kind, a kind's own error
// and a malformed Limits object each refuse the configuration, naming
// the key path.
func TestLimitKindRefusedWithKeyPath(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{`{"Sundial":{"Kernel":{"Resilience":{"Operations":{"work.do":{"Limits":{"nope":{}}}}}}}}`,
			"kernel: Sundial.Kernel.Resilience.Operations.work.do.Limits.nope: unknown limit kind (registered: [count])"},
		{`{"Sundial":{"Kernel":{"Resilience":{"Limits":{"nope":{}}}}}}`,
			"kernel: Sundial.Kernel.Resilience.Limits.nope: unknown limit kind"},
		{strings.Replace(countDoc, "%s", "0", 1),
			"kernel: Sundial.Kernel.Resilience.Operations.work.do.Limits.count: Max must be at least 1"},
		{`{"Sundial":{"Kernel":{"Resilience":{"Operations":{"work.do":{"Limits":{"count":5}}}}}}}`,
			"kernel: Sundial.Kernel.Resilience.Operations.work.do.Limits.count: want an object (the limit's configuration), got a number"},
		{`{"Sundial":{"Kernel":{"Resilience":{"Operations":{"work.do":{"Limits":{"a":{},"b":{},"c":{},"d":{},"e":{}}}}}}}}`,
			"kernel: Sundial.Kernel.Resilience.Operations.work.do.Limits: want an object of 1 to 4 limit kinds, got an object of 5"},
	} {
		_, _, _, _, err := limitKindKernel(t, tc.doc)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("New with %s: %v; want %q", tc.doc, err, tc.want)
		}
	}
}

// TestLimitKindRunsAndReleases: a limit of one's own admits and turns
// away as it says, a call it turns away never runs, and its permit is
// given back on every exit path, a panic included.
func TestLimitKindRunsAndReleases(t *testing.T) {
	k, _, _, built, err := limitKindKernel(t, strings.Replace(countDoc, "%s", "1", 1))
	if err != nil {
		t.Fatal(err)
	}
	o := k.Op("work.do").Invoke(t.Context(), kernel.Unary{Input: &workIn{}})
	if o.Err != nil || o.Output != "done" {
		t.Fatalf("call: %v %v", o.Output, o.Err)
	}
	o = k.Op("work.do").Invoke(t.Context(), kernel.Unary{Input: &workIn{Panic: true}})
	if pipelinetest.KindOf(o.Err) != pipeline.KindUnexpected {
		t.Fatalf("panicking call: %v, want UNEXPECTED", o.Err)
	}
	l := (*built)[0]
	if l.held.Load() != 0 || l.granted.Load() != 2 {
		t.Fatalf("held %d, granted %d after two calls; want 0 and 2", l.held.Load(), l.granted.Load())
	}
	l.held.Store(1) // full: the next call is turned away and runs nothing
	o = k.Op("work.do").Invoke(t.Context(), kernel.Unary{Input: &workIn{Panic: true}})
	if pipelinetest.CodeOf(o.Err) != "APP_FULL_001" {
		t.Fatalf("call on a full limit: %v, want APP_FULL_001", o.Err)
	}
}

// TestLimitKindReload: a reload that changes an operation's Limits
// builds its limit anew; one that changes another key keeps it; one that
// names an unknown kind is refused and keeps what is in force.
func TestLimitKindReload(t *testing.T) {
	k, path, builds, built, err := limitKindKernel(t, strings.Replace(countDoc, "%s", "1", 1))
	if err != nil {
		t.Fatal(err)
	}
	reload := func(doc string) (string, error) {
		if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		return kernel.ReloadResult(k.Reload())
	}
	if res, err := reload(strings.Replace(strings.Replace(countDoc, "%s", "1", 1), `"PermitLimit":100`, `"PermitLimit":50`, 1)); res != kernel.ReloadOK || err != nil || builds.Load() != 1 {
		t.Fatalf("PermitLimit change: %s %v, %d builds; want ok and the limit kept (1 build)", res, err, builds.Load())
	}
	if res, err := reload(strings.Replace(countDoc, "%s", "2", 1)); res != kernel.ReloadOK || err != nil || builds.Load() != 2 {
		t.Fatalf("Limits change: %s %v, %d builds; want ok and a new limit (2 builds)", res, err, builds.Load())
	}
	if res, err := reload(`{"Sundial":{"Kernel":{"Resilience":{"Operations":{"work.do":{"Limits":{"nope":{}}}}}}}}`); res != kernel.ReloadInvalid || err == nil {
		t.Fatalf("unknown kind: %s %v, want refused", res, err)
	}
	if o := k.Op("work.do").Invoke(t.Context(), kernel.Unary{Input: &workIn{}}); o.Err != nil || (*built)[1].granted.Load() != 1 || (*built)[0].granted.Load() != 0 {
		t.Fatalf("after the refused reload: %v; the second limit granted %d, the first %d; want the second in force",
			o.Err, (*built)[1].granted.Load(), (*built)[0].granted.Load())
	}
}

// panicLimit panics in Acquire.
type panicLimit struct{}

func (panicLimit) Acquire(context.Context, *pipeline.Invocation) (resilience.Permit, error) {
	panic("limit bug")
}

// TestLimitKindPanicGivesPermitsBack: a limit of one's own that panics is
// an UNEXPECTED answer, and the permits the call held already (a
// concurrency slot, the breaker's ticket) are given back; a typed nil
// limit is refused at New.
func TestLimitKindPanicGivesPermitsBack(t *testing.T) {
	reg := operations.NewRegistry()
	if err := operations.Register(reg, operations.Descriptor{ID: "work.do"}, func(context.Context, workIn) (string, error) { return "done", nil }); err != nil {
		t.Fatal(err)
	}
	doc := `{"Sundial":{"Kernel":{"Resilience":{"Operations":{"work.do":{"ConcurrencyLimit":1,"FailureThreshold":1,"Limits":{"boom":{}}}}}}}}`
	k, err := kernel.New(kernel.WithRegistry(reg), kernel.WithConfigJSON([]byte(doc)),
		kernel.WithLimitKind("boom", func(string, json.RawMessage) (resilience.Limit, error) { return panicLimit{}, nil }))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	for i := range 3 {
		o := k.Op("work.do").Invoke(t.Context(), kernel.Unary{Input: &workIn{}})
		if pipelinetest.KindOf(o.Err) != pipeline.KindUnexpected {
			t.Fatalf("call %d: %v, want UNEXPECTED (the slot and the breaker given back)", i+1, o.Err)
		}
	}
	var nilLimit *countingLimit
	_, err = kernel.New(kernel.WithRegistry(reg), kernel.WithConfigJSON([]byte(`{"Sundial":{"Kernel":{"Resilience":{"Operations":{"work.do":{"Limits":{"nil":{}}}}}}}}`)),
		kernel.WithLimitKind("nil", func(string, json.RawMessage) (resilience.Limit, error) { return nilLimit, nil }))
	if err == nil || !strings.Contains(err.Error(), "Limits.nil: the kind's build function returned no limit") {
		t.Fatalf("typed nil limit: %v, want refused", err)
	}
}

// closingLimit is a countingLimit that is an io.Closer: Close counts, and
// runs after (a call, to see whether it still meets the closed limit).
type closingLimit struct {
	countingLimit
	closes atomic.Int64
	after  func(*closingLimit) // called in Close (nil: nothing)
}

func (l *closingLimit) Close() error {
	l.closes.Add(1)
	if l.after != nil {
		l.after(l)
	}
	return errors.New("already gone") // logged, not fatal
}

// TestLimitKindClosedWhenDropped: a limit of one's own that is an
// io.Closer is closed once when a reload replaces it (after the new one is
// in force: a call made in its Close does not meet it), not when a reload
// keeps it; one built for a refused reload is closed and never runs; the
// one in force is closed at Kernel.Close.
func TestLimitKindClosedWhenDropped(t *testing.T) {
	reg := operations.NewRegistry()
	if err := operations.Register(reg, operations.Descriptor{ID: "work.do"}, func(context.Context, workIn) (string, error) { return "done", nil }); err != nil {
		t.Fatal(err)
	}
	doc := func(limits string) []byte {
		return []byte(`{"Sundial":{"Kernel":{"Resilience":{"Operations":{"work.do":{"PermitLimit":100,"Limits":{` + limits + `}}}}}}}`)
	}
	path := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(path, doc(`"close":{"Max":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var built []*closingLimit
	var k *kernel.Kernel
	call := func() {
		if o := k.Op("work.do").Invoke(t.Context(), kernel.Unary{Input: &workIn{}}); o.Err != nil {
			t.Errorf("call: %v", o.Err)
		}
	}
	var metAfterClose atomic.Int64
	k, err := kernel.New(kernel.WithRegistry(reg), kernel.WithConfigFile(path),
		kernel.WithLimitKind("close", func(_ string, raw json.RawMessage) (resilience.Limit, error) {
			var c struct{ Max int64 }
			if err := json.Unmarshal(raw, &c); err != nil {
				return nil, err
			}
			l := &closingLimit{countingLimit: countingLimit{max: c.Max}}
			l.after = func(l *closingLimit) {
				before := l.granted.Load()
				call()
				metAfterClose.Add(l.granted.Load() - before)
			}
			built = append(built, l)
			return l, nil
		}),
		kernel.WithLimitKind("fail", func(string, json.RawMessage) (resilience.Limit, error) { return nil, errors.New("no") }))
	if err != nil {
		t.Fatal(err)
	}
	reload := func(limits string, want string) {
		t.Helper()
		if err := os.WriteFile(path, doc(limits), 0o600); err != nil {
			t.Fatal(err)
		}
		if res, _ := kernel.ReloadResult(k.Reload()); res != want {
			t.Fatalf("reload to %s: %s, want %s", limits, res, want)
		}
	}
	call()
	reload(`"close":{"Max":2}`, kernel.ReloadOK)
	if len(built) != 2 || built[0].closes.Load() != 1 || built[1].closes.Load() != 0 {
		t.Fatalf("after the Limits change: %d built, closes %d and %d; want the old one closed once", len(built), built[0].closes.Load(), built[1].closes.Load())
	}
	if metAfterClose.Load() != 0 {
		t.Errorf("a call made while the old limit closed met it %d times, want 0", metAfterClose.Load())
	}
	reload(`"close":{"Max":2},"fail":{}`, kernel.ReloadInvalid)
	if len(built) != 3 || built[2].closes.Load() != 1 || built[2].granted.Load() != 0 || built[1].closes.Load() != 0 {
		t.Fatalf("after a refused reload: %d built; the one built for it closed %d times (granted %d), the one in force %d; want 1, 0, 0",
			len(built), built[2].closes.Load(), built[2].granted.Load(), built[1].closes.Load())
	}
	call()
	if built[1].granted.Load() != 3 || metAfterClose.Load() != 0 { // the calls made in the two Closes, and this one
		t.Errorf("the limit in force granted %d, want 3; closed limits met %d calls, want 0", built[1].granted.Load(), metAfterClose.Load())
	}
	built[1].after = nil
	k.Close()
	k.Close()
	if built[0].closes.Load() != 1 || built[1].closes.Load() != 1 {
		t.Errorf("after Kernel.Close: closes %d and %d, want 1 and 1", built[0].closes.Load(), built[1].closes.Load())
	}
}
