package remat_test

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/remat-dev/remat/sim/alloc"

	"github.com/remat-dev/remat/config"
	"github.com/remat-dev/remat/dtr"
	"github.com/remat-dev/remat/graph"
	"github.com/remat-dev/remat/graph/dtrlog"
	"github.com/remat-dev/remat/graph/models"
	"github.com/remat-dev/remat/sim"
	"github.com/remat-dev/remat/strategy"
)

// misuseCase is one call of an exported entry point with zero ("zero"),
// empty ("empty"), foreign ("foreign") arguments or a nil receiver ("nil"):
// nil or empty graphs, plans, traces, chains and settings, zero options,
// negative sizes, and plans, chains, schedules and IDs of another graph.
//
// wantErr says the call must return an error: a nil graph, trace, plan or
// chain, or a plan, chain or ID of another graph, is never accepted.
type misuseCase struct {
	name, args string
	wantErr    bool
	call       func() error
}

// TestAPIMisuse calls every exported function and method of the library
// packages with zero, empty and foreign arguments (misuse_gen_test.go,
// written by internal/misusegen) and the hand-written cases below: none may
// panic (an error is the expected answer), none may hang, and those marked
// wantErr must return an error.
func TestAPIMisuse(t *testing.T) {
	for _, c := range append(append([]misuseCase(nil), misuseCases...), handMisuseCases()...) {
		t.Run(c.name+"/"+c.args, func(t *testing.T) {
			type outcome struct {
				panicked any
				err      error
			}
			done := make(chan outcome, 1)
			go func() {
				var err error
				defer func() {
					if r := recover(); r != nil {
						done <- outcome{panicked: fmt.Sprintf("%v\n%s", r, debug.Stack())}
						return
					}
					done <- outcome{err: err}
				}()
				err = c.call()
			}()
			select {
			case o := <-done:
				switch {
				case o.panicked != nil:
					t.Errorf("%s(%s arguments) panics: %v", c.name, c.args, o.panicked)
				case c.wantErr && o.err == nil:
					t.Errorf("%s(%s arguments) returns no error", c.name, c.args)
				}
			case <-time.After(20 * time.Second):
				t.Errorf("%s(%s arguments) did not return within 20 s", c.name, c.args)
			}
		})
	}
}

// handMisuseCases are the misuses the generator cannot spell: every
// strategy of the table on nil, empty and zero-option inputs, plans whose
// steps name IDs another graph has, and a DTR host driving a Machine of
// another program.
func handMisuseCases() []misuseCase {
	ctx := context.Background()
	var cs []misuseCase
	for _, s := range strategy.All() {
		cs = append(cs,
			misuseCase{"strategy.All()[" + s.Name + "].Plan", "zero", true, func() error { _, err := s.Plan(ctx, nil, strategy.Options{}); return err }},
			misuseCase{"strategy.All()[" + s.Name + "].Plan", "empty", false, func() error {
				_, err := s.Plan(ctx, new(graph.Graph), strategy.Options{})
				return err
			}},
			misuseCase{"strategy.All()[" + s.Name + "].Plan", "foreign", false, func() error {
				// Options made from settings, a tiny budget, a small graph.
				o, err := strategy.OptionsFrom(config.Defaults())
				if err != nil {
					return err
				}
				o.Budget = 1
				_, err = s.Plan(ctx, misuseGraph(), o)
				return err
			}},
		)
	}
	badSteps := []sim.Step{
		sim.ComputeStep(-5), sim.ComputeStep(1 << 30), sim.FreeStep(-1), sim.FreeStep(1 << 30),
		sim.SwapOutStep(1 << 30), sim.SwapInStep(-7), {Kind: 99, Op: 1 << 30, Tensor: 1 << 30},
	}
	for i, st := range badSteps {
		p := &sim.Plan{Strategy: "foreign", Steps: []sim.Step{st}}
		cs = append(cs,
			misuseCase{fmt.Sprintf("sim.Simulate(step %d)", i), "foreign", true, func() error {
				_, err := sim.Simulate(misuseGraph(), p, sim.Options{})
				return err
			}},
			misuseCase{fmt.Sprintf("sim.CheckPlan(step %d)", i), "foreign", true, func() error { return sim.CheckPlan(misuseGraph(), p) }},
		)
	}
	cs = append(cs,
		misuseCase{"sim.Machine.Replay(bigger graph's plan, caching)", "foreign", true, func() error {
			m, err := sim.NewMachine(misuseGraph(), sim.Options{Allocator: alloc.NewCaching(1 << 30), Capacity: 1 << 30})
			if err != nil {
				panic(err)
			}
			err = m.Replay(misuseForeignPlan())
			_ = m.Result()
			return err
		}},
		misuseCase{"dtr.Replay(host on another program's Machine)", "foreign", true, func() error {
			m, err := sim.NewMachine(misuseBigGraph(), sim.Options{})
			if err != nil {
				panic(err)
			}
			_, err = dtr.Replay(ctx, misuseTrace(), dtr.DefaultConfig(), &dtr.SimHost{M: m})
			return err
		}},
		misuseCase{"sim.PlanFromSchedule(bigger graph's schedule)", "foreign", true, func() error {
			_, err := sim.PlanFromSchedule(misuseGraph(), "foreign", misuseForeignSchedule())
			return err
		}},
	)
	return cs
}

// misuseGraph is a small valid training graph.
func misuseGraph() *graph.Graph {
	g, err := models.Build("mlp", models.Options{Batch: 2, Depth: 1, Width: 8, Classes: 4})
	if err != nil {
		panic(err)
	}
	return g
}

// misuseBigGraph is a valid graph with more ops and tensors than
// misuseGraph: what it yields is foreign to misuseGraph.
func misuseBigGraph() *graph.Graph {
	g, err := models.Build("mlp", models.Options{Batch: 2, Depth: 6, Width: 8, Classes: 4})
	if err != nil {
		panic(err)
	}
	return g
}

// misuseForeignPlan is the default plan of the bigger graph.
func misuseForeignPlan() *sim.Plan { return sim.DefaultPlan(misuseBigGraph()) }

// misuseForeignOp is the last op of the bigger graph (its IDs are out of
// misuseGraph's range).
func misuseForeignOp() *graph.Op {
	g := misuseBigGraph()
	return &g.Ops[len(g.Ops)-1]
}

// misuseForeignSchedule is the bigger graph's op order.
func misuseForeignSchedule() []graph.OpID {
	ids := make([]graph.OpID, misuseBigGraph().NumOps())
	for i := range ids {
		ids[i] = graph.OpID(i)
	}
	return ids
}

// misuseForeignMask is a per-op mask sized for the bigger graph.
func misuseForeignMask() []bool {
	m := make([]bool, misuseBigGraph().NumOps())
	for i := range m {
		m[i] = i%2 == 0
	}
	return m
}

// misuseTrace is a small real DTR trace.
func misuseTrace() *dtrlog.Trace {
	f, err := os.Open(filepath.Join("graph", "dtrlog", "testdata", "small.log"))
	if err != nil {
		panic(err)
	}
	defer f.Close()
	tr, err := dtrlog.Compile(f)
	if err != nil {
		panic(err)
	}
	return tr
}

// misuseVal drops the error of a constructor: a nil value is a misuse too.
func misuseVal[T any](v T, _ error) T { return v }

// misuseSkipDirs are the top-level directories without library packages
// (internal/misusegen skips the same ones).
var misuseSkipDirs = map[string]bool{"cmd": true, "tools": true, "examples": true, "internal": true, "python": true}

// misusePackages walks the module as internal/misusegen does: every
// directory with a non-main package, outside misuseSkipDirs, testdata and
// hidden directories.
func misusePackages(t *testing.T) []string {
	var dirs []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		name := d.Name()
		if path != "." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor" ||
			(!strings.Contains(path, string(filepath.Separator)) && misuseSkipDirs[path])) {
			return filepath.SkipDir
		}
		if path != "." {
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir
			}
		}
		dirs = append(dirs, path)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

// TestMisuseTableIsComplete fails when an exported entry point of a library
// package has no case: run `go generate .` to add it.
func TestMisuseTableIsComplete(t *testing.T) {
	have := map[string]bool{}
	for _, c := range misuseCases {
		have[c.name] = true
	}
	fset := token.NewFileSet()
	var missing []string
	pkgs := 0
	for _, dir := range misusePackages(t) {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		library := false
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") || strings.HasSuffix(f, ".pb.go") {
				continue
			}
			af, err := parser.ParseFile(fset, f, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			pkg := af.Name.Name
			if pkg == "main" {
				continue
			}
			library = true
			for _, d := range af.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || !fd.Name.IsExported() || fd.Type.TypeParams != nil {
					continue
				}
				name := pkg + "." + fd.Name.Name
				if fd.Recv != nil {
					recv := receiverType(fd.Recv.List[0].Type)
					if recv == "" || !ast.IsExported(recv) {
						continue
					}
					name = pkg + "." + recv + "." + fd.Name.Name
				}
				if !have[name] {
					missing = append(missing, name)
				}
			}
		}
		if library {
			pkgs++
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("exported entry points without a misuse case (run `go generate .`): %s", strings.Join(missing, ", "))
	}
	if pkgs < 10 {
		t.Errorf("found %d library packages, expected the module's (config, graph, sim, ...): is the walk broken?", pkgs)
	}
}

func receiverType(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return receiverType(t.X)
	case *ast.Ident:
		return t.Name
	}
	return "" // methods of generic types are not in the table

}
