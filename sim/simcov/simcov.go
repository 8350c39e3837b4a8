package simcov

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Module is the module path the cores' files are named under in a
// coverage profile.
const Module = "github.com/asyncrl/asyncrl"

// Core is one pure core: the package directories (relative to the module
// root) it spans and, per directory, the files that are the core (an
// actor shell in the same package is not: the simulator replaces it).
type Core struct {
	Name string
	// Dirs are the packages, relative to the module root.
	Dirs []string
	// Skip are files (relative to the module root) of those packages that
	// are not part of the core.
	Skip []string
	// Scenarios names the scenarios that step the core (for the report).
	Scenarios string
}

// Cores are the measured cores, in report order.
var Cores = []Core{
	{Name: "term", Dirs: []string{"cluster/term"}, Scenarios: "failover"},
	{Name: "lease", Dirs: []string{"cluster/lease/contender"}, Scenarios: "failover"},
	{Name: "rankhost", Dirs: []string{"cluster/rankhost/fence"}, Scenarios: "failover"},
	{Name: "controller", Dirs: []string{"actors/controller", "actors/staleness"},
		Skip: []string{"actors/controller/shell.go"}, Scenarios: "default, faults, partitions, mixed"},
	{Name: "sampling", Dirs: []string{"actors/sampling", "actors/filter"},
		Skip: []string{"actors/sampling/shell.go", "actors/sampling/refs.go"}, Scenarios: "default, faults, partitions, mixed"},
	{Name: "tracker", Dirs: []string{"actors/publisher/tracker"}, Scenarios: "default, faults, partitions, mixed, failover"},
	{Name: "router-policy", Dirs: []string{"actors/router/policy"}, Scenarios: "default, faults, partitions, mixed"},
	{Name: "steprule", Dirs: []string{"actors/trainer/steprule"}, Scenarios: "default, faults, partitions, mixed, failover"},
	// The trainer's fetch retry rule: the default world's trainer fetches
	// through it (a buffer electing a leader fails the try).
	{Name: "fetchrule", Dirs: []string{"actors/trainer/fetchrule"}, Scenarios: "faults, mixed"},
	// The rollout's group outcome; its EnvBackoff paces chat environments,
	// which the simulator has none of (outcome's doc.go).
	{Name: "outcome", Dirs: []string{"actors/rollout/outcome"}, Skip: []string{"actors/rollout/outcome/backoff.go"},
		Scenarios: "default, faults, partitions, mixed, failover"},
}

// Options configures one measurement.
type Options struct {
	// Root is the module root; empty finds it from the working directory.
	Root string
	// Seeds per scenario (from seed 1); Steps per run (default 10).
	Seeds, Steps int
	// Scenarios, comma-separated; empty runs every scenario.
	Scenarios string
	// Workers is how many runs go at once (default 2).
	Workers int
	// Profile, when set, keeps the coverage profile at this path.
	Profile string
	// Go is the go command (default "go").
	Go string
	// Timeout bounds the go test run (default 2h).
	Timeout time.Duration
	// FromProfile, when set, runs nothing: it reads this profile (a
	// measurement's Profile) and reports on it against the sources under
	// Root — to revisit a measurement, e.g. one of an older tree.
	FromProfile string
}

// Block is one coverage block of a core.
type Block struct {
	File                string // relative to the module root
	StartLine, StartCol int
	EndLine, EndCol     int
	Stmts               int
	Hit                 bool
	Func                string // the enclosing function, e.g. (*Core).Step
	Source              string // the block's first line of source, trimmed
	Unreachable         string // why no simulated input reaches it ("" reachable)
}

func (b Block) String() string {
	s := fmt.Sprintf("%s:%d.%d,%d.%d %s: %s", b.File, b.StartLine, b.StartCol, b.EndLine, b.EndCol, b.Func, b.Source)
	if b.Unreachable != "" {
		s += " — unreachable: " + b.Unreachable
	}
	return s
}

// CoreReport is one core's coverage.
type CoreReport struct {
	Core Core
	// Blocks are every block of the core's files, in file order.
	Blocks []Block
	// Reachable, Hit count blocks (Hit of the reachable ones); Stmts and
	// StmtsHit count statements of the reachable blocks; All and AllHit
	// count every block, the unreachable ones included.
	Reachable, Hit, Stmts, StmtsHit, All, AllHit int
}

// Percent is the reachable blocks hit, in percent.
func (r CoreReport) Percent() float64 {
	if r.Reachable == 0 {
		return 100
	}
	return 100 * float64(r.Hit) / float64(r.Reachable)
}

// Missed are the reachable blocks no seed reached.
func (r CoreReport) Missed() []Block {
	var out []Block
	for _, b := range r.Blocks {
		if b.Unreachable == "" && !b.Hit {
			out = append(out, b)
		}
	}
	return out
}

// Excluded are the blocks listed as unreachable.
func (r CoreReport) Excluded() []Block {
	var out []Block
	for _, b := range r.Blocks {
		if b.Unreachable != "" {
			out = append(out, b)
		}
	}
	return out
}

// Report is a measurement.
type Report struct {
	Seeds, Steps int
	Scenarios    string
	Cores        []CoreReport
	// Failures are the driver's failed seeds (violations), if any.
	Failures []string
	Elapsed  time.Duration
}

// Core returns the named core's report.
func (r Report) Core(name string) (CoreReport, bool) {
	for _, c := range r.Cores {
		if c.Core.Name == name {
			return c, true
		}
	}
	return CoreReport{}, false
}

// Summary is the per-core table.
func (r Report) Summary() string {
	var b strings.Builder
	sc := r.Scenarios
	if sc == "" {
		sc = "all scenarios"
	}
	fmt.Fprintf(&b, "simulator coverage of the cores: %d seeds × %s at %d steps (%v)\n", r.Seeds, sc, r.Steps, r.Elapsed.Round(time.Second))
	fmt.Fprintf(&b, "%-14s %-36s %19s %9s %17s %19s\n", "core", "scenarios", "blocks (reachable)", "", "statements", "blocks (all)")
	for _, c := range r.Cores {
		fmt.Fprintf(&b, "%-14s %-36s %8d / %-8d %8.1f%% %7d / %-7d %8d / %-8d\n", c.Core.Name, c.Core.Scenarios,
			c.Hit, c.Reachable, c.Percent(), c.StmtsHit, c.Stmts, c.AllHit, c.All)
	}
	return b.String()
}

// Details lists, per core, the blocks not reached and the ones excluded
// as unreachable.
func (r Report) Details() string {
	var b strings.Builder
	for _, c := range r.Cores {
		m := c.Missed()
		fmt.Fprintf(&b, "\n== %s: %d reachable blocks not reached\n", c.Core.Name, len(m))
		for _, x := range m {
			fmt.Fprintf(&b, "  %s\n", x)
		}
		e := c.Excluded()
		fmt.Fprintf(&b, "== %s: %d blocks excluded as unreachable (%d of them hit)\n", c.Core.Name, len(e), c.All-c.Reachable-(len(e)-countHit(e)))
		for _, x := range e {
			hit := ""
			if x.Hit {
				hit = " [HIT: the exclusion is wrong]"
			}
			fmt.Fprintf(&b, "  %s%s\n", x, hit)
		}
	}
	return b.String()
}

func countHit(bs []Block) int {
	n := 0
	for _, b := range bs {
		if b.Hit {
			n++
		}
	}
	return n
}

// FindRoot walks up from dir to the directory holding go.mod.
func FindRoot(dir string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("simcov: no go.mod above %s: run from inside the asyncrl module", dir)
		}
	}
}

// defaults fills the steps, workers, go command, timeout and repository
// root left unset.
func (o *Options) defaults() error {
	o.Steps = cmpOr(o.Steps, 10)
	o.Workers = cmpOr(o.Workers, 2)
	if o.Go == "" {
		o.Go = "go"
	}
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Hour
	}
	if o.Root == "" {
		wd, err := os.Getwd()
		if err != nil {
			return fmt.Errorf("simcov: %w", err)
		}
		if o.Root, err = FindRoot(wd); err != nil {
			return err
		}
	}
	return nil
}

// Measure builds sim's coverage driver with -coverpkg over every core,
// runs it and reads the profile.
func Measure(o Options) (Report, error) {
	if o.Seeds <= 0 && o.FromProfile == "" {
		return Report{}, fmt.Errorf("simcov: Seeds %d: want ≥ 1", o.Seeds)
	}
	if err := o.defaults(); err != nil {
		return Report{}, err
	}
	prof := o.Profile
	if prof == "" {
		dir, err := os.MkdirTemp("", "simcov-")
		if err != nil {
			return Report{}, fmt.Errorf("simcov: %w", err)
		}
		defer os.RemoveAll(dir)
		prof = filepath.Join(dir, "cover.out")
	} else if !filepath.IsAbs(prof) {
		wd, _ := os.Getwd()
		prof = filepath.Join(wd, prof)
	}
	if o.FromProfile != "" {
		return analyze(o.Root, o.FromProfile, Report{Seeds: o.Seeds, Steps: o.Steps, Scenarios: o.Scenarios})
	}
	var pkgs []string
	for _, c := range Cores {
		for _, d := range c.Dirs {
			pkgs = append(pkgs, "./"+d)
		}
	}
	start := time.Now()
	cmd := exec.Command(o.Go, "test", "-count=1", "-timeout", o.Timeout.String(), "-covermode=set",
		"-coverpkg="+strings.Join(pkgs, ","), "-coverprofile="+prof, "-run", "^TestCoverageDriver$", "-v", "./sim")
	cmd.Dir = o.Root
	cmd.Env = append(os.Environ(),
		"ASYNCRL_SIM_COVER_SEEDS="+strconv.Itoa(o.Seeds), "ASYNCRL_SIM_COVER_STEPS="+strconv.Itoa(o.Steps),
		"ASYNCRL_SIM_COVER_WORKERS="+strconv.Itoa(o.Workers), "ASYNCRL_SIM_COVER_SCENARIOS="+o.Scenarios)
	out, runErr := cmd.CombinedOutput()
	rep := Report{Seeds: o.Seeds, Steps: o.Steps, Scenarios: o.Scenarios, Elapsed: time.Since(start)}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "coverdriver_test.go") && strings.Contains(l, "seed ") && !strings.Contains(l, "violations") {
			rep.Failures = append(rep.Failures, strings.TrimSpace(l))
		}
	}
	if _, err := os.Stat(prof); err != nil {
		return rep, fmt.Errorf("simcov: the driver wrote no profile (%v): %w\n%s", runErr, err, tail(out, 40))
	}
	if runErr != nil && len(rep.Failures) == 0 {
		return rep, fmt.Errorf("simcov: go test: %w\n%s", runErr, tail(out, 40))
	}
	return analyze(o.Root, prof, rep)
}

// analyze reads a profile into rep's per-core reports.
func analyze(root, prof string, rep Report) (Report, error) {
	f, err := os.Open(prof)
	if err != nil {
		return rep, fmt.Errorf("simcov: %w", err)
	}
	defer f.Close()
	hits, err := parseProfile(f)
	if err != nil {
		return rep, err
	}
	for _, c := range Cores {
		cr, err := coreReport(root, c, hits)
		if err != nil {
			return rep, err
		}
		rep.Cores = append(rep.Cores, cr)
	}
	return rep, nil
}

func cmpOr(v, d int) int {
	if v == 0 {
		return d
	}
	return v
}

func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// blockKey is a block's position in a profile.
type blockKey struct {
	file                       string
	startL, startC, endL, endC int
}

type blockVal struct {
	stmts int
	hit   bool
}

// parseProfile reads a "mode: set|count|atomic" coverage profile into
// block → hit (a block listed twice is hit when either says so).
func parseProfile(f *os.File) (map[blockKey]blockVal, error) {
	out := map[blockKey]blockVal{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	first := true
	for sc.Scan() {
		line := sc.Text()
		if first {
			first = false
			if !strings.HasPrefix(line, "mode: ") {
				return nil, fmt.Errorf("simcov: profile does not start with a mode line: %q", line)
			}
			continue
		}
		if line == "" {
			continue
		}
		// file:startL.startC,endL.endC stmts count
		colon := strings.LastIndexByte(line, ':')
		if colon < 0 {
			return nil, fmt.Errorf("simcov: bad profile line %q", line)
		}
		var k blockKey
		var stmts, count int
		k.file = line[:colon]
		if _, err := fmt.Sscanf(line[colon+1:], "%d.%d,%d.%d %d %d", &k.startL, &k.startC, &k.endL, &k.endC, &stmts, &count); err != nil {
			return nil, fmt.Errorf("simcov: bad profile line %q: %w", line, err)
		}
		v := out[k]
		v.stmts = stmts
		v.hit = v.hit || count > 0
		out[k] = v
	}
	return out, sc.Err()
}

// coreReport assembles a core's blocks from the profile, naming each
// block's function and first source line and marking the exclusions.
func coreReport(root string, c Core, hits map[blockKey]blockVal) (CoreReport, error) {
	cr := CoreReport{Core: c}
	for _, d := range c.Dirs {
		prefix := Module + "/" + d + "/"
		var keys []blockKey
		for k := range hits {
			if strings.HasPrefix(k.file, prefix) && !strings.Contains(k.file[len(prefix):], "/") {
				rel := d + "/" + k.file[len(prefix):]
				if !slices.Contains(c.Skip, rel) {
					keys = append(keys, k)
				}
			}
		}
		if len(keys) == 0 {
			return cr, fmt.Errorf("simcov: the profile has no blocks of %s: was it built with -coverpkg over it?", d)
		}
		sort.Slice(keys, func(i, j int) bool {
			a, b := keys[i], keys[j]
			if a.file != b.file {
				return a.file < b.file
			}
			if a.startL != b.startL {
				return a.startL < b.startL
			}
			return a.startC < b.startC
		})
		files := map[string]*srcFile{}
		for _, k := range keys {
			rel := strings.TrimPrefix(k.file, Module+"/")
			sf := files[rel]
			if sf == nil {
				var err error
				if sf, err = loadSource(filepath.Join(root, rel)); err != nil {
					return cr, err
				}
				files[rel] = sf
			}
			v := hits[k]
			b := Block{File: rel, StartLine: k.startL, StartCol: k.startC, EndLine: k.endL, EndCol: k.endC, Stmts: v.stmts, Hit: v.hit}
			b.Func = sf.funcAt(k.startL, k.startC)
			b.Source = sf.snippet(k)
			if ex := matchExclusion(b, sf.line(k.startL), sf.text(k)); ex != nil {
				b.Unreachable = ex.Why
			}
			cr.Blocks = append(cr.Blocks, b)
			cr.All++
			if b.Hit {
				cr.AllHit++
			}
			if b.Unreachable == "" {
				cr.Reachable++
				cr.Stmts += b.Stmts
				if b.Hit {
					cr.Hit++
					cr.StmtsHit += b.Stmts
				}
			}
		}
	}
	return cr, nil
}

// srcFile is a parsed core file: its lines and its functions' extents.
type srcFile struct {
	lines []string
	funcs []funcSpan
}

type funcSpan struct {
	name                       string
	startL, startC, endL, endC int
}

func loadSource(path string) (*srcFile, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("simcov: %w", err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, fmt.Errorf("simcov: %w", err)
	}
	sf := &srcFile{lines: strings.Split(string(src), "\n")}
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok {
			continue
		}
		s, e := fset.Position(fd.Pos()), fset.Position(fd.End())
		sf.funcs = append(sf.funcs, funcSpan{name: funcName(fd), startL: s.Line, startC: s.Column, endL: e.Line, endC: e.Column})
	}
	return sf, nil
}

func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	var b bytes.Buffer
	t := fd.Recv.List[0].Type
	star := false
	if s, ok := t.(*ast.StarExpr); ok {
		star, t = true, s.X
	}
	if ix, ok := t.(*ast.IndexExpr); ok {
		t = ix.X
	}
	if ix, ok := t.(*ast.IndexListExpr); ok {
		t = ix.X
	}
	id, _ := t.(*ast.Ident)
	name := "?"
	if id != nil {
		name = id.Name
	}
	if star {
		fmt.Fprintf(&b, "(*%s).%s", name, fd.Name.Name)
	} else {
		fmt.Fprintf(&b, "%s.%s", name, fd.Name.Name)
	}
	return b.String()
}

func (sf *srcFile) funcAt(line, col int) string {
	for _, f := range sf.funcs {
		after := line > f.startL || (line == f.startL && col >= f.startC)
		before := line < f.endL || (line == f.endL && col <= f.endC)
		if after && before {
			return f.name
		}
	}
	return "(package level)"
}

// line is source line l (1-based), "" outside the file.
func (sf *srcFile) line(l int) string {
	if l < 1 || l > len(sf.lines) {
		return ""
	}
	return sf.lines[l-1]
}

// text is the block's source.
func (sf *srcFile) text(k blockKey) string {
	if k.startL < 1 || k.endL > len(sf.lines) {
		return ""
	}
	var b strings.Builder
	for l := k.startL; l <= k.endL; l++ {
		s := sf.lines[l-1]
		if l == k.endL && k.endC-1 <= len(s) {
			s = s[:k.endC-1]
		}
		if l == k.startL && k.startC-1 <= len(s) {
			s = s[min(k.startC-1, len(s)):]
		}
		b.WriteString(s)
		b.WriteByte('\n')
	}
	return b.String()
}

// snippet is the block's first non-empty line of source, trimmed.
func (sf *srcFile) snippet(k blockKey) string {
	for _, l := range strings.Split(sf.text(k), "\n") {
		l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "{"))
		if l != "" {
			if len(l) > 100 {
				l = l[:100] + "…"
			}
			return l
		}
	}
	return ""
}

// ErrBelowFloor is wrapped by CheckFloors' error.
var ErrBelowFloor = errors.New("simcov: coverage below its floor")

// CheckFloors compares each core's reachable-block coverage with its
// floor (percent); cores without a floor pass.
func (r Report) CheckFloors(floors map[string]float64) error {
	var bad []string
	for _, c := range r.Cores {
		if f, ok := floors[c.Core.Name]; ok && c.Percent() < f {
			bad = append(bad, fmt.Sprintf("%s %.1f%% < %.1f%%", c.Core.Name, c.Percent(), f))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %s", ErrBelowFloor, strings.Join(bad, ", "))
	}
	return nil
}
