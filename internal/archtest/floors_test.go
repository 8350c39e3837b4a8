package archtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The floors rule (ARCHITECTURE.md, "Floors"): every package of the module
// stands on a floor, written in the package map of ARCHITECTURE.md itself
// (so the document cannot drift from the tree), and no package imports one
// on a higher floor. Only a package's own (non-test) imports count: a test
// may drive its package with anything.

const floorModule = "github.com/asyncrl/asyncrl"

// knownUpward are the imports that run up the floors today, each with the
// reason it is tolerated; the test fails on any other, and on an entry that
// no longer runs up (delete it), so the list only shrinks. None today.
var knownUpward = map[[2]string]string{}

// notLeaf are the packages under internal/ that are not leaf tools, each
// with its reason: the rule "internal/ holds leaf tools (floor 0),
// importable by anything" does not hold for them. None today (issue 31
// item 6 moved wiring to wiring/, syncloop and trainertest under model/);
// the test fails on a new one, and on an entry that became a leaf.
var notLeaf = map[string]string{}

// floorRow matches a row of the package map: | `pkg` [words] | floor | job |.
// The floor is a digit, or "—" for a row that is not a Go package (Python
// under integrations/, scripts).
var floorRow = regexp.MustCompile("^\\| `([^`]+)`[^|]*\\| *([0-9]|—) *\\|")

// parseFloors reads the floors of the package map in doc: package → floor
// (-1 for "—"). A row `a/{b,c}` names a/b and a/c.
func parseFloors(doc string) (map[string]int, error) {
	floors := map[string]int{}
	for i, line := range strings.Split(doc, "\n") {
		m := floorRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		f := -1
		if m[2] != "—" {
			f, _ = strconv.Atoi(m[2])
		}
		for _, p := range expandBraces(m[1]) {
			if _, dup := floors[p]; dup {
				return nil, fmt.Errorf("line %d: %s has two rows", i+1, p)
			}
			floors[p] = f
		}
	}
	if len(floors) == 0 {
		return nil, fmt.Errorf("no package map rows (| `pkg` | floor | job |)")
	}
	return floors, nil
}

// expandBraces turns a/{b,c}/d into a/b/d and a/c/d (one brace pair).
func expandBraces(p string) []string {
	i, j := strings.Index(p, "{"), strings.Index(p, "}")
	if i < 0 || j < i {
		return []string{p}
	}
	var out []string
	for _, alt := range strings.Split(p[i+1:j], ",") {
		out = append(out, p[:i]+alt+p[j+1:])
	}
	return out
}

// floorProblems checks a module's import graph (package → its imports
// inside the module, paths relative to the module) against floors: a
// package without a floor, a row naming no package, an import up the
// floors not in known, and a known entry that no longer runs up.
func floorProblems(graph map[string][]string, floors map[string]int, known map[[2]string]string) []string {
	var bad []string
	for p := range graph {
		if f, ok := floors[p]; !ok || f < 0 {
			bad = append(bad, fmt.Sprintf("%s has no floor: add a row | `%s` | <floor> | <job> | to ARCHITECTURE.md's package map", p, p))
		}
	}
	for p, f := range floors {
		if _, ok := graph[p]; !ok && f >= 0 {
			bad = append(bad, fmt.Sprintf("ARCHITECTURE.md gives %s floor %d, but the module has no such package (remove the row, or mark it — if it is not Go)", p, f))
		}
	}
	seen := map[[2]string]bool{}
	for p, imps := range graph {
		for _, q := range imps {
			fp, okp := floors[p]
			fq, okq := floors[q]
			if !okp || !okq || fq <= fp {
				continue
			}
			e := [2]string{p, q}
			seen[e] = true
			if _, ok := known[e]; !ok {
				bad = append(bad, fmt.Sprintf("%s (floor %d) imports %s (floor %d): move what it needs down, or the package up", p, fp, q, fq))
			}
		}
	}
	for e := range known {
		if !seen[e] {
			bad = append(bad, fmt.Sprintf("%s → %s no longer runs up the floors: delete it from knownUpward", e[0], e[1]))
		}
	}
	slices.Sort(bad)
	return bad
}

// moduleGraph lists every package of the module with its imports inside
// the module (go list, non-test imports).
func moduleGraph(t *testing.T, rootDir string) map[string][]string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list packages: %v", err)
	}
	cmd := exec.Command(gobin, "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")
	cmd.Dir = rootDir
	out, err := cmd.Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("go list ./...: %v\n%s", err, msg)
	}
	graph := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		p, ok := strings.CutPrefix(f[0], floorModule+"/")
		if !ok {
			continue // the module root has no package
		}
		graph[p] = []string{}
		for _, q := range f[1:] {
			if q, ok := strings.CutPrefix(q, floorModule+"/"); ok {
				graph[p] = append(graph[p], q)
			}
		}
	}
	return graph
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the test file")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

func architectureFloors(t *testing.T, rootDir string) map[string]int {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(rootDir, "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	floors, err := parseFloors(string(doc))
	if err != nil {
		t.Fatalf("ARCHITECTURE.md: %v", err)
	}
	return floors
}

// TestFloors: every package has a floor in ARCHITECTURE.md, every row
// names a package, and no package imports one on a higher floor.
func TestFloors(t *testing.T) {
	rootDir := moduleRoot(t)
	graph := moduleGraph(t, rootDir)
	if len(graph) < 50 {
		t.Fatalf("go list found %d packages; the module has over a hundred", len(graph))
	}
	for _, p := range floorProblems(graph, architectureFloors(t, rootDir), knownUpward) {
		t.Error(p)
	}
}

// TestInternalHoldsLeafTools: the packages under internal/ are on floor 0
// (ARCHITECTURE.md: importable by anything), but for the ones notLeaf
// names with their reason.
func TestInternalHoldsLeafTools(t *testing.T) {
	floors := architectureFloors(t, moduleRoot(t))
	for p, f := range floors {
		_, excused := notLeaf[p]
		switch {
		case strings.HasPrefix(p, "internal/") && f > 0 && !excused:
			t.Errorf("%s is under internal/ (leaf tools, floor 0) but on floor %d: move it out of internal/, or its upper imports out of it", p, f)
		case excused && f == 0:
			t.Errorf("%s is a leaf tool now (floor 0): delete it from notLeaf", p)
		}
	}
	for p := range notLeaf {
		if _, ok := floors[p]; !ok {
			t.Errorf("notLeaf names %s, which ARCHITECTURE.md does not list: delete it", p)
		}
	}
}

// TestFloorCheckCatches makes sure the checks are not vacuous: an import
// up the floors, a package without a row, a stale row and a stale
// exception are each reported, and the package map's row forms parse.
func TestFloorCheckCatches(t *testing.T) {
	floors, err := parseFloors("intro\n| package | floor | job |\n| --- | --- | --- |\n" +
		"| `messages` | 0 | types |\n| `engine` | 3 | the engine |\n| `cluster/node` | 6 | the node |\n" +
		"| `transport/dataplane/{tcp,shm}` | 2 | planes |\n| `integrations/vllm` (Python) | — | worker |\n| `gone` | 4 | removed |\n")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"messages": 0, "engine": 3, "cluster/node": 6, "transport/dataplane/tcp": 2, "transport/dataplane/shm": 2,
		"integrations/vllm": -1, "gone": 4}
	if fmt.Sprint(floors) != fmt.Sprint(want) {
		t.Fatalf("parseFloors = %v, want %v", floors, want)
	}
	graph := map[string][]string{
		"messages":                {"engine"}, // up: 0 → 3
		"engine":                  {"messages"},
		"cluster/node":            {"engine", "messages"},
		"transport/dataplane/tcp": {"messages"},
		"transport/dataplane/shm": {"transport/dataplane/tcp"},
		"unlisted":                nil,
	}
	got := strings.Join(floorProblems(graph, floors, map[[2]string]string{{"engine", "cluster/node"}: "stale"}), "\n")
	for _, w := range []string{"messages (floor 0) imports engine (floor 3)", "unlisted has no floor", "gives gone floor 4",
		"engine → cluster/node no longer runs up"} {
		if !strings.Contains(got, w) {
			t.Errorf("problems do not include %q:\n%s", w, got)
		}
	}
	if strings.Contains(got, "integrations/vllm") || strings.Contains(got, "cluster/node (floor 6) imports") {
		t.Errorf("a — row or a downward import was reported:\n%s", got)
	}
	if _, err := parseFloors("| `a` | 1 | x |\n| `a` | 2 | y |\n"); err == nil {
		t.Error("two rows for one package: no error")
	}
}
