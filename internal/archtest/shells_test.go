package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The rule "every decision in a core the simulator steps" (issue 31),
// as two checks:
//
//  1. The simulator steps every core: each package in cores is a
//     dependency of package sim (go list -deps ./sim), unless its row
//     says why not (notSimulated) — and then it must not be one, so an
//     exemption cannot outlive its reason.
//  2. A registered shell holds no decision: its files import its core's
//     package; none of them declares a struct field named as one of the
//     state names registered for it (the state its core owns: the step
//     rule's training/queue/pending, the weight-sync agent's
//     want/have/failed/gone, a group's failed, the publisher's router
//     minimum and failed engines), and none compares (==,
//     !=, <, <=, >, >=) a selector named as one of its compared names
//     (the inputs its core decides on: a TrainBatch's Step, an episode's
//     err, an engine status's Serving). A shell may carry those values (pass them to the core, print
//     them); keeping or comparing them is deciding.
//
// A new shell over a core gets a row in shells, with the names of the
// state its core owns and the inputs it decides on.

// shell is one registered shell: files in dir driving the core at core.
type shell struct {
	dir   string
	files []string
	core  string   // the core's package, relative to the module root
	state []string // struct fields only the core may hold
	// compared are selectors only the core may compare.
	compared []string
}

var shells = []shell{
	{dir: "actors/trainer", files: []string{"actor.go", "run.go"}, core: "actors/trainer/steprule",
		state: []string{"training", "queue", "pending"}, compared: []string{"Step"}},
	// The trainer's fetch of a referenced group: how long to wait after a
	// failed try and when to give up are the fetch rule's (After); the
	// source keeps no deadline or window of its own.
	{dir: "actors/trainer", files: []string{"batchsource.go"}, core: "actors/trainer/fetchrule",
		state: []string{"deadline", "window", "tries"}, compared: []string{"RetryFor", "Elapsed", "Wait", "Tries"}},
	{dir: "cluster/weightsync", files: []string{"agent.go"}, core: "cluster/weightsync/targets",
		state: []string{"want", "have", "failed", "gone"}, compared: []string{"want", "have", "failed", "gone"}},
	{dir: "actors/rollout", files: []string{"actor.go"}, core: "actors/rollout/outcome",
		state: []string{"failed", "stage"}, compared: []string{"err"}},
	{dir: "cluster/agent", files: []string{"contend.go"}, core: "cluster/term",
		state: []string{"phase", "holder"}, compared: []string{"Token", "phase"}},
	// The lease elector: whether it leads, until when, at which revision
	// it renews, whose key a refused write found and when to report a
	// change are the contender core's (Due, Taken, Refused, Changed).
	{dir: "cluster/lease", files: []string{"elector.go"}, core: "cluster/lease/contender",
		state:    []string{"leader", "token", "rev", "until", "confirming", "reported", "last"},
		compared: []string{"Leader", "Token", "Revision", "Instance", "Until"}},
	// The rank host: which term's requests it serves and which hosted
	// groups end are the fence rule's (Observe, Register, Departed); the
	// Host keeps the ranks of the groups the rule holds, never a token or
	// a group's owner, and compares no token.
	{dir: "cluster/rankhost", files: []string{"host.go"}, core: "cluster/rankhost/fence",
		state: []string{"token", "owner", "newest"}, compared: []string{"Token", "Owner"}},
	// The publisher shell: when the router's minimum rises and how a
	// publish settles are the tracker's (its Ready).
	{dir: "actors/publisher", files: []string{"shell.go"}, core: "actors/publisher/tracker",
		state:    []string{"routerMin", "failed", "awaiting"},
		compared: []string{"Serving", "Fetching", "Routable", "routerMin", "failed"}},
}

// simViolations lists the cores that break check 1 given sim's
// dependencies (module-relative paths).
func simViolations(cs []core, simDeps map[string]bool) []string {
	var bad []string
	for _, c := range cs {
		switch {
		case c.notSimulated == "" && !simDeps[c.dir]:
			bad = append(bad, c.dir+": a core the simulator does not step (sim does not import it); step it in sim, or say why not in its row")
		case c.notSimulated != "" && simDeps[c.dir]:
			bad = append(bad, c.dir+": marked not simulated, but sim imports it: drop the exemption")
		}
	}
	return bad
}

// shellViolations lists how the parsed files of shell s break check 2.
func shellViolations(s shell, files map[string]*ast.File) []string {
	var bad []string
	imported := false
	for name, f := range files {
		for _, is := range f.Imports {
			if p, _ := strconv.Unquote(is.Path.Value); p == module+"/"+s.core {
				imported = true
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch v := n.(type) {
			case *ast.StructType:
				for _, fl := range v.Fields.List {
					for _, id := range fl.Names {
						if slices.Contains(s.state, id.Name) {
							bad = append(bad, name+": struct field "+id.Name+" holds state the core "+s.core+" owns")
						}
					}
				}
			case *ast.BinaryExpr:
				if !comparison(v.Op) {
					return true
				}
				for _, side := range []ast.Expr{v.X, v.Y} {
					if sel, ok := ast.Unparen(side).(*ast.SelectorExpr); ok && slices.Contains(s.compared, sel.Sel.Name) {
						bad = append(bad, name+": compares ."+sel.Sel.Name+" ("+v.Op.String()+"): a decision the core "+s.core+" owns")
					}
				}
			}
			return true
		})
	}
	if !imported {
		bad = append(bad, s.dir+": "+strings.Join(s.files, ", ")+" do not import the core "+s.core)
	}
	slices.Sort(bad)
	return bad
}

func comparison(op token.Token) bool {
	switch op {
	case token.EQL, token.NEQ, token.LSS, token.LEQ, token.GTR, token.GEQ:
		return true
	}
	return false
}

func parseFiles(t *testing.T, dir string, names []string) map[string]*ast.File {
	t.Helper()
	fset := token.NewFileSet()
	out := map[string]*ast.File{}
	for _, n := range names {
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		out[n] = f
	}
	return out
}

// TestSimStepsEveryCore is check 1.
func TestSimStepsEveryCore(t *testing.T) {
	rootDir := root(t)
	deps := map[string]bool{}
	for _, p := range strings.Fields(goList(t, rootDir, "-deps", "./sim")) {
		if rel, ok := strings.CutPrefix(p, module+"/"); ok {
			deps[rel] = true
		}
	}
	for _, v := range simViolations(cores, deps) {
		t.Error(v)
	}
}

// TestShellsHoldNoDecision is check 2 over the registered shells.
func TestShellsHoldNoDecision(t *testing.T) {
	rootDir := root(t)
	for _, s := range shells {
		t.Run(s.dir, func(t *testing.T) {
			for _, v := range shellViolations(s, parseFiles(t, filepath.Join(rootDir, s.dir), s.files)) {
				t.Error(v)
			}
		})
	}
}

// TestRuleCatchesViolations: both checks fail on a synthetic violation —
// the trainer's step rule as actor.go held it before issue 31, an agent
// that keeps want/have itself, the lease elector as it was before its
// core moved out, the publisher shell's router minimum and publish outcome as shell.go held them, a shell that no longer imports its core,
// a core the simulator dropped and an exemption the simulator outgrew.
func TestRuleCatchesViolations(t *testing.T) {
	t.Run("sim", func(t *testing.T) {
		cs := []core{{dir: "a/stepped"}, {dir: "a/dropped"}, {dir: "a/exempt", notSimulated: "why"}, {dir: "a/outgrown", notSimulated: "why"}}
		got := simViolations(cs, map[string]bool{"a/stepped": true, "a/outgrown": true})
		if len(got) != 2 || !strings.HasPrefix(got[0], "a/dropped: a core the simulator does not step") ||
			!strings.HasPrefix(got[1], "a/outgrown: marked not simulated, but sim imports it") {
			t.Errorf("violations %q; want a/dropped and a/outgrown", got)
		}
	})
	dir := t.TempDir()
	src := map[string]string{
		// actors/trainer/actor.go's step() before the step rule moved out.
		"oldtrainer.go": `package trainer
import "github.com/asyncrl/asyncrl/actors/trainer/steprule"
var _ steprule.Core
func (a *Actor) step(tb TrainBatch) error {
	cur := a.version()
	if tb.Step <= cur {
		return a.announce(tb.Step, cur)
	}
	if (tb.Step) != cur+1 {
		return errFuture
	}
	return a.train(tb)
}`,
		"oldagent.go": `package weightsync
import "github.com/asyncrl/asyncrl/cluster/weightsync/targets"
var _ targets.State
type Agent struct {
	want, have int64
}`,
		// actors/publisher/shell.go's two decisions before they moved
		// into the tracker (raiseMinLocked, settledLocked).
		"oldpublisher.go": `package publisher
import "github.com/asyncrl/asyncrl/actors/publisher/tracker"
type Shell struct {
	tr        *tracker.Tracker
	failed    map[string]int64
	routerMin int64
}
func (s *Shell) raiseMinLocked() bool {
	if m := s.tr.MinRoutable(); m > s.routerMin && len(s.tr.RoutableEngines()) > 0 {
		s.routerMin = m
		return true
	}
	return false
}
func (s *Shell) settledLocked(version int64) (bool, error) {
	for _, st := range s.tr.Engines() {
		if st.Serving >= version {
			return true, nil
		}
	}
	return false, nil
}`,
		// cluster/lease/elector.go before its core moved out: it kept the
		// leadership it last reported and decoded the Create's token.
		"oldelector.go": `package lease
import "github.com/asyncrl/asyncrl/cluster/lease/contender"
type Elector struct {
	core *contender.Core
	last bool
}
func (e *Elector) holder(h Holding) Holding {
	if h.Token == 0 {
		h.Token = h.Revision
	}
	return h
}`,
		"nocore.go": `package rollout
func (a *Actor) fine(tb TrainBatch) int64 { return tb.Step }`,
		"clean.go": `package trainer
import "github.com/asyncrl/asyncrl/actors/trainer/steprule"
func (a *Actor) do(r *steprule.Core, tb TrainBatch) { r.Step(now, steprule.Received{Batch: tb}); log(tb.Step) }`,
	}
	for n, s := range src {
		writeFile(t, filepath.Join(dir, n), s)
	}
	for _, tc := range []struct {
		s    shell
		want []string
	}{
		{shell{dir: "t", files: []string{"oldtrainer.go"}, core: "actors/trainer/steprule", compared: []string{"Step"}},
			[]string{"oldtrainer.go: compares .Step (!=): a decision the core actors/trainer/steprule owns",
				"oldtrainer.go: compares .Step (<=): a decision the core actors/trainer/steprule owns"}},
		{shell{dir: "w", files: []string{"oldagent.go"}, core: "cluster/weightsync/targets", state: []string{"want", "have"}},
			[]string{"oldagent.go: struct field have holds state the core cluster/weightsync/targets owns",
				"oldagent.go: struct field want holds state the core cluster/weightsync/targets owns"}},
		{shell{dir: "p", files: []string{"oldpublisher.go"}, core: "actors/publisher/tracker",
			state: []string{"routerMin", "failed"}, compared: []string{"Serving", "routerMin"}},
			[]string{"oldpublisher.go: compares .Serving (>=): a decision the core actors/publisher/tracker owns",
				"oldpublisher.go: compares .routerMin (>): a decision the core actors/publisher/tracker owns",
				"oldpublisher.go: struct field failed holds state the core actors/publisher/tracker owns",
				"oldpublisher.go: struct field routerMin holds state the core actors/publisher/tracker owns"}},
		{shell{dir: "l", files: []string{"oldelector.go"}, core: "cluster/lease/contender", state: []string{"last"}, compared: []string{"Token"}},
			[]string{"oldelector.go: compares .Token (==): a decision the core cluster/lease/contender owns",
				"oldelector.go: struct field last holds state the core cluster/lease/contender owns"}},
		{shell{dir: "r", files: []string{"nocore.go"}, core: "actors/rollout/outcome", compared: []string{"err"}},
			[]string{"r: nocore.go do not import the core actors/rollout/outcome"}},
		{shell{dir: "c", files: []string{"clean.go"}, core: "actors/trainer/steprule", state: []string{"queue"}, compared: []string{"Step"}}, nil},
	} {
		if got := shellViolations(tc.s, parseFiles(t, dir, tc.s.files)); !slices.Equal(got, tc.want) {
			t.Errorf("%v: violations\n%q\nwant\n%q", tc.s.files, got, tc.want)
		}
	}
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}
