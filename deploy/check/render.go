package main

import (
	"fmt"
	"maps"
	"os"
	"path"
	"slices"
	"strings"

	"helm.sh/helm/v4/pkg/chart/common"
	cutil "helm.sh/helm/v4/pkg/chart/common/util"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/engine"
	"sigs.k8s.io/yaml"
)

// kubeVersion is the Kubernetes release the chart is rendered for and
// validated against: k8s.io/kubernetes's (schemas.go) minor, the k8s.io
// modules' release helm v4.3.2 is built with (v0.37.2).
const kubeVersion = "v1.37.2"

// manifest is one rendered document.
type manifest struct {
	// Source is the template it came from (asyncrl/templates/x.yaml).
	Source string
	Body   []byte
}

// render renders the chart at dir with the values files given (in order,
// later ones winning, as helm -f does) the way `helm install` does
// client-side (action.Install: ProcessDependencies, values with the
// chart's values.schema.json checked, engine.Render), and returns its
// manifests, one per YAML document, without NOTES.txt and empty documents.
//
// missing names the Chart.yaml dependencies not vendored in charts/: the
// helm CLI refuses to install the chart without them, enabled or not
// (action.CheckDependencies); the check renders without them.
func render(dir string, valueFiles []string) (missing []string, _ []manifest, _ error) {
	vals := map[string]any{}
	for _, f := range valueFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, nil, fmt.Errorf("values: %w", err)
		}
		var v map[string]any
		if err := yaml.Unmarshal(b, &v); err != nil {
			return nil, nil, fmt.Errorf("values %s: %w", f, err)
		}
		vals = mergeMaps(vals, v)
	}
	return renderValues(dir, vals)
}

// renderValues is render with the user's values given as a map.
func renderValues(dir string, vals map[string]any) (missing []string, _ []manifest, _ error) {
	ch, err := loader.LoadDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("load chart %s: %w", dir, err)
	}
	for _, d := range ch.Metadata.Dependencies {
		if !slices.ContainsFunc(ch.Dependencies(), func(c *chart.Chart) bool { return c.Name() == d.Name }) {
			missing = append(missing, d.Name+" "+d.Version)
		}
	}
	if err := chartutil.ProcessDependencies(ch, vals); err != nil {
		return nil, nil, fmt.Errorf("dependencies: %w", err)
	}
	caps := common.DefaultCapabilities.Copy()
	caps.KubeVersion = common.KubeVersion{Version: kubeVersion, Major: "1", Minor: "37"}
	opts := common.ReleaseOptions{Name: "asyncrl", Namespace: "rl", Revision: 1, IsInstall: true}
	rv, err := cutil.ToRenderValuesWithSchemaValidation(ch, vals, opts, caps, false)
	if err != nil {
		return nil, nil, fmt.Errorf("values: %w", err)
	}
	files, err := engine.Render(ch, rv)
	if err != nil {
		return nil, nil, fmt.Errorf("render: %w", err)
	}
	var out []manifest
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if path.Base(name) == "NOTES.txt" || !strings.HasSuffix(name, ".yaml") {
			continue
		}
		for _, doc := range splitDocs(files[name]) {
			out = append(out, manifest{Source: name, Body: []byte(doc)})
		}
	}
	return missing, out, nil
}

// splitDocs splits a multi-document YAML stream at "---" lines, dropping
// documents that hold only whitespace and comments.
func splitDocs(s string) []string {
	var docs []string
	var cur strings.Builder
	flush := func() {
		d := cur.String()
		cur.Reset()
		for _, l := range strings.Split(d, "\n") {
			if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") {
				docs = append(docs, d)
				return
			}
		}
	}
	for _, l := range strings.SplitAfter(s, "\n") {
		if strings.TrimRight(l, " \t\r\n") == "---" {
			flush()
			continue
		}
		cur.WriteString(l)
	}
	flush()
	return docs
}

// mergeMaps merges src into dst recursively (src wins), as helm merges
// -f files.
func mergeMaps(dst, src map[string]any) map[string]any {
	out := maps.Clone(dst)
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := out[k].(map[string]any); ok {
				out[k] = mergeMaps(dm, sm)
				continue
			}
		}
		out[k] = v
	}
	return out
}
