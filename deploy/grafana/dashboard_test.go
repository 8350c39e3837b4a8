package grafana

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// dashboard is the part of Grafana's dashboard JSON schema the check reads.
type dashboard struct {
	Title         string  `json:"title"`
	UID           string  `json:"uid"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
}

type panel struct {
	ID      int    `json:"id"`
	Type    string `json:"type"`
	Title   string `json:"title"`
	GridPos struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

// exported maps each asyncrl_* metric name declared in the module's
// non-test Go source to whether it is a histogram (its series carry the
// _bucket, _sum and _count suffixes). A declaration is a string literal
// that is the Name of a prometheus *Opts literal, or the first argument
// of a call whose second is a literal help string (prometheus.NewDesc and
// the packages' gauge/counter helpers).
func exported(t *testing.T, root string) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || d.Name() == "integrations" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool { collect(n, names); return true })
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func metricLit(e ast.Expr) (string, bool) {
	l, ok := e.(*ast.BasicLit)
	if !ok || l.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(l.Value)
	return s, err == nil && strings.HasPrefix(s, "asyncrl_")
}

func collect(n ast.Node, names map[string]bool) {
	switch n := n.(type) {
	case *ast.CompositeLit:
		sel, ok := n.Type.(*ast.SelectorExpr)
		if !ok || !strings.HasSuffix(sel.Sel.Name, "Opts") {
			return
		}
		for _, el := range n.Elts {
			kv, ok := el.(*ast.KeyValueExpr)
			if !ok {
				continue
			}
			if k, ok := kv.Key.(*ast.Ident); !ok || k.Name != "Name" {
				continue
			}
			if s, ok := metricLit(kv.Value); ok {
				names[s] = names[s] || sel.Sel.Name == "HistogramOpts" || sel.Sel.Name == "SummaryOpts"
			}
		}
	case *ast.CallExpr:
		if len(n.Args) < 2 {
			return
		}
		if _, ok := n.Args[1].(*ast.BasicLit); !ok {
			return
		}
		if s, ok := metricLit(n.Args[0]); ok {
			if _, seen := names[s]; !seen {
				names[s] = false
			}
		}
	}
}

var ident = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)

// metricsIn lists the asyncrl_* metric names an expression names, the
// histogram suffixes taken off where the base is a histogram.
func metricsIn(expr string, known map[string]bool) []string {
	var out []string
	for _, id := range ident.FindAllString(expr, -1) {
		if !strings.HasPrefix(id, "asyncrl_") {
			continue
		}
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(id, suf); ok && known[base] {
				id = base
			}
		}
		out = append(out, id)
	}
	return out
}

// check returns every problem of d: missing schema fields, and panels
// whose queries name no metric or one the code does not export.
func check(d dashboard, known map[string]bool) []string {
	var errs []string
	if d.Title == "" || d.UID == "" || d.SchemaVersion <= 0 || len(d.Panels) == 0 {
		errs = append(errs, fmt.Sprintf("dashboard needs title, uid, schemaVersion and panels (got %q, %q, %d, %d panels)", d.Title, d.UID, d.SchemaVersion, len(d.Panels)))
	}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
		if p.ID <= 0 || ids[p.ID] || p.Type == "" || p.Title == "" {
			errs = append(errs, where+": needs a unique positive id, a type and a title")
		}
		ids[p.ID] = true
		if g := p.GridPos; g.W <= 0 || g.H <= 0 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
			errs = append(errs, fmt.Sprintf("%s: gridPos %+v outside Grafana's 24-column grid", where, g))
		}
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			errs = append(errs, where+": no targets")
		}
		for _, tg := range p.Targets {
			ms := metricsIn(tg.Expr, known)
			if tg.RefID == "" || len(ms) == 0 {
				errs = append(errs, fmt.Sprintf("%s: target %q %q needs a refId and an asyncrl_* metric", where, tg.RefID, tg.Expr))
			}
			for _, m := range ms {
				if _, ok := known[m]; !ok {
					errs = append(errs, fmt.Sprintf("%s: %s is not a metric the code exports", where, m))
				}
			}
		}
	}
	return errs
}

func load(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile("asyncrl.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("asyncrl.json: %v", err)
	}
	return d
}

func TestDashboardNamesExportedMetrics(t *testing.T) {
	known := exported(t, filepath.Join("..", ".."))
	// The walk must find the metrics the dashboard is about; if it found
	// none, every check below would be vacuous.
	for _, m := range []string{"asyncrl_loop_steps_total", "asyncrl_router_inflight_requests", "asyncrl_engine_weight_version", "asyncrl_bus_slow_consumer_dropped_total"} {
		if _, ok := known[m]; !ok {
			t.Fatalf("the source walk missed %s (found %d names)", m, len(known))
		}
	}
	if !known["asyncrl_router_overhead_seconds"] {
		t.Fatal("asyncrl_router_overhead_seconds not seen as a histogram")
	}
	for _, decoy := range []string{"asyncrl_leases", "asyncrl_load_checkpoint"} {
		if _, ok := known[decoy]; ok {
			t.Fatalf("%s (a bucket or RPC name, not a metric) counted as a metric", decoy)
		}
	}
	d := load(t)
	for _, e := range check(d, known) {
		t.Error(e)
	}

	t.Run("unknown metric fails", func(t *testing.T) {
		bad := load(t)
		i := len(bad.Panels) - 1
		bad.Panels[i].Targets[0].Expr = "rate(asyncrl_nope_total[5m])"
		errs := check(bad, known)
		if len(errs) != 1 || !strings.Contains(errs[0], "asyncrl_nope_total is not a metric") {
			t.Fatalf("errors = %q; want one naming asyncrl_nope_total", errs)
		}
	})
	t.Run("panel without a metric fails", func(t *testing.T) {
		bad := load(t)
		bad.Panels[1].Targets[0].Expr = "vector(1)"
		if errs := check(bad, known); len(errs) != 1 {
			t.Fatalf("errors = %q; want one", errs)
		}
	})
	t.Run("missing schema fields fail", func(t *testing.T) {
		bad := load(t)
		bad.UID, bad.Panels[1].GridPos.W = "", 30
		if errs := check(bad, known); len(errs) != 2 {
			t.Fatalf("errors = %q; want two (uid, gridPos)", errs)
		}
	})
}
