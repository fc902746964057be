package docs

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// The figures below measure the library's surface and its doc comments with
// go/parser alone, so that a change can state them before and after by one
// method. TestAPIFigures prints them; TestDocCommentStyle holds the style
// budget and reports a breach as a failure only when enforceDocStyle is true.

// Doc-comment budget: average words per sentence in a package, the share of
// sentences over longSentence words in the library, and the longest doc
// comment other than a package doc.
const (
	maxWordsPerSentence = 16.0
	longSentence        = 40
	maxLongShare        = 0.02
	maxCommentLines     = 30
	// enforceDocStyle turns TestDocCommentStyle's reports into failures.
	enforceDocStyle = true
)

// srcPackage is one directory's non-test Go files.
type srcPackage struct {
	dir   string // slash path relative to the repository root
	name  string
	fset  *token.FileSet
	files []*ast.File
}

// library reports whether a package directory is library code: not a
// sample, not internal, not a test kit such as pipelinetest.
func library(dir string) bool {
	for _, part := range strings.Split(dir, "/") {
		if part == "internal" || strings.HasSuffix(part, "test") {
			return false
		}
	}
	return !inSamples(dir)
}

// inSamples reports whether a package directory lies under samples.
func inSamples(dir string) bool {
	return dir == "samples" || strings.HasPrefix(dir, "samples/")
}

// loadPackages parses every non-test Go file below root, by directory.
func loadPackages(t testing.TB, root string) []*srcPackage {
	t.Helper()
	byDir := map[string]*srcPackage{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		rel = filepath.ToSlash(rel)
		p := byDir[rel]
		if p == nil {
			p = &srcPackage{dir: rel, name: f.Name.Name, fset: fset}
			byDir[rel] = p
		}
		p.files = append(p.files, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	pkgs := make([]*srcPackage, 0, len(byDir))
	for _, p := range byDir {
		pkgs = append(pkgs, p)
	}
	sort.Slice(pkgs, func(i, j int) bool { return pkgs[i].dir < pkgs[j].dir })
	return pkgs
}

// receiverBase names the type a method's receiver is declared on.
func receiverBase(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return ""
	}
	x := fd.Recv.List[0].Type
	for {
		switch e := x.(type) {
		case *ast.StarExpr:
			x = e.X
		case *ast.IndexExpr:
			x = e.X
		case *ast.IndexListExpr:
			x = e.X
		case *ast.ParenExpr:
			x = e.X
		case *ast.Ident:
			return e.Name
		default:
			return ""
		}
	}
}

// surface is a package's exported API: its names, counted one by one.
type surface struct {
	names     []string // exported top-level names and exported methods of exported types
	ifaceMeth int      // exported methods of exported interfaces, counted apart
	types     int      // exported types
}

// exportedSurface lists a package's exported top-level names (funcs, types,
// vars, consts) and the exported methods declared on its exported types.
func exportedSurface(p *srcPackage) surface {
	var s surface
	for _, f := range p.files {
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				if d.Recv == nil {
					s.names = append(s.names, d.Name.Name)
				} else if base := receiverBase(d); ast.IsExported(base) {
					s.names = append(s.names, base+"."+d.Name.Name)
				}
			case *ast.GenDecl:
				s.addGenDecl(d)
			}
		}
	}
	sort.Strings(s.names)
	return s
}

// addGenDecl adds a declaration's exported types, vars and consts.
func (s *surface) addGenDecl(d *ast.GenDecl) {
	for _, spec := range d.Specs {
		switch sp := spec.(type) {
		case *ast.TypeSpec:
			if !sp.Name.IsExported() {
				continue
			}
			s.names = append(s.names, sp.Name.Name)
			s.types++
			if it, ok := sp.Type.(*ast.InterfaceType); ok {
				for _, m := range it.Methods.List {
					for _, n := range m.Names {
						if n.IsExported() {
							s.ifaceMeth++
						}
					}
				}
			}
		case *ast.ValueSpec:
			for _, n := range sp.Names {
				if n.IsExported() {
					s.names = append(s.names, n.Name)
				}
			}
		}
	}
}

// kernelShape counts the methods (all and exported) and the fields of
// kernel.Kernel.
func kernelShape(pkgs []*srcPackage) (methods, exported, fields int, names []string) {
	for _, p := range pkgs {
		if p.dir != "kernel" {
			continue
		}
		for _, f := range p.files {
			ast.Inspect(f, func(n ast.Node) bool {
				switch d := n.(type) {
				case *ast.FuncDecl:
					if receiverBase(d) == "Kernel" {
						methods++
						if d.Name.IsExported() {
							exported++
							names = append(names, d.Name.Name)
						}
					}
					return false
				case *ast.TypeSpec:
					if st, ok := d.Type.(*ast.StructType); ok && d.Name.Name == "Kernel" {
						for _, fl := range st.Fields.List {
							fields += max(1, len(fl.Names))
						}
					}
				}
				return true
			})
		}
	}
	sort.Strings(names)
	return methods, exported, fields, names
}

// docComment is one doc comment: a package doc, or the doc of a
// declaration, a spec, a struct field or an interface method.
type docComment struct {
	pkg     string
	where   string // file:line
	subject string
	lines   int
	pkgDoc  bool
	visible bool // go doc shows it: a package doc or the doc of an exported name
	group   *ast.CommentGroup
}

// docComments collects every doc comment of a package, exported or not.
func docComments(p *srcPackage) []docComment {
	var out []docComment
	add := func(cg *ast.CommentGroup, subject string, pkgDoc, visible bool) {
		if cg == nil || strings.TrimSpace(cg.Text()) == "" {
			return
		}
		start, end := p.fset.Position(cg.Pos()), p.fset.Position(cg.End())
		out = append(out, docComment{
			pkg:     p.dir,
			where:   fmt.Sprintf("%s:%d", filepath.ToSlash(start.Filename), start.Line),
			subject: subject,
			lines:   end.Line - start.Line + 1,
			pkgDoc:  pkgDoc,
			visible: visible,
			group:   cg,
		})
	}
	for _, f := range p.files {
		add(f.Doc, "package "+f.Name.Name, true, true)
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				name, vis := d.Name.Name, d.Name.IsExported()
				if base := receiverBase(d); base != "" {
					name, vis = base+"."+name, vis && ast.IsExported(base)
				}
				add(d.Doc, name, false, vis)
			case *ast.GenDecl:
				addGenDecl(d, add)
			}
		}
	}
	return out
}

// addGenDecl collects the doc comments of a type, var or const declaration,
// its specs, and the fields and methods of the types it declares.
func addGenDecl(d *ast.GenDecl, add func(*ast.CommentGroup, string, bool, bool)) {
	subject, anyExported := d.Tok.String(), false
	for _, spec := range d.Specs {
		switch sp := spec.(type) {
		case *ast.TypeSpec:
			vis := sp.Name.IsExported()
			anyExported = anyExported || vis
			if len(d.Specs) == 1 {
				subject = sp.Name.Name
			}
			add(sp.Doc, sp.Name.Name, false, vis)
			var fields *ast.FieldList
			switch tt := sp.Type.(type) {
			case *ast.StructType:
				fields = tt.Fields
			case *ast.InterfaceType:
				fields = tt.Methods
			}
			for _, fl := range fieldList(fields) {
				if len(fl.Names) > 0 {
					add(fl.Doc, sp.Name.Name+"."+fl.Names[0].Name, false,
						vis && fl.Names[0].IsExported())
				}
			}
		case *ast.ValueSpec:
			vis := false
			for _, n := range sp.Names {
				vis = vis || n.IsExported()
			}
			anyExported = anyExported || vis
			if len(d.Specs) == 1 {
				subject = sp.Names[0].Name
			}
			add(sp.Doc, sp.Names[0].Name, false, vis)
		}
	}
	add(d.Doc, subject, false, anyExported)
}

func fieldList(fl *ast.FieldList) []*ast.Field {
	if fl == nil {
		return nil
	}
	return fl.List
}

// abbreviations end in a period but do not end a sentence.
var abbreviations = strings.NewReplacer("e.g.", "eg", "i.e.", "ie", "etc.)", "etc)", "vs.", "vs")

// sentenceEnd is a period, question or exclamation mark, perhaps followed by
// a closing quote or bracket, then white space and a capital or a backquote:
// the start of the next sentence. A line break alone ends no sentence, so a
// heading or a list item without a period runs into what follows.
var sentenceEnd = regexp.MustCompile("[.!?][\"')\\]]*\\s+([A-Z`])")

// sentences splits a doc comment's prose into sentences and returns the
// word count of each. Code blocks (indented lines other than list items)
// are not prose.
func sentences(cg *ast.CommentGroup) []int {
	var prose []string
	for _, line := range strings.Split(cg.Text(), "\n") {
		s := strings.TrimSpace(line)
		if line != s && !strings.HasPrefix(s, "- ") && !strings.HasPrefix(s, "* ") {
			continue
		}
		prose = append(prose, s)
	}
	text := abbreviations.Replace(strings.Join(prose, "\n"))
	var counts []int
	for _, s := range strings.Split(sentenceEnd.ReplaceAllString(text, "\x00$1"), "\x00") {
		if n := len(strings.Fields(s)); n > 0 {
			counts = append(counts, n)
		}
	}
	return counts
}

// docStats sums the sentences of a set of doc comments.
type docStats struct {
	comments, sentences, words, long, over20, over30 int
}

func (d docStats) wordsPerSentence() float64 {
	if d.sentences == 0 {
		return 0
	}
	return float64(d.words) / float64(d.sentences)
}

func (d docStats) longShare() float64 {
	if d.sentences == 0 {
		return 0
	}
	return float64(d.long) / float64(d.sentences)
}

func (d *docStats) add(c docComment) {
	d.comments++
	for _, n := range sentences(c.group) {
		d.sentences++
		d.words += n
		if n > longSentence {
			d.long++
		}
	}
	if c.lines >= 20 {
		d.over20++
	}
	if c.lines > maxCommentLines && !c.pkgDoc {
		d.over30++
	}
}

// docScope is the set of packages whose doc comments the style budget
// covers: everything but samples (internal packages and test kits
// included, as their comments are read by the library's maintainers).
func docScope(dir string) bool { return !inSamples(dir) }

// docStyleViolations checks the doc-comment budget and returns one line per
// breach: a package above maxWordsPerSentence, a share of long sentences at
// or above maxLongShare, and every non-package doc comment over
// maxCommentLines lines. It reads every doc comment, exported or not, of
// every package but the samples: stricter than the figures' go doc view.
func docStyleViolations(pkgs []*srcPackage) []string {
	var out []string
	var all docStats
	for _, p := range pkgs {
		if !docScope(p.dir) {
			continue
		}
		var st docStats
		for _, c := range docComments(p) {
			st.add(c)
			all.add(c)
			if c.lines > maxCommentLines && !c.pkgDoc {
				out = append(out, fmt.Sprintf("%s: doc comment of %s is %d lines (max %d)",
					c.where, c.subject, c.lines, maxCommentLines))
			}
		}
		if w := st.wordsPerSentence(); w > maxWordsPerSentence {
			out = append(out, fmt.Sprintf("%s: %.1f words per sentence (max %.0f)",
				p.dir, w, maxWordsPerSentence))
		}
	}
	if s := all.longShare(); s >= maxLongShare {
		out = append(out, fmt.Sprintf("all packages: %.1f%% of %d sentences over %d words (max %.0f%%)",
			100*s, all.sentences, longSentence, 100*maxLongShare))
	}
	return out
}

// TestAPIFigures prints the surface and doc-comment figures: exported names
// per package and in total, kernel.Kernel's methods and fields, words per
// sentence per package, the share of long sentences and the longest doc
// comments. It asserts nothing; run it with -v.
func TestAPIFigures(t *testing.T) {
	pkgs := loadPackages(t, "..")
	total, totalIface, totalTypes := 0, 0, 0
	t.Log("exported names: top-level + exported methods of exported types; library only " +
		"(not internal/, test kits, samples)")
	for _, p := range pkgs {
		if !library(p.dir) {
			continue
		}
		s := exportedSurface(p)
		total += len(s.names)
		totalIface += s.ifaceMeth
		totalTypes += s.types
		t.Logf("  %-28s %4d  (+%d interface methods; %d types)", p.dir, len(s.names),
			s.ifaceMeth, s.types)
		if testing.Verbose() && (os.Getenv("APIFIGURES_NAMES") == "all" || p.dir == "pipeline") {
			t.Logf("    %s", strings.Join(s.names, " "))
		}
	}
	t.Logf("  %-28s %4d  (+%d interface methods; %d types)", "TOTAL", total, totalIface,
		totalTypes)

	m, e, f, names := kernelShape(pkgs)
	t.Logf("*kernel.Kernel: %d methods, %d exported, %d fields; exported: %s",
		m, e, f, strings.Join(names, " "))

	logDocFigures(t, pkgs)
	for _, v := range docStyleViolations(pkgs) {
		t.Log("style: " + v)
	}
}

// logDocFigures prints the doc-comment figures per package and overall,
// twice: over the comments go doc shows (package docs and the docs of
// exported names: the headline figure) and over every doc comment.
func logDocFigures(t *testing.T, pkgs []*srcPackage) {
	t.Helper()
	var visLib, visAll, visAdapters, all docStats
	var comments []docComment
	t.Log("doc comments, samples excluded: shown by go doc | all (exported or not)")
	t.Logf("  %-30s %5s %6s %10s | %5s %6s %10s %5s", "package", "sent", "w/sent", ">40w",
		"sent", "w/sent", ">40w", ">=20ln")
	for _, p := range pkgs {
		if !docScope(p.dir) {
			continue
		}
		var vis, st docStats
		for _, c := range docComments(p) {
			st.add(c)
			all.add(c)
			if c.visible {
				vis.add(c)
				visAll.add(c)
				if library(p.dir) {
					visLib.add(c)
					if strings.HasPrefix(p.dir, "adapters/") {
						visAdapters.add(c)
					}
				}
			}
			comments = append(comments, c)
		}
		t.Logf("  %-30s %s | %s %5d", p.dir, vis.row(), st.row(), st.over20)
	}
	t.Logf("  %-30s %s | %s %5d", "TOTAL (incl. internal, kits)", visAll.row(), all.row(),
		all.over20)
	t.Logf("  %-30s %s   (headline: library packages, go doc's view)",
		"LIBRARY", visLib.row())
	t.Logf("  %-30s %s", "LIBRARY adapters/*", visAdapters.row())
	t.Logf("  doc comments of 20+ lines: %d; over %d lines, not a package doc: %d",
		all.over20, maxCommentLines, all.over30)
	sort.SliceStable(comments, func(i, j int) bool { return comments[i].lines > comments[j].lines })
	t.Log("longest doc comments")
	for _, c := range comments[:min(12, len(comments))] {
		mark := ""
		if c.pkgDoc {
			mark = " [package doc]"
		}
		t.Logf("  %3d lines  %-34s %s%s", c.lines, c.subject, c.where, mark)
	}
}

// row formats sentences, words per sentence, the long share and count.
func (d docStats) row() string {
	return fmt.Sprintf("%5d %6.1f %5.1f%% %3d", d.sentences, d.wordsPerSentence(),
		100*d.longShare(), d.long)
}

// TestDocCommentStyle holds the doc comments to the budget. Until the
// comments are rewritten it logs each breach; set enforceDocStyle to make
// them failures.
func TestDocCommentStyle(t *testing.T) {
	report := t.Logf
	if enforceDocStyle {
		report = t.Errorf
	}
	for _, v := range docStyleViolations(loadPackages(t, "..")) {
		report("%s", v)
	}
}
