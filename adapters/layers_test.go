package adapters_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/sundial-go/sundial"

// allowed lists, per layer (a directory prefix), the project packages its
// non-test files may import besides their own subtree. Imports flow
// adapters -> kernel -> {resilience, operations} -> pipeline; nothing
// imports an adapter or a sample, adapters do not reach past the kernel
// into resilience, and resilience does not know operations.
var allowed = []struct {
	layer string
	may   []string
}{
	{"pipeline", nil},
	{"operations", []string{"pipeline"}},
	{"resilience", []string{"pipeline"}},
	{"kernel/propagation", []string{"pipeline", "resilience"}},
	{"kernel/logs", []string{"pipeline"}},
	{"kernel", []string{"pipeline", "operations", "resilience"}},
	{"adapters", []string{"pipeline", "operations", "kernel"}},
	{"samples", []string{"pipeline", "operations", "resilience", "kernel", "adapters"}},
}

// TestLayers fails when a package imports a project package its layer may
// not: in particular adapters/... importing resilience, an adapter
// importing another adapter, or resilience importing operations.
func TestLayers(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n == "testdata" || strings.HasPrefix(n, ".") && path != root {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		dir := filepath.ToSlash(filepath.Dir(rel))
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		layer, may := layerOf(dir)
		for _, is := range f.Imports {
			imp, _ := strconv.Unquote(is.Path.Value)
			if !strings.HasPrefix(imp, module+"/") {
				continue
			}
			target := strings.TrimPrefix(imp, module+"/")
			checked++
			if otherAdapter(target, dir) {
				t.Errorf("%s imports %s: an adapter may not import another adapter; "+
					"shared adapter code lives in adapters/internal", rel, imp)
				continue
			}
			if within(target, dir) || within(target, layer) && !strings.HasPrefix(target, "samples") ||
				sameSample(target, dir) {
				continue
			}
			ok := false
			for _, m := range may {
				ok = ok || within(target, m)
			}
			if !ok {
				t.Errorf("%s imports %s: layer %q may import only %v", rel, imp, layer, may)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Fatal("no project imports found: the walk did not see the tree")
	}
}

// sameSample reports whether target and dir are parts of one sample
// (samples/<name>/...): a sample's own packages may import one another,
// while no sample imports another sample.
func sameSample(target, dir string) bool {
	t, d := strings.Split(target, "/"), strings.Split(dir, "/")
	return len(t) > 1 && len(d) > 1 && t[0] == "samples" && d[0] == "samples" &&
		t[1] == d[1] && t[1] != "internal"
}

// otherAdapter reports whether target is an adapter (adapters/<name>/...,
// internal excepted) other than the one dir belongs to. Adapters are
// leaves: what two of them share lives in adapters/internal.
func otherAdapter(target, dir string) bool {
	t, d := strings.Split(target, "/"), strings.Split(dir, "/")
	if len(t) < 2 || t[0] != "adapters" || t[1] == "internal" || d[0] != "adapters" {
		return false
	}
	return len(d) < 2 || d[1] != t[1]
}

// layerOf returns the layer of a directory: the longest entry of allowed
// that is dir or a parent of it.
func layerOf(dir string) (string, []string) {
	best := -1
	for i, a := range allowed {
		if within(dir, a.layer) && (best < 0 || len(a.layer) > len(allowed[best].layer)) {
			best = i
		}
	}
	if best < 0 {
		return dir, nil
	}
	return allowed[best].layer, allowed[best].may
}

// within reports whether path is dir or inside it.
func within(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, dir+"/")
}
