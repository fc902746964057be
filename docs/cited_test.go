// Package docs holds the user documentation. Its one test checks the
// promise the chapters make: every test, example, benchmark and fuzz
// target a chapter names exists in the repository.
package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// cited matches a name in backticks that a chapter gives as evidence.
var cited = regexp.MustCompile("`((?:Test|Example|Benchmark|Fuzz)[A-Za-z0-9_]*)(?:/[^`]*)?`")

// declared matches the Go declaration of such a name.
var declared = regexp.MustCompile(`(?m)^func ((?:Test|Example|Benchmark|Fuzz)[A-Za-z0-9_]*)\(`)

// TestCitedTestsExist: every `TestX`, `ExampleX`, `BenchmarkX` and `FuzzX`
// named in a chapter (or the README) is declared in a _test.go file of the
// repository, so that no sentence rests on a test that was renamed or
// never written.
func TestCitedTestsExist(t *testing.T) {
	have := map[string]bool{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != ".." {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range declared.FindAllSubmatch(b, -1) {
			have[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	chapters, _ := filepath.Glob("*.md")
	chapters = append(chapters, "../README.md")
	missing := map[string][]string{}
	for _, c := range chapters {
		b, err := os.ReadFile(c)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range cited.FindAllSubmatch(b, -1) {
			name := string(m[1])
			if !have[name] && !isPrefixOfDeclared(name, have) {
				missing[name] = append(missing[name], filepath.Base(c))
			}
		}
	}
	names := make([]string, 0, len(missing))
	for n := range missing {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		t.Errorf("%s is cited in %v but declared in no _test.go file", n, missing[n])
	}
}

// isPrefixOfDeclared allows a chapter to name a family of tests by its
// common stem ending in an underscore or a capital, e.g. `Example_` or
// `TestConformance`'s subtests; a bare stem must still begin a declared name.
func isPrefixOfDeclared(name string, have map[string]bool) bool {
	if !strings.HasSuffix(name, "_") {
		return false
	}
	for h := range have {
		if strings.HasPrefix(h, name) {
			return true
		}
	}
	return false
}
