package docs

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestSnippetsCompile type-checks every ```go block of the chapters and
// the README against the repository's packages, so that no chapter shows
// code that does not compile.
//
// A block is compiled as it stands when it is a whole file (it starts
// with a package clause), as top-level declarations when it parses as
// such, and otherwise as the body of a function. The blocks of one
// chapter that are not whole files share one package: a later block may
// use what an earlier one declares. Imports are added from packageNames,
// by the names the block uses; unused variables and imports are allowed.
//
// An HTML comment right before a block's fence adapts it:
//
//   - <!-- go:harness ... --> holds Go declarations added to the
//     chapter's package: the names a block takes from its surroundings
//     (var k *kernel.Kernel). When one of its lines is "// block", the
//     block takes that line's place, e.g. in a function with results
//     for a block that returns.
//   - <!-- go:fragment reason --> leaves the block out: it is not Go that
//     any harness makes compile (a signature sketch, say).
//
// Errors are reported at the chapter's line.
func TestSnippetsCompile(t *testing.T) {
	chapters, _ := filepath.Glob("*.md")
	chapters = append(chapters, "../README.md")
	var pkgs []*snippetPackage
	for _, c := range chapters {
		b, err := os.ReadFile(c)
		if err != nil {
			t.Fatal(err)
		}
		name := "docs/" + c // as the //line directives name it, from the module's root
		if c == "../README.md" {
			name = "README.md"
		}
		pkgs = append(pkgs, snippetPackages(t, name, string(b))...)
	}
	for _, err := range checkSnippets(t, pkgs) {
		t.Error(err)
	}
}

// checkSnippets type-checks pkgs and returns their errors.
func checkSnippets(t *testing.T, pkgs []*snippetPackage) []error {
	t.Helper()
	exports := exportData(t, pkgs)
	imp := importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %q", path)
		}
		return os.Open(f)
	})
	var errs []error
	for _, p := range pkgs {
		conf := types.Config{Importer: imp, Error: func(err error) {
			if te, ok := err.(types.Error); ok && te.Soft {
				return // declared and not used, imported and not used
			}
			errs = append(errs, err)
		}}
		_, _ = conf.Check(p.path, p.fset, p.files, nil)
	}
	return errs
}

// TestSnippetsCompileFails: the check reports a block that does not
// compile at its chapter's line, uses a harness, and leaves a fragment
// out.
func TestSnippetsCompileFails(t *testing.T) {
	chapter := "# A chapter\n\n" +
		"```go\nr := kernel.Unary{Baggage: nil}\n```\n\n" + // line 4: no such field
		"<!-- go:harness\nfunc _() (int, error) {\n\t// block\n}\n-->\n" +
		"```go\nreturn 0, errors.New(\"x\")\n```\n\n" + // compiles in its harness
		"<!-- go:fragment a sketch -->\n```go\nfunc Acquire(...)\n```\n\n" +
		"```go\nreturn 1\n```\n" // line 22: too many return values
	errs := checkSnippets(t, snippetPackages(t, "docs/x.md", chapter))
	var got []string
	for _, err := range errs {
		got = append(got, err.Error())
	}
	if len(got) != 2 || !strings.HasPrefix(got[0], "docs/x.md:4:") || !strings.Contains(got[0], "Baggage") ||
		!strings.HasPrefix(got[1], "docs/x.md:22:") {
		t.Errorf("errors = %q, want Baggage at docs/x.md:4 and a return at docs/x.md:22", got)
	}
}

// packageNames are the packages a block may use without importing them,
// by the name it uses.
var packageNames = map[string]string{
	"context":      "context",
	"errors":       "errors",
	"fmt":          "fmt",
	"http":         "net/http",
	"io":           "io",
	"json":         "encoding/json",
	"log":          "log",
	"net":          "net",
	"os":           "os",
	"reflect":      "reflect",
	"regexp":       "regexp",
	"slog":         "log/slog",
	"strings":      "strings",
	"time":         "time",
	"cliadapter":   "github.com/sundial-go/sundial/adapters/cliadapter",
	"grpcadapter":  "github.com/sundial-go/sundial/adapters/grpcadapter",
	"httpadapter":  "github.com/sundial-go/sundial/adapters/httpadapter",
	"mcpadapter":   "github.com/sundial-go/sundial/adapters/mcpadapter",
	"mcp":          "github.com/modelcontextprotocol/go-sdk/mcp",
	"kernel":       "github.com/sundial-go/sundial/kernel",
	"client":       "github.com/sundial-go/sundial/kernel/client",
	"propagation":  "github.com/sundial-go/sundial/kernel/propagation",
	"operations":   "github.com/sundial-go/sundial/operations",
	"pipeline":     "github.com/sundial-go/sundial/pipeline",
	"pipelinetest": "github.com/sundial-go/sundial/pipeline/pipelinetest",
	"resilience":   "github.com/sundial-go/sundial/resilience",
	"cluster":      "github.com/sundial-go/sundial/resilience/cluster",
	"idempotency":  "github.com/sundial-go/sundial/resilience/idempotency",
	"outbound":     "github.com/sundial-go/sundial/resilience/outbound",
	"deadline":     "github.com/sundial-go/sundial/resilience/deadline",
	"echo":         "github.com/labstack/echo/v4",
	"openapi3":     "github.com/getkin/kin-openapi/openapi3",
	"cobra":        "github.com/spf13/cobra",
	"grpc":         "google.golang.org/grpc",
	"credentials":  "google.golang.org/grpc/credentials",
	"tls":          "crypto/tls",
	"otel":         "go.opentelemetry.io/otel",
	"baggage":      "go.opentelemetry.io/otel/baggage",
	"prometheus":   "go.opentelemetry.io/otel/exporters/prometheus",
	"sdkmetric":    "go.opentelemetry.io/otel/sdk/metric",
	"sdktrace":     "go.opentelemetry.io/otel/sdk/trace",
}

// snippetPackage is what one chapter's blocks compile to.
type snippetPackage struct {
	path    string
	fset    *token.FileSet
	files   []*ast.File
	imports []string
}

// fence matches a fenced block's opening line and its info string.
var fence = regexp.MustCompile("(?m)^```(\\S*)[^\n]*\n")

// marker matches the HTML comment right before a fence: go:harness or
// go:fragment, and its text.
var marker = regexp.MustCompile(`(?s)^<!--\s*go:(harness|fragment)\b(.*?)-->\s*$`)

// snippetPackages returns the packages of the chapter named name.
func snippetPackages(t *testing.T, name, text string) []*snippetPackage {
	t.Helper()
	base := strings.TrimSuffix(filepath.Base(name), ".md")
	chapter := &snippetPackage{path: "snippets/" + base, fset: token.NewFileSet()}
	pkgs := []*snippetPackage{chapter}
	for pos := 0; ; {
		m := fence.FindStringSubmatchIndex(text[pos:])
		if m == nil {
			break
		}
		info := text[pos+m[2] : pos+m[3]]
		start, bodyAt := pos+m[0], pos+m[1]
		end := strings.Index(text[bodyAt:], "\n```")
		if end < 0 {
			t.Fatalf("%s: unclosed block at line %d", name, lineAt(text, start))
		}
		body := text[bodyAt : bodyAt+end+1]
		pos = bodyAt + end + len("\n```")
		if info != "go" {
			continue
		}
		var harness string
		harnessLine := 0
		at := max(strings.LastIndex(text[:start], "<!--"), 0)
		if mm := marker.FindStringSubmatchIndex(text[at:start]); mm != nil {
			if text[at+mm[2]:at+mm[3]] == "fragment" {
				continue
			}
			harness, harnessLine = text[at+mm[4]:at+mm[5]], lineAt(text, at+mm[4])
		}
		line := lineAt(text, bodyAt)
		if isWholeFile(body) {
			p := &snippetPackage{path: fmt.Sprintf("snippets/%s/line%d", base, line), fset: token.NewFileSet()}
			p.add(t, "//line "+name+":"+fmt.Sprint(line)+"\n"+body)
			pkgs = append(pkgs, p)
			continue
		}
		chapter.add(t, wrap(name, body, line, harness, harnessLine))
	}
	if len(chapter.files) == 0 {
		pkgs = pkgs[1:]
	}
	return pkgs
}

// isWholeFile reports whether a block is a Go file of its own.
func isWholeFile(body string) bool {
	for l := range strings.Lines(body) {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "//") {
			continue
		}
		return strings.HasPrefix(l, "package ")
	}
	return false
}

// wrap returns the source, without package clause and imports, of a block
// that starts at line of the chapter name, in its harness (from the
// chapter's harnessLine) if any.
func wrap(name, body string, line int, harness string, harnessLine int) string {
	block := "//line " + name + ":" + fmt.Sprint(line) + "\n" + body
	if _, err := parser.ParseFile(token.NewFileSet(), "", "package p\n"+body, parser.SkipObjectResolution); err != nil {
		block = "func _() {\n" + block + "}\n"
	}
	if harness == "" {
		return block
	}
	var out strings.Builder
	fmt.Fprintf(&out, "//line %s:%d\n", name, harnessLine)
	placed := false
	for i, l := range slices.Collect(strings.Lines(harness)) {
		if strings.TrimSpace(l) == "// block" && !placed {
			out.WriteString("//line " + name + ":" + fmt.Sprint(line) + "\n" + body)
			fmt.Fprintf(&out, "//line %s:%d\n", name, harnessLine+i+1)
			placed = true
			continue
		}
		out.WriteString(l)
	}
	if !placed {
		out.WriteString("\n" + block)
	}
	return out.String()
}

// add parses src (a file without its package clause and imports, or a
// whole file), adding the imports it needs, as a file of p.
func (p *snippetPackage) add(t *testing.T, src string) {
	t.Helper()
	whole := isWholeFile(src)
	if !whole {
		src = "package " + filepath.Base(p.path) + "\n" + src
	}
	// No file name: the //line directives give the chapter's, relative to
	// the module's root.
	f, err := parser.ParseFile(p.fset, "", src, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		t.Errorf("%v", err)
		return
	}
	if whole {
		for _, is := range f.Imports {
			p.imports = append(p.imports, strings.Trim(is.Path.Value, `"`))
		}
		p.files = append(p.files, f)
		return
	}
	used := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if s, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := s.X.(*ast.Ident); ok && packageNames[id.Name] != "" {
				used[id.Name] = true
			}
		}
		return true
	})
	var imports strings.Builder
	for n := range used {
		fmt.Fprintf(&imports, "import %s %q\n", n, packageNames[n])
		p.imports = append(p.imports, packageNames[n])
	}
	head, rest, _ := strings.Cut(src, "\n")
	if f, err = parser.ParseFile(p.fset, "", head+"\n"+imports.String()+rest, parser.ParseComments|parser.SkipObjectResolution); err != nil {
		t.Errorf("%v", err)
		return
	}
	p.files = append(p.files, f)
}

// exportData builds the packages the snippets import (go list -export)
// and returns the file of each one's export data, dependencies included.
func exportData(t *testing.T, pkgs []*snippetPackage) map[string]string {
	t.Helper()
	var paths []string
	for _, p := range pkgs {
		paths = append(paths, p.imports...)
	}
	slices.Sort(paths)
	paths = slices.Compact(paths)
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go is not installed: %v", err)
	}
	cmd := exec.Command(goBin, append([]string{"list", "-export", "-deps", "-f", "{{.ImportPath}}={{.Export}}"}, paths...)...)
	cmd.Dir = ".."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -export: %v\n%s", err, stderr.String())
	}
	exports := map[string]string{}
	for l := range strings.Lines(string(out)) {
		if path, file, ok := strings.Cut(strings.TrimSpace(l), "="); ok && file != "" {
			exports[path] = file
		}
	}
	return exports
}

// lineAt returns the line number of the byte offset off of text.
func lineAt(text string, off int) int { return strings.Count(text[:off], "\n") + 1 }

// TestReadmeServiceRuns builds the README's minimal service as a user who
// pastes it would, and runs it: without a config.json it answers; with one
// naming an operation it does not have, it answers and warns on stderr.
func TestReadmeServiceRuns(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	m := fence.FindStringSubmatchIndex(text[strings.Index(text, "## A minimal service"):])
	if m == nil {
		t.Fatal("README.md: no block under A minimal service")
	}
	at := strings.Index(text, "## A minimal service") + m[1]
	src := text[at : at+strings.Index(text[at:], "\n```")+1]
	dir := t.TempDir()
	// The program, placed in the module by an overlay: it builds against
	// this checkout, and nothing is written into it.
	mainGo, overlay := filepath.Join(dir, "main.go"), filepath.Join(dir, "overlay.json")
	virtual, err := filepath.Abs("internal/readme/main.go")
	if err != nil {
		t.Fatal(err)
	}
	ov := fmt.Sprintf(`{"Replace":{%q:%q}}`, virtual, mainGo)
	if err := errors.Join(os.WriteFile(mainGo, []byte(src), 0o600), os.WriteFile(overlay, []byte(ov), 0o600)); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "service")
	build := exec.Command("go", "build", "-overlay", overlay, "-o", bin, "./internal/readme")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	run := func() (string, string) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(bin)
		cmd.Dir, cmd.Stdout, cmd.Stderr = dir, &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("service: %v; stderr %q", err, stderr.String())
		}
		return stdout.String(), stderr.String()
	}
	if out, _ := run(); out != "hello, Ada <nil>\n" {
		t.Errorf("without config.json, stdout = %q, want hello, Ada <nil>", out)
	}
	config := `{"Sundial":{"Kernel":{"Resilience":{"Operations":{"greetings.sya":{"PermitLimit":2}}}}}}`
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	out, stderr := run()
	if out != "hello, Ada <nil>\n" || !strings.Contains(stderr, "WARN") || !strings.Contains(stderr, "greetings.sya") {
		t.Errorf("with a config.json naming greetings.sya: stdout %q, stderr %q; want the answer and a warning", out, stderr)
	}
}
