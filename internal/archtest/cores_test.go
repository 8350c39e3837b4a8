package archtest

import (
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/asyncrl/asyncrl"

// core is one pure core: a package, and, where the package also holds its
// shell, the files that make up the core.
type core struct {
	dir   string   // package directory relative to the module root
	files []string // the core's files; nil means every non-test file
	// notSimulated is "" for a core the simulator steps (sim imports it:
	// shells_test.go checks it), else why it does not, in a sentence.
	notSimulated string
}

// cores is every pure core of the module: the packages ARCHITECTURE.md
// marks **core**, and the cores that share a package with their shell,
// by file (ledger's pure part among them; lease's has its own package,
// cluster/lease/contender). docs/cores.md
// points here; a new core gets a row, and says whether the simulator
// steps it.
var cores = []core{
	{dir: "actors/effect"},
	{dir: "actors/staleness"},
	{dir: "actors/filter"},
	{dir: "actors/trainer/microbatch"},
	{dir: "actors/trainer/steprule"},
	{dir: "actors/trainer/fetchrule"},
	{dir: "actors/trainer/assemble"},
	{dir: "actors/publisher/tracker"},
	{dir: "actors/router/policy"},
	{dir: "actors/controller", files: []string{"core.go", "sampling.go"}},
	{dir: "actors/sampling", files: []string{"core.go", "held.go"}},
	{dir: "actors/rollout/outcome"},
	{dir: "engine/latency"},
	{dir: "cluster/weightsync/targets"},
	{dir: "cluster/termwatch"},
	{dir: "cluster/term"},
	{dir: "cluster/ledger/transition"},
	{dir: "cluster/ledger", files: []string{"core.go"},
		notSimulated: "the ledger's progress and in-flight helpers over JetStream records; the simulator applies the ledger's transition rule (cluster/ledger/transition) to its own durable model, and cannot import this package (its store is JetStream)"},
	{dir: "cluster/lease/contender"},
	{dir: "cluster/rankhost/fence"},
	{dir: "cluster/discovery", files: []string{"core.go", "apply.go"},
		notSimulated: "gossip membership → routing changes; the simulated fleet is registered with the routing core directly (engine leaves through its changes)"},
	{dir: "cluster/placement", notSimulated: "role-list validation and singleton placement at start, no decision during a run"},
	{dir: "bench/workload", notSimulated: "the benchmarks' workload generator, not part of the control plane"},
	{dir: "transport/dataplane/plan", notSimulated: "the sharded weight-transfer planner; simulated versions move whole"},
	{dir: "model/sampler", notSimulated: "token sampling inside an engine; simulated engines draw tokens from the seed"},
	{dir: "tinker", notSimulated: "the Tinker API server's session core, outside the RL loop the simulator runs"},
	{dir: "internal/h1", notSimulated: "the router front end's HTTP/1.1 head parser; the simulator routes without HTTP"},
}

// forbiddenDep reports why a package may not be anywhere in a core's
// dependencies, or "" if it may.
func forbiddenDep(path string) string {
	switch {
	case path == module+"/actors":
		return "the actor shell"
	case path == "net/http" || strings.HasPrefix(path, "net/http/"):
		return "net/http"
	case strings.HasPrefix(path, "github.com/asynkron/protoactor-go"):
		return "protoactor"
	case strings.HasPrefix(path, "github.com/nats-io/"):
		return "NATS"
	case strings.HasPrefix(path, "github.com/rs/zerolog"):
		return "zerolog"
	case path == module+"/transport" || strings.HasPrefix(path, module+"/transport/") && path != module+"/transport/dataplane/plan":
		return "a transport"
	case strings.HasPrefix(path, module+"/cluster/node"), strings.HasPrefix(path, module+"/cluster/agent"), strings.HasPrefix(path, module+"/cmd/"):
		return "the pipeline, the lease agent or a command"
	}
	return ""
}

// forbiddenDirect are standard packages a core's own files may not import:
// goroutine synchronisation, processes, files and sockets belong to shells.
var forbiddenDirect = []string{"sync", "sync/atomic", "os", "os/exec", "os/signal", "net", "log", "log/slog", "io/ioutil"}

func root(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the test file")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// imports parses the import clauses of c's files (every non-test .go file
// the go command selects for the package when c.files is nil).
func imports(t *testing.T, rootDir string, c core) []string {
	t.Helper()
	files := c.files
	if files == nil {
		out := goList(t, rootDir, "-f", `{{join .GoFiles "\n"}}`, "./"+c.dir)
		files = strings.Fields(out)
	}
	if len(files) == 0 {
		t.Fatalf("%s: no files", c.dir)
	}
	var paths []string
	fset := token.NewFileSet()
	for _, f := range files {
		af, err := parser.ParseFile(fset, filepath.Join(rootDir, c.dir, f), nil, parser.ImportsOnly)
		if err != nil {
			t.Fatalf("%s: %v", c.dir, err)
		}
		for _, is := range af.Imports {
			p, err := strconv.Unquote(is.Path.Value)
			if err != nil {
				t.Fatalf("%s/%s: import %s: %v", c.dir, f, is.Path.Value, err)
			}
			if !slices.Contains(paths, p) {
				paths = append(paths, p)
			}
		}
	}
	return paths
}

func goList(t *testing.T, dir string, args ...string) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list dependencies: %v", err)
	}
	cmd := exec.Command(gobin, append([]string{"list"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, msg)
	}
	return string(out)
}

// violations lists, for core c, every forbidden direct import of its files
// and every forbidden package among the dependencies of what they import
// (go list -deps, so third-party packages are followed too).
func violations(t *testing.T, rootDir string, c core) []string {
	t.Helper()
	direct := imports(t, rootDir, c)
	var bad []string
	for _, p := range direct {
		if slices.Contains(forbiddenDirect, p) {
			bad = append(bad, p+" (imported directly: I/O and locks belong to shells)")
		}
	}
	deps := strings.Fields(goList(t, rootDir, append([]string{"-deps"}, direct...)...))
	for _, p := range deps {
		if why := forbiddenDep(p); why != "" {
			bad = append(bad, p+" ("+why+")")
		}
	}
	return bad
}

// TestCoresImportNoShell is the rule of docs/cores.md: no core reaches the
// actor shell, net/http, protoactor, NATS, zerolog or a transport, however
// indirectly.
func TestCoresImportNoShell(t *testing.T) {
	rootDir := root(t)
	for _, c := range cores {
		t.Run(c.dir, func(t *testing.T) {
			if bad := violations(t, rootDir, c); len(bad) > 0 {
				t.Errorf("core %s %v depends on:\n  %s", c.dir, c.files, strings.Join(bad, "\n  "))
			}
		})
	}
}

// TestCheckCatchesAShell makes sure the check above is not vacuous: the
// controller's shell file and the discovery watcher do reach forbidden
// packages, and the check says which.
func TestCheckCatchesAShell(t *testing.T) {
	rootDir := root(t)
	for _, tc := range []struct {
		c    core
		want string
	}{
		{core{dir: "actors/controller", files: []string{"shell.go"}}, module + "/actors (the actor shell)"},
		{core{dir: "cluster/discovery", files: []string{"watcher.go"}}, "github.com/rs/zerolog (zerolog)"},
		{core{dir: "actors/router/proxy"}, "net/http (net/http)"},
		{core{dir: "actors"}, "sync (imported directly: I/O and locks belong to shells)"},
	} {
		if bad := violations(t, rootDir, tc.c); !slices.Contains(bad, tc.want) {
			t.Errorf("%s %v: violations %q do not include %q", tc.c.dir, tc.c.files, bad, tc.want)
		}
	}
}
