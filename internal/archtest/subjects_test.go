package archtest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The subjects rule (ARCHITECTURE.md, "Who may import whom"; transport's
// RunPlan): a run's subjects are spelled in transport and nowhere else.
// Outside transport/, no non-test file holds a subject literal or builds
// one from the scheme's parts; it takes the names from transport.Plan.

// subjectLiteral matches a string that is (or formats) a subject of the
// scheme: asyncrl.<run>.<topic>…, asyncrl-durable.<run>.groups, a
// pattern over every run, or the root alone (the start of a subject built
// by concatenation). Arrow metadata keys (asyncrl.vocab_size) are not
// subjects: their second token is no run followed by a topic.
var subjectLiteral = regexp.MustCompile(`^asyncrl(-durable)?\.($|>$|\*\.|[^.]+\.(prompts|turns|trajectories|groups|train|steps|weights|engines|sessions|capacity|ledger|control|transfers)(\.|$))`)

// subjectBuilders are transport's identifiers that spell a subject from
// its parts; outside transport the plan's fields and methods replace them.
func subjectBuilder(name string) bool {
	switch name {
	case "Subject", "MustSubject", "EngineSubject", "EngineWildcard", "RunWildcard", "SubjectRoot":
		return true
	}
	return strings.HasPrefix(name, "Topic") && name != "Topics"
}

// subjectProblems parses one Go file and reports its subject literals and
// its uses of transport's subject builders.
func subjectProblems(fset *token.FileSet, name string, src any) ([]string, error) {
	f, err := parser.ParseFile(fset, name, src, 0)
	if err != nil {
		return nil, err
	}
	tname := ""
	for _, is := range f.Imports {
		if p, _ := strconv.Unquote(is.Path.Value); p == floorModule+"/transport" {
			tname = "transport"
			if is.Name != nil {
				tname = is.Name.Name
			}
		}
	}
	var bad []string
	ast.Inspect(f, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.BasicLit:
			if x.Kind != token.STRING {
				return true
			}
			if v, err := strconv.Unquote(x.Value); err == nil && subjectLiteral.MatchString(v) {
				bad = append(bad, fmt.Sprintf("%s: subject literal %s (take it from transport.Plan)", fset.Position(x.Pos()), x.Value))
			}
		case *ast.SelectorExpr:
			if id, ok := x.X.(*ast.Ident); ok && tname != "" && id.Name == tname && subjectBuilder(x.Sel.Name) {
				bad = append(bad, fmt.Sprintf("%s: transport.%s builds a subject by hand (take it from transport.Plan)", fset.Position(x.Pos()), x.Sel.Name))
			}
		}
		return true
	})
	return bad, nil
}

// TestSubjectsOnlyInTransport: no package outside transport/ spells a
// subject; every one comes from the run's plan.
func TestSubjectsOnlyInTransport(t *testing.T) {
	rootDir := moduleRoot(t)
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list packages: %v", err)
	}
	cmd := exec.Command(gobin, "list", "-f", `{{.ImportPath}}{{range .GoFiles}} {{.}}{{end}}`, "./...")
	cmd.Dir = rootDir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	fset := token.NewFileSet()
	files := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		rel, ok := strings.CutPrefix(f[0], floorModule+"/")
		if !ok || rel == "transport" || strings.HasPrefix(rel, "transport/") {
			continue
		}
		for _, name := range f[1:] {
			files++
			bad, err := subjectProblems(fset, filepath.Join(rootDir, rel, name), nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range bad {
				t.Error(b)
			}
		}
	}
	if files < 300 {
		t.Fatalf("checked %d files; the module has many more outside transport/", files)
	}
}

// TestSubjectCheckCatches: the check is not vacuous — a literal subject, a
// formatted one, a pattern over every run and each builder are reported;
// Arrow metadata keys and the plan's use are not.
func TestSubjectCheckCatches(t *testing.T) {
	src := `package x

import (
	"fmt"

	tr "github.com/asyncrl/asyncrl/transport"
)

const meta = "asyncrl.vocab_size"

func f(run string) []string {
	p := tr.MustPlan(run)
	return []string{"asyncrl.r1.steps", fmt.Sprintf("asyncrl.%s.control.term", run), "asyncrl.*.control.leaving",
		"asyncrl-durable." + run + ".groups", tr.MustSubject(run, tr.TopicTrain), tr.SubjectRoot + "." + run,
		p.Steps, meta, "asyncrl.routed_experts.layers"}
}
`
	bad, err := subjectProblems(token.NewFileSet(), "x.go", src)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(bad, "\n")
	for _, w := range []string{`"asyncrl.r1.steps"`, `"asyncrl.%s.control.term"`, `"asyncrl.*.control.leaving"`,
		`"asyncrl-durable."`, "transport.MustSubject", "transport.TopicTrain", "transport.SubjectRoot"} {
		if !strings.Contains(got, w) {
			t.Errorf("not reported: %s\n%s", w, got)
		}
	}
	if strings.Contains(got, "vocab_size") || strings.Contains(got, "routed_experts") || strings.Contains(got, "MustPlan") {
		t.Errorf("reported what is not a subject:\n%s", got)
	}
	if len(bad) != 7 {
		t.Errorf("%d problems, want 7:\n%s", len(bad), got)
	}
}
