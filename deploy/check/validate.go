package main

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/yannh/kubeconform/pkg/resource"
	"github.com/yannh/kubeconform/pkg/validator"
	"sigs.k8s.io/yaml"
)

// kubeconformValidator validates manifests with kubeconform against the
// schema files the set writes on demand.
type kubeconformValidator struct {
	schemas *schemaSet
	v       validator.Validator
	written map[gvk]bool
}

func newValidator(s *schemaSet) (*kubeconformValidator, error) {
	// A local path template: kubeconform's local registry reads the file,
	// nothing is fetched. Strict: unknown fields and duplicate keys are
	// errors (the schemas forbid unlisted properties, see convert).
	v, err := validator.New([]string{s.dir + "/{{ .ResourceKind }}{{ .KindSuffix }}.json"},
		validator.Opts{Strict: true, KubernetesVersion: strings.TrimPrefix(kubeVersion, "v")})
	if err != nil {
		return nil, fmt.Errorf("kubeconform: %w", err)
	}
	return &kubeconformValidator{schemas: s, v: v, written: map[gvk]bool{}}, nil
}

// validate returns the manifest's kind (group/version/Kind) and its
// errors; a manifest kubeconform skips or finds no schema for is an error
// too: every manifest must be checked.
func (k *kubeconformValidator) validate(m manifest) (string, []string) {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(m.Body, &head); err != nil {
		return "?", []string{fmt.Sprintf("not YAML: %v", err)}
	}
	g := gvk{Version: head.APIVersion, Kind: head.Kind}
	if i := strings.LastIndex(head.APIVersion, "/"); i >= 0 {
		g.Group, g.Version = head.APIVersion[:i], head.APIVersion[i+1:]
	}
	kind := g.apiVersion() + " " + g.Kind
	if !k.written[g] {
		ok, err := k.schemas.write(g)
		if err != nil {
			return kind, []string{err.Error()}
		}
		if !ok {
			return kind, []string{fmt.Sprintf("no schema for %s in Kubernetes %s or the ServiceMonitor CRD", kind, kubeVersion)}
		}
		k.written[g] = true
	}
	res := k.v.ValidateResource(resource.Resource{Path: m.Source, Bytes: m.Body})
	switch res.Status {
	case validator.Valid:
		return kind, nil
	case validator.Invalid:
		var errs []string
		for _, e := range res.ValidationErrors {
			errs = append(errs, fmt.Sprintf("%s %s: %s", kind, e.Path, e.Msg))
		}
		// kubeconform keeps only the first level of causes; a failure
		// deeper down reads "validation failed", so say the whole of it.
		if len(errs) == 0 || strings.Contains(strings.Join(errs, " "), "validation failed") {
			errs = append(errs, fmt.Sprintf("%s: %v", kind, res.Err))
		}
		return kind, errs
	default:
		return kind, []string{fmt.Sprintf("%s: status %d: %v", kind, res.Status, res.Err)}
	}
}

// canaries are manifests with one known mistake each, which the check
// must refuse, and one it must accept: proof that the generated schemas
// are loaded, strict and typed, not an accept-all.
var canaries = []struct {
	name, body string
	valid      bool
}{
	{"a correct Deployment", `apiVersion: apps/v1
kind: Deployment
metadata: {name: ok}
spec:
  selector: {matchLabels: {app: ok}}
  template:
    metadata: {labels: {app: ok}}
    spec:
      containers: [{name: c, image: x, ports: [{containerPort: 80}], resources: {limits: {cpu: 1, memory: 1Gi}}}]
`, true},
	{"a misspelt field (spec.replica)", `apiVersion: apps/v1
kind: Deployment
metadata: {name: bad}
spec:
  replica: 2
  selector: {matchLabels: {app: bad}}
  template: {metadata: {labels: {app: bad}}, spec: {containers: [{name: c, image: x}]}}
`, false},
	{"a missing required field (containers[].name)", `apiVersion: v1
kind: Pod
metadata: {name: bad}
spec: {containers: [{image: x}]}
`, false},
	{"a wrong type (Service port as a word)", `apiVersion: v1
kind: Service
metadata: {name: bad}
spec: {ports: [{port: http}]}
`, false},
	{"a misspelt ServiceMonitor field (spec.endpoint)", `apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata: {name: bad}
spec: {selector: {}, endpoint: [{port: metrics}]}
`, false},
	{"an unknown kind", `apiVersion: apps/v1
kind: Deploymnt
metadata: {name: bad}
`, false},
}

func (k *kubeconformValidator) canaries() error {
	var bad []string
	for _, c := range canaries {
		_, errs := k.validate(manifest{Source: "canary", Body: []byte(c.body)})
		if (len(errs) == 0) != c.valid {
			bad = append(bad, fmt.Sprintf("%s: valid=%v, want %v (%v)", c.name, len(errs) == 0, c.valid, errs))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("the schemas do not judge the canaries right:\n  %s", strings.Join(bad, "\n  "))
	}
	return nil
}

// checkDashboard finds the rendered dashboard ConfigMap (label
// grafana_dashboard) and compares its asyncrl.json with want; "" when
// they agree or the scenario renders no dashboard.
func checkDashboard(ms []manifest, want []byte) string {
	for _, m := range ms {
		var cm struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
			Data map[string]string `json:"data"`
		}
		if yaml.Unmarshal(m.Body, &cm) != nil || cm.Kind != "ConfigMap" || cm.Metadata.Labels["grafana_dashboard"] == "" {
			continue
		}
		got, ok := cm.Data["asyncrl.json"]
		if !ok {
			return m.Source + ": dashboard ConfigMap has no asyncrl.json"
		}
		if !bytes.Equal([]byte(got), want) {
			return m.Source + ": dashboard ConfigMap's asyncrl.json differs from deploy/grafana/asyncrl.json"
		}
	}
	return ""
}
