// Command check is `make check-deploy`: it renders the Helm chart under
// deploy/helm/asyncrl with helm's Go module (helm.sh/helm/v4, as `helm
// install` renders client-side) for its default values and for every
// values file in the chart's ci/ folder, and validates every manifest
// with kubeconform's Go library (github.com/yannh/kubeconform) in strict
// mode against schemas generated offline from pinned sources
// (schemas.go). It fails on any manifest that is not valid, and on any
// canary it knows to be wrong that is not refused (so a schema set that
// accepts anything cannot pass). It also checks that the dashboard
// ConfigMap carries deploy/grafana/asyncrl.json byte for byte.
//
// It lives in its own Go module so the asyncrl module (and `make test`)
// never compiles the Kubernetes dependency tree.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

func main() {
	chartDir := flag.String("chart", "../helm/asyncrl", "chart directory")
	dashboard := flag.String("dashboard", "../grafana/asyncrl.json", "the Grafana dashboard the chart must provision unchanged")
	bin := flag.String("asyncrl", "", "the asyncrl binary (make build): each rendered run.yaml must pass its config validate, each flag the pods pass must be in its --help (required)")
	verbose := flag.Bool("v", false, "list every manifest checked")
	outDir := flag.String("out", "", "also write each scenario's rendered manifests to `DIR`/<scenario>.yaml (to read them)")
	flag.Parse()
	start := time.Now()
	if *bin == "" {
		fmt.Fprintln(os.Stderr, "check-deploy: -asyncrl BINARY is required (make check-deploy builds it)")
		os.Exit(2)
	}
	if err := run(*chartDir, *dashboard, &asyncrlCheck{bin: *bin, help: map[string]string{}}, *outDir, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "check-deploy:", err)
		os.Exit(1)
	}
	fmt.Printf("check-deploy: ok (%.1fs)\n", time.Since(start).Seconds())
}

func run(chartDir, dashboard string, cli *asyncrlCheck, outDir string, verbose bool) error {
	scenarios, err := filepath.Glob(filepath.Join(chartDir, "ci", "*-values.yaml"))
	if err != nil {
		return err
	}
	sort.Strings(scenarios)
	dir, err := os.MkdirTemp("", "asyncrl-schemas-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	v, err := canariedValidator(dir)
	if err != nil {
		return err
	}
	want, err := os.ReadFile(dashboard)
	if err != nil {
		return fmt.Errorf("dashboard: %w", err)
	}
	c := scenarioCheck{chartDir: chartDir, v: v, cli: cli, outDir: outDir, verbose: verbose, dashboard: want}
	var problems []string
	total := 0
	for _, sc := range append([]string{""}, scenarios...) {
		p, n, err := c.check(sc)
		if err != nil {
			return err
		}
		problems = append(problems, p...)
		total += n
	}
	problems = append(problems, checkRefusals(chartDir)...)
	if len(problems) > 0 {
		return fmt.Errorf("%d errors:\n  %s", len(problems), strings.Join(problems, "\n  "))
	}
	fmt.Printf("%d scenarios, %d manifests, 0 errors; %d bad values refused with their fix\n", len(scenarios)+1, total, len(refusals))
	return nil
}

// canariedValidator loads the schemas into dir and returns a validator
// over them that has refused every canary.
func canariedValidator(dir string) (*kubeconformValidator, error) {
	schemas, err := loadSchemas(dir)
	if err != nil {
		return nil, err
	}
	v, err := newValidator(schemas)
	if err != nil {
		return nil, err
	}
	if err := v.canaries(); err != nil {
		return nil, err
	}
	return v, nil
}

// scenarioCheck renders and checks the chart's scenarios.
type scenarioCheck struct {
	chartDir string
	v        *kubeconformValidator
	cli      *asyncrlCheck
	outDir   string
	verbose  bool
	// dashboard is the Grafana dashboard the chart must carry unchanged.
	dashboard []byte
}

// check renders the chart with the values file sc ("": the default
// values), checks every manifest and prints the scenario's summary. It
// returns the problems found and the count of manifests checked; an error
// is one writing -out's file.
func (c scenarioCheck) check(sc string) (problems []string, manifests int, _ error) {
	name, files := "default values", []string(nil)
	if sc != "" {
		name, files = filepath.Base(sc), []string{sc}
	}
	missing, ms, err := render(c.chartDir, files)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", name, err)}, 0, nil
	}
	if sc == "" {
		for _, d := range missing {
			fmt.Printf("note: dependency %s is not in charts/: run `helm dependency build` on the chart before `helm install` (the check renders without it)\n", d)
		}
	}
	problems, bad, kinds := c.validate(name, ms)
	if c.outDir != "" {
		if err := dump(c.outDir, name, ms); err != nil {
			return nil, 0, err
		}
	}
	if p := checkDashboard(ms, c.dashboard); p != "" {
		problems = append(problems, name+": "+p)
	}
	fmt.Printf("%s: %d manifests checked against Kubernetes %s, %d with errors (%s)\n", name, len(ms), kubeVersion, bad, kindList(kinds))
	return problems, len(ms), nil
}

// validate checks scenario name's manifests against the schemas and the
// asyncrl binary: the problems, the count of manifests with any, and the
// count of each kind.
func (c scenarioCheck) validate(name string, ms []manifest) (problems []string, bad int, kinds map[string]int) {
	kinds = map[string]int{}
	for _, m := range ms {
		kind, errs := c.v.validate(m)
		kinds[kind]++
		errs = append(errs, c.cli.check(m)...)
		if len(errs) > 0 {
			bad++
		}
		for _, e := range errs {
			problems = append(problems, fmt.Sprintf("%s: %s: %s", name, m.Source, e))
		}
		if c.verbose {
			fmt.Printf("  %s: %s %s (%d errors)\n", name, m.Source, kind, len(errs))
		}
	}
	return problems, bad, kinds
}

// checkRefusals renders each of refusals, which the chart must refuse
// with its words.
func checkRefusals(chartDir string) []string {
	var problems []string
	for _, r := range refusals {
		_, _, err := renderValues(chartDir, r.values)
		if err == nil || !strings.Contains(err.Error(), r.want) {
			problems = append(problems, fmt.Sprintf("values %s: rendered with error %v, want one saying %q", r.name, err, r.want))
		}
	}
	return problems
}

func kindList(kinds map[string]int) string {
	var parts []string
	for k, n := range kinds {
		parts = append(parts, fmt.Sprintf("%s×%d", k, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// dump writes a scenario's manifests as one YAML stream.
func dump(dir, scenario string, ms []manifest) error {
	var b strings.Builder
	for _, m := range ms {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s", m.Source, m.Body)
	}
	name := strings.TrimSuffix(strings.ReplaceAll(scenario, " ", "-"), ".yaml") + ".yaml"
	return os.WriteFile(filepath.Join(dir, name), []byte(b.String()), 0o644)
}

// refusals are values the chart must refuse to render, each with the
// words of its error: a mistake is caught at helm install, named.
var refusals = []struct {
	name   string
	values map[string]any
	want   string
}{
	{"external bus without a URL", map[string]any{"bus": map[string]any{"url": ""}}, "bus.mode external needs bus.url"},
	{"secrets.create without the gossip key", map[string]any{"secrets": map[string]any{"create": true, "values": map[string]any{"engine.key": "k"}}},
		"secrets.create needs secrets.values.gossip.key"},
	{"a misspelt value (nodes.replicaz)", map[string]any{"nodes": map[string]any{"replicaz": 3}}, "replicaz"},
	{"an unknown engines kind", map[string]any{"engines": "sglang"}, "engines"},
	{"tls.create without the CA", map[string]any{"tls": map[string]any{"create": true}}, "tls.create needs tls.ca"},
	{"vLLM engines without their image", map[string]any{"engines": "vllm", "bus": map[string]any{"url": "nats://n:4222"}},
		"vllm.image.repository: an image with vLLM and asyncrl_vllm"},
}
