package kernel

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/knadh/koanf/v2"

	"github.com/sundial-go/sundial/kernel/internal/config"
	"github.com/sundial-go/sundial/operations"
	"github.com/sundial-go/sundial/pipeline"
	"github.com/sundial-go/sundial/resilience"
)

// keySample holds values of one key for TestPolicyKeysTable: a and b are
// valid and differ from each other, a from the built-in default; bad is
// refused.
type keySample struct{ a, b, bad any }

// keySamples has a sample for every key of the table, and only those.
var keySamples = map[string]keySample{
	"PermitLimit":                  {5.0, 7.0, 0.0},
	"WindowSeconds":                {2.0, 3.0, 0.0},
	"QueueLimit":                   {2.0, 3.0, -1.0},
	"ConcurrencyLimit":             {2.0, 3.0, 0.0},
	"ConcurrencyQueueLimit":        {2.0, 3.0, -1.0},
	"Adaptive.MinLimit":            {2.0, 3.0, 0.0},
	"Adaptive.MaxLimit":            {50.0, 60.0, 0.0},
	"Adaptive.InitialLimit":        {5.0, 6.0, 0.0},
	"Adaptive.WindowSeconds":       {2.0, 3.0, 0.0},
	"Adaptive.HealthyLatencyMs":    {100.0, 200.0, 0.0},
	"Adaptive.Shadow":              {true, false, "yes"},
	"Priority":                     {"critical", "sheddable", "urgent"},
	"PriorityReserve":              {0.3, 0.4, 1.0},
	"FailureThreshold":             {2.0, 3.0, 0.0},
	"BreakSeconds":                 {2.0, 3.0, 0.0},
	"TimeoutSeconds":               {2.0, 3.0, 0.0},
	"Scope":                        {"process", "cluster", "global"},
	"StoreTimeoutMs":               {20.0, 30.0, 0.0},
	"DegradeAfter":                 {5.0, 1.0, 101.0},
	"OnStoreError":                 {"open", "closed", "fail"},
	"ExpectedReplicas":             {2.0, 3.0, 0.0},
	"LeasePermits":                 {100.0, 200.0, 0.0},
	"Shadow":                       {true, false, "yes"},
	"RateLimitHeaders":             {true, false, "yes"},
	"Limits":                       {map[string]any{"a": map[string]any{}}, map[string]any{"b": map[string]any{"n": 1.0}}, "x"},
	"PerKey.PermitLimit":           {5.0, 7.0, 0.0},
	"PerKey.WindowSeconds":         {2.0, 3.0, 0.0},
	"PerKey.QueueLimit":            {2.0, 3.0, -1.0},
	"PerKey.Baggage":               {"tenant", "api-key", "a b"},
	"Stream.MaxStreams":            {2.0, 3.0, 0.0},
	"Stream.IdleSeconds":           {2.0, 3.0, 0.0},
	"Stream.SendStallSeconds":      {2.0, 3.0, 0.0},
	"Stream.MessagesPerSecond":     {100.0, 50.0, 0.0},
	"Stream.HardRate":              {true, false, "yes"},
	"Stream.MaxMessages":           {2.0, 3.0, 0.0},
	"Stream.MaxStreamBytes":        {2.0, 3.0, 0.0},
	"Stream.HeartbeatSeconds":      {2.0, 3.0, 0.0},
	"Stream.MaxAgeSeconds":         {2.0, 3.0, 0.0},
	"Stream.MaxAgeJitter":          {0.3, 0.4, 1.0},
	"Idempotency.Enabled":          {false, true, "yes"},
	"Idempotency.Required":         {true, false, "yes"},
	"Idempotency.RetentionSeconds": {60.0, 120.0, 0.0},
	"Idempotency.MaxOutcomeBytes":  {1000.0, 2000.0, 2000000.0},
}

const opID = "test.echo"

// keyDoc returns the object that sets key (Object.Key: nested) to v.
func keyDoc(key string, v any) map[string]any {
	if obj, leaf, ok := strings.Cut(key, "."); ok {
		return map[string]any{obj: map[string]any{leaf: v}}
	}
	return map[string]any{key: v}
}

// emptied returns the object an operation writes to set none of key: {}
// for a key at the root, {"Object": {}} for a key of an object.
func emptied(key string) map[string]any {
	if obj, _, ok := strings.Cut(key, "."); ok {
		return map[string]any{obj: map[string]any{}}
	}
	return map[string]any{}
}

// withOp returns root with an Operations entry for opID.
func withOp(root, op map[string]any) map[string]any {
	out := map[string]any{}
	maps.Copy(out, root)
	out["Operations"] = map[string]any{opID: op}
	return out
}

func resolve(t *testing.T, doc map[string]any, id string) config.Target {
	t.Helper()
	p, err := parsePolicies(doc, section)
	if err != nil {
		t.Fatalf("parse %v: %v", doc, err)
	}
	return p.Resolve(id)
}

// differs reports whether the key's value differs between a and b.
func differs(a, b config.Target, key string) bool {
	applied, ignored := config.Diff(a, b)
	return slices.Contains(applied, key) || slices.Contains(ignored, key)
}

// TestPolicyKeysTable: every key of the table is parsed into its target,
// validated with its full key path at the root and under an operation,
// merged (an operation's value wins; an inherited key it does not set
// takes the root's value, another its built-in default), reported by the
// reload diff as applied or ignored as its row says, mapped from
// environment variable names, and documented in docs/policy-keys.md.
func TestPolicyKeysTable(t *testing.T) {
	var names []string
	for _, k := range config.Keys {
		names = append(names, k.Name)
	}
	if got := slices.Sorted(maps.Keys(keySamples)); !slices.Equal(got, slices.Sorted(slices.Values(names))) {
		t.Fatalf("keySamples has %v; want one sample for each key of the table: %v", got, names)
	}
	if docs := documentedKeys(t); !slices.Equal(docs, names) {
		t.Errorf("docs/policy-keys.md documents %v; want the table's keys %v", docs, names)
	}
	for _, k := range config.Keys {
		t.Run(k.Name, func(t *testing.T) {
			s := keySamples[k.Name]
			checkParsed(t, k, s)
			checkValidated(t, k, s)
			checkMerged(t, k, s)
			checkDiffed(t, k, s)
			checkEnvNames(t, k)
		})
	}
}

func checkParsed(t *testing.T, k config.Key, s keySample) {
	// The built-in default of a key of an object is what the object gives
	// without the key.
	for _, doc := range [][2]map[string]any{
		{emptied(k.Name), keyDoc(k.Name, s.a)},
		{withOp(nil, emptied(k.Name)), withOp(nil, keyDoc(k.Name, s.a))},
	} {
		applied, ignored := config.Diff(resolve(t, doc[0], opID), resolve(t, doc[1], opID))
		if changed := slices.Concat(applied, ignored); !slices.Equal(changed, []string{k.Name}) {
			t.Errorf("%v changes the keys %v of the target from the built-in default; want %s alone", doc[1], changed, k.Name)
		}
	}
}

// TestPolicyKeysReachEveryField: each key sets one field of the target,
// its own, and every field of resilience.Policy and idempotency.Policy
// has a key.
func TestPolicyKeysReachEveryField(t *testing.T) {
	fields := map[string]string{} // field -> key
	for _, k := range config.Keys {
		s := keySamples[k.Name]
		was, is := resolve(t, emptied(k.Name), opID), resolve(t, keyDoc(k.Name, s.a), opID)
		changed := changedFields(was, is)
		if len(changed) != 1 {
			t.Errorf("%s changes the fields %v; want one", k.Name, changed)
			continue
		}
		if other, dup := fields[changed[0]]; dup {
			t.Errorf("%s and %s both set %s", other, k.Name, changed[0])
		}
		fields[changed[0]] = k.Name
	}
	for _, f := range leafFields(reflect.TypeFor[config.Target](), "") {
		if fields[f] == "" {
			t.Errorf("no key sets %s", f)
		}
	}
}

// changedFields returns the fields (Policy.Window, Policy.PerKey.Window)
// that differ.
func changedFields(a, b config.Target) []string {
	var out []string
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	for _, f := range leafFields(va.Type(), "") {
		if !va.FieldByIndex(fieldIndex(va.Type(), f)).Equal(vb.FieldByIndex(fieldIndex(va.Type(), f))) {
			out = append(out, f)
		}
	}
	return out
}

// leafFields returns the paths of the fields of the struct type st that
// are not structs themselves, its structs' fields in their stead.
func leafFields(st reflect.Type, prefix string) []string {
	var out []string
	for i := range st.NumField() {
		f := st.Field(i)
		if f.Type.Kind() == reflect.Struct {
			out = append(out, leafFields(f.Type, prefix+f.Name+".")...)
			continue
		}
		out = append(out, prefix+f.Name)
	}
	return out
}

// fieldIndex returns the index sequence of the field at path in st.
func fieldIndex(st reflect.Type, path string) []int {
	var idx []int
	for name := range strings.SplitSeq(path, ".") {
		f, _ := st.FieldByName(name)
		idx = append(idx, f.Index...)
		st = f.Type
	}
	return idx
}

func checkValidated(t *testing.T, k config.Key, s keySample) {
	for _, tc := range []struct {
		doc  map[string]any
		path string
	}{
		{keyDoc(k.Name, s.bad), section + "." + k.Name},
		{withOp(nil, keyDoc(k.Name, s.bad)), section + ".Operations." + opID + "." + k.Name},
	} {
		_, err := parsePolicies(tc.doc, section)
		if err == nil || !strings.HasPrefix(err.Error(), "kernel: "+tc.path+": ") {
			t.Errorf("%v: error %v; want one naming %s", tc.doc, err, tc.path)
		}
	}
}

func checkMerged(t *testing.T, k config.Key, s keySample) {
	over := withOp(keyDoc(k.Name, s.a), keyDoc(k.Name, s.b))
	if differs(resolve(t, over, opID), resolve(t, keyDoc(k.Name, s.b), opID), k.Name) {
		t.Errorf("%v: the operation's value does not override the root's", over)
	}
	if differs(resolve(t, over, "other.op"), resolve(t, keyDoc(k.Name, s.a), opID), k.Name) {
		t.Errorf("%v: an operation without overrides does not take the root's value", over)
	}
	unset := withOp(keyDoc(k.Name, s.a), emptied(k.Name))
	fromRoot := !differs(resolve(t, unset, opID), resolve(t, keyDoc(k.Name, s.a), opID), k.Name)
	if fromRoot != k.Inherited {
		t.Errorf("%v: the operation takes the root's value: %v; want %v (Inherited)", unset, fromRoot, k.Inherited)
	}
	if !k.Inherited && differs(resolve(t, unset, opID), resolve(t, withOp(nil, emptied(k.Name)), opID), k.Name) {
		t.Errorf("%v: a key that is not inherited does not take its built-in default", unset)
	}
}

func checkDiffed(t *testing.T, k config.Key, s keySample) {
	applied, ignored := config.Diff(resolve(t, keyDoc(k.Name, s.a), opID), resolve(t, keyDoc(k.Name, s.b), opID))
	want := [][]string{nil, {k.Name}}
	if k.Reloadable {
		want = [][]string{{k.Name}, nil}
	}
	if !slices.Equal(applied, want[0]) || !slices.Equal(ignored, want[1]) {
		t.Errorf("Diff = applied %v, ignored %v; want %v, %v", applied, ignored, want[0], want[1])
	}
	checkReloaded(t, k, s)
}

// checkReloaded reloads a kernel from the key at a to the key at b: a
// reloadable key is in force after it, a start-up only one keeps a and
// the log says its change is ignored.
func checkReloaded(t *testing.T, k config.Key, s keySample) {
	path := filepath.Join(t.TempDir(), "config.json")
	writeDoc(t, path, withOp(nil, keyDoc(k.Name, s.a)))
	var log lockedBuffer
	reg := operations.NewRegistry()
	type out struct{ N int }
	if err := operations.Register(reg, operations.Descriptor{ID: opID}, func(context.Context, struct{}) (out, error) { return out{}, nil }); err != nil {
		t.Fatal(err)
	}
	kn, err := New(WithRegistry(reg), WithConfigFile(path), WithLogger(slog.New(slog.NewJSONHandler(&log, nil))),
		WithLimitKind("a", passLimit), WithLimitKind("b", passLimit))
	if err != nil {
		t.Fatal(err)
	}
	defer kn.Close()
	writeDoc(t, path, withOp(nil, keyDoc(k.Name, s.b)))
	if res, err := ReloadResult(kn.Reload()); res != ReloadOK || err != nil {
		t.Fatalf("Reload = %q, %v", res, err)
	}
	idem, _ := kn.Op(opID).Idempotency()
	inForce := config.Target{Policy: kn.PolicyFor(opID), Idempotency: idem, Custom: kn.customTarget(opID),
		Stream: *kn.ops[opID].stream.Load()}
	want, ignoredLine := keyDoc(k.Name, s.b), "Operations."+opID+"."+config.TopLevel([]string{k.Name})[0]+" changed"
	if !k.Reloadable {
		want = keyDoc(k.Name, s.a)
	}
	if differs(inForce, resolve(t, withOp(nil, want), opID), k.Name) {
		t.Errorf("after the reload, %s in force is not the value of %v", k.Name, want)
	}
	if logged := strings.Contains(log.String(), ignoredLine); logged == k.Reloadable {
		t.Errorf("log says %q: %v; want %v:\n%s", ignoredLine, logged, !k.Reloadable, log.String())
	}
}

func checkEnvNames(t *testing.T, k config.Key) {
	for _, seg := range strings.Split(k.Name, ".") {
		if got := canonical(koanf.New(delimiter), "", strings.ToUpper(seg)); got != seg {
			t.Errorf("environment segment %s maps to %q, want %q", strings.ToUpper(seg), got, seg)
		}
	}
}

// documentedKeys returns the keys of the rows of docs/policy-keys.md.
func documentedKeys(t *testing.T) []string {
	b, err := os.ReadFile("../docs/policy-keys.md")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for line := range strings.Lines(string(b)) {
		if strings.HasPrefix(line, "## ") {
			break // the next table is Sundial.Kernel.Dependencies's
		}
		if rest, ok := strings.CutPrefix(line, "| `"); ok {
			key, _, _ := strings.Cut(rest, "`")
			keys = append(keys, key)
		}
	}
	return keys
}

func writeDoc(t *testing.T, path string, doc map[string]any) {
	t.Helper()
	b, err := json.Marshal(map[string]any{"Sundial": map[string]any{"Kernel": map[string]any{"Resilience": doc}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// lockedBuffer is a log sink safe for concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// passLimit is a limit kind that admits every call (the Limits key's
// samples name kinds "a" and "b").
func passLimit(string, json.RawMessage) (resilience.Limit, error) { return passAll{}, nil }

type passAll struct{}

func (passAll) Acquire(context.Context, *pipeline.Invocation) (resilience.Permit, error) {
	return resilience.Permit{}, nil
}
