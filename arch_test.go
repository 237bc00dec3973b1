package remat_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/remat-dev/remat"

// layers is the flow of the tree, from the bottom up; a package may import
// packages of lower layers and, within one family (graph and graph/native,
// sim and sim/alloc), its own family. Reasons, as in the Go compiler's
// pass-ordering table:
//   - config knows settings only, so every package can read them;
//     internal/dedup is a helper over dense IDs and internal/gzfile opens
//     input files that may be gzip-compressed, and neither knows anything
//     else;
//   - graph is the IR: it knows no plans, strategies or memory policies;
//   - sim replays plans of any strategy, so it knows none;
//   - the algorithm families are independent of each other, so a change to
//     one cannot break another and the strategy table composes them;
//   - strategy wires algorithms to options and renders nothing;
//   - report renders strategies' results and holds no algorithm;
//   - the facade, the CLI, tools, examples and the rest of internal/ (the
//     module's own code generators, e.g. misusegen) sit on top.
//
// A package under internal/ is a family of its own (internal/dedup), placed
// by its own entry or else by the "internal" entry.
var layers = [][]string{
	{"config", "internal/dedup", "internal/gzfile"},
	{"graph"},
	{"sim"},
	{"mirror", "sublinear", "chain", "dtr"},
	{"strategy"},
	{"report"},
	{""}, // the facade, package remat
	{"cmd", "tools", "examples", "internal", "python"},
}

// family is a package's top directory ("" for the module root), or its top
// two under internal/.
func family(pkg string) string {
	f, rest, _ := strings.Cut(pkg, "/")
	if f == "internal" && rest != "" {
		sub, _, _ := strings.Cut(rest, "/")
		return f + "/" + sub
	}
	return f
}

func layerOf(t *testing.T, pkg string) int {
	fam := family(pkg)
	top, _, _ := strings.Cut(fam, "/")
	for _, name := range []string{fam, top} {
		for i, l := range layers {
			for _, f := range l {
				if f == name {
					return i
				}
			}
		}
	}
	t.Fatalf("package %q is in no layer of arch_test.go: add its family to the table with a reason", pkg)
	return -1
}

// imports maps each package directory of the module (relative, "" for the
// root) to the packages its non-test files import.
func imports(t *testing.T) map[string][]string {
	out := map[string][]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != "." && (n == "testdata" || strings.HasPrefix(n, ".") || n == "python") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(path))
		if dir == "." {
			dir = ""
		}
		for _, im := range f.Imports {
			out[dir] = append(out[dir], strings.Trim(im.Path.Value, `"`))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestImportsFollowTheFlow(t *testing.T) {
	for pkg, ims := range imports(t) {
		from := layerOf(t, pkg)
		for _, im := range ims {
			if !strings.HasPrefix(im, module+"/") && im != module {
				continue
			}
			dep := strings.TrimPrefix(strings.TrimPrefix(im, module), "/")
			to := layerOf(t, dep)
			switch {
			case family(dep) == family(pkg) && dep != "":
				// within a family (graph -> graph/native's parent, sim -> sim/alloc)
			case to == from && strings.HasPrefix(pkg, "internal/") && strings.HasPrefix(dep, "internal/"):
				// between the top layer's internal packages (misusegen -> modroot)
			case to < from:
			default:
				t.Errorf("%s imports %s: against the flow (layer %d -> %d)", orRoot(pkg), orRoot(dep), from, to)
			}
		}
	}
}

func orRoot(p string) string {
	if p == "" {
		return "remat (root)"
	}
	return p
}

// Only the CLI draws plots, so no library user pulls in the plotting
// modules.
func TestOnlyTheCLIPlots(t *testing.T) {
	var users []string
	for pkg, ims := range imports(t) {
		for _, im := range ims {
			if strings.HasPrefix(im, "gonum.org/v1/plot") && pkg != "cmd/sim" {
				users = append(users, pkg)
			}
		}
	}
	sort.Strings(users)
	if len(users) > 0 {
		t.Errorf("only cmd/sim may import gonum.org/v1/plot; also: %v", users)
	}
}

// Every library package says in a doc.go what it is for and what it is
// not (go doc shows it first).
func TestEveryPackageHasDocGo(t *testing.T) {
	fset := token.NewFileSet()
	for pkg := range imports(t) {
		dir := pkg
		if dir == "" {
			dir = "."
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, "doc.go"), nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			matches, _ := filepath.Glob(filepath.Join(dir, "*.go"))
			isMain := false
			for _, m := range matches {
				if g, err := parser.ParseFile(fset, m, nil, parser.PackageClauseOnly); err == nil && g.Name.Name == "main" {
					isMain = true
				}
			}
			if !isMain {
				t.Errorf("%s has no doc.go", orRoot(pkg))
			}
			continue
		}
		if f.Doc == nil || !strings.HasPrefix(f.Doc.Text(), "Package "+f.Name.Name+" ") {
			t.Errorf("%s/doc.go: the comment must start with \"Package %s \"", dir, f.Name.Name)
		}
	}
}
