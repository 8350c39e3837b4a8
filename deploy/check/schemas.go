package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// The schemas come from two pinned Go modules fetched through the Go
// module proxy (the only registry CI reaches; kubeconform's default
// schema URLs on GitHub are not): the Kubernetes API's OpenAPI document
// (api/openapi-spec/swagger.json of k8s.io/kubernetes, the release the
// k8s.io/api modules helm is built with belong to) and the
// ServiceMonitor CRD (example/prometheus-operator-crd of
// prometheus-operator's root module; v0.85.0 is the newest root-module
// version the proxy serves here — the CRD's v1 schema is stable across
// these releases). Each module's h1: hash is pinned below and compared
// with what `go mod download` verified, so a changed module fails the
// check instead of silently changing the schemas.
type pinnedModule struct {
	Path, Version, Sum string
}

var (
	kubernetesModule = pinnedModule{"k8s.io/kubernetes", "v1.37.2", "h1:A2VDEiObzkYqFTKhSsn0ZEb0RlLEXpHWj93gi2HqEwE="}
	promOpModule     = pinnedModule{"github.com/prometheus-operator/prometheus-operator", "v0.85.0", "h1:M5xLCLEoaW2IJfnuCwFzzpL+jSVQu3KGT84Pye+fW8s="}
)

const (
	swaggerPath = "api/openapi-spec/swagger.json"
	smCRDPath   = "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml"
)

// download fetches m through the module proxy (or the module cache) and
// returns its directory, after checking the hash the go command verified
// is the pinned one.
func download(m pinnedModule) (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", m.Path+"@"+m.Version)
	// Outside any module, so neither this module's go.mod nor go.sum is
	// touched; GOFLAGS from the caller (e.g. -mod=vendor) would not apply.
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GOFLAGS=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var info struct{ Dir, Sum, Error string }
	_ = json.Unmarshal(out, &info)
	if err != nil || info.Error != "" {
		return "", fmt.Errorf("go mod download %s@%s: %v %s %s (the Go module proxy must be reachable, or the module in the module cache)",
			m.Path, m.Version, err, info.Error, strings.TrimSpace(stderr.String()))
	}
	if info.Sum != m.Sum {
		return "", fmt.Errorf("%s@%s: hash %s, pinned %s: the schema source changed; check it and update the pin in deploy/check/schemas.go", m.Path, m.Version, info.Sum, m.Sum)
	}
	return info.Dir, nil
}

// gvk names one Kubernetes resource type.
type gvk struct{ Group, Version, Kind string }

func (g gvk) apiVersion() string {
	if g.Group == "" {
		return g.Version
	}
	return g.Group + "/" + g.Version
}

// schemaFile is the file kubeconform's local registry looks for with the
// template "{{ .ResourceKind }}{{ .KindSuffix }}.json": the lower-case
// kind, then the group's first label (none for the core group) and the
// version (kubeconform's pkg/registry schemaPath, v0.8.0).
func (g gvk) schemaFile() string {
	suffix := "-" + strings.ToLower(g.Version)
	if g.Group != "" {
		suffix = "-" + strings.ToLower(strings.Split(g.Group, ".")[0]) + suffix
	}
	return strings.ToLower(g.Kind) + suffix + ".json"
}

// schemaSet writes kubeconform schemas for the kinds asked of it.
type schemaSet struct {
	dir  string
	defs map[string]any // swagger definitions, converted
	byGV map[gvk]string // resource type → definition name
	crds map[gvk]any    // CRD schemas, converted
}

// loadSchemas reads the pinned sources and converts them (see convert).
func loadSchemas(dir string) (*schemaSet, error) {
	kdir, err := download(kubernetesModule)
	if err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(filepath.Join(kdir, swaggerPath))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", kubernetesModule.Path, err)
	}
	var sw struct {
		Definitions map[string]any `json:"definitions"`
	}
	if err := json.Unmarshal(raw, &sw); err != nil {
		return nil, fmt.Errorf("%s: %w", swaggerPath, err)
	}
	s := &schemaSet{dir: dir, defs: map[string]any{}, byGV: map[gvk]string{}, crds: map[gvk]any{}}
	for name, d := range sw.Definitions {
		s.defs[name] = convert(d)
		dm, _ := d.(map[string]any)
		gvks, _ := dm["x-kubernetes-group-version-kind"].([]any)
		for _, x := range gvks {
			xm, _ := x.(map[string]any)
			g := gvk{str(xm["group"]), str(xm["version"]), str(xm["kind"])}
			// Several definitions name the same GVK only for DeleteOptions-
			// like shared types; a resource's own definition is the one
			// whose name ends in its kind.
			if old, ok := s.byGV[g]; !ok || strings.HasSuffix(name, "."+g.Kind) && !strings.HasSuffix(old, "."+g.Kind) {
				s.byGV[g] = name
			}
		}
	}
	// Kubernetes' own special string types, written as kubeconform's
	// schemas (openapi2jsonschema) write them: int-or-string and quantity
	// accept a number too.
	s.defs["io.k8s.apimachinery.pkg.util.intstr.IntOrString"] = intOrString()
	s.defs["io.k8s.apimachinery.pkg.api.resource.Quantity"] = map[string]any{"anyOf": []any{
		map[string]any{"type": "string"}, map[string]any{"type": "number"}}}

	pdir, err := download(promOpModule)
	if err != nil {
		return nil, err
	}
	if err := s.addCRD(filepath.Join(pdir, smCRDPath)); err != nil {
		return nil, err
	}
	return s, nil
}

// addCRD converts every served version's openAPIV3Schema of the CRD in
// file; its metadata is checked as any object's (the swagger ObjectMeta).
func (s *schemaSet) addCRD(file string) error {
	raw, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("CRD: %w", err)
	}
	var crd struct {
		Spec struct {
			Group string `json:"group"`
			Names struct {
				Kind string `json:"kind"`
			} `json:"names"`
			Versions []struct {
				Name   string `json:"name"`
				Schema struct {
					OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		return fmt.Errorf("CRD %s: %w", file, err)
	}
	for _, v := range crd.Spec.Versions {
		root, _ := convert(v.Schema.OpenAPIV3Schema).(map[string]any)
		if root == nil {
			return fmt.Errorf("CRD %s: version %s has no openAPIV3Schema", file, v.Name)
		}
		if props, ok := root["properties"].(map[string]any); ok {
			props["metadata"] = map[string]any{"$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}
		}
		s.crds[gvk{crd.Spec.Group, v.Name, crd.Spec.Names.Kind}] = root
	}
	return nil
}

// write writes the schema file of g into the set's directory; false when
// no source defines g.
func (s *schemaSet) write(g gvk) (bool, error) {
	var root any
	if c, ok := s.crds[g]; ok {
		root = c
	} else if name, ok := s.byGV[g]; ok {
		root = s.defs[name] // the kind's own definition at the root: errors name the field, not an allOf
	} else {
		return false, nil
	}
	// One self-contained file per kind: the root plus every definition it
	// reaches (kubeconform compiles each file on its own, offline).
	defs := map[string]any{}
	s.reach(root, defs)
	doc := map[string]any{"$schema": "http://json-schema.org/draft-04/schema#", "definitions": defs}
	if rm, ok := root.(map[string]any); ok {
		for k, v := range rm {
			doc[k] = v
		}
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return false, err
	}
	return true, os.WriteFile(filepath.Join(s.dir, g.schemaFile()), b, 0o644)
}

// reach adds to defs every definition node refers to, transitively.
func (s *schemaSet) reach(node any, defs map[string]any) {
	switch n := node.(type) {
	case map[string]any:
		if ref, ok := n["$ref"].(string); ok {
			name := strings.TrimPrefix(ref, "#/definitions/")
			if _, seen := defs[name]; !seen {
				if d, ok := s.defs[name]; ok {
					defs[name] = d
					s.reach(d, defs)
				}
			}
		}
		for _, v := range n {
			s.reach(v, defs)
		}
	case []any:
		for _, v := range n {
			s.reach(v, defs)
		}
	}
}

// convert turns an OpenAPI (v2 definition or v3 CRD) schema into the JSON
// Schema draft 4 kubeconform validates with, as kubeconform's
// openapi2jsonschema.py does for its published schemas: int-or-string
// becomes string or integer, and (strict) every object that lists its
// properties refuses others unless it preserves unknown fields — a
// misspelt field in a template is an error, as the API server's strict
// field validation makes it.
func convert(node any) any {
	n, ok := node.(map[string]any)
	if !ok {
		return node // true/false, or not a schema
	}
	if n["format"] == "int-or-string" || n["x-kubernetes-int-or-string"] == true {
		return intOrString()
	}
	out := make(map[string]any, len(n)+1)
	for k, v := range n {
		switch k {
		case "properties", "patternProperties", "definitions": // name → schema
			if m, ok := v.(map[string]any); ok {
				c := make(map[string]any, len(m))
				for name, sub := range m {
					c[name] = convert(sub)
				}
				v = c
			}
		case "allOf", "anyOf", "oneOf", "items": // schemas (items: one or a list)
			if l, ok := v.([]any); ok {
				c := make([]any, len(l))
				for i, sub := range l {
					c[i] = convert(sub)
				}
				v = c
			} else {
				v = convert(v)
			}
		case "additionalProperties", "not":
			v = convert(v)
		}
		out[k] = v
	}
	_, hasProps := n["properties"]
	_, hasAdd := n["additionalProperties"]
	if hasProps && !hasAdd && n["x-kubernetes-preserve-unknown-fields"] != true {
		out["additionalProperties"] = false
	}
	return out
}

func intOrString() map[string]any {
	return map[string]any{"anyOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "integer"}}}
}

func str(v any) string { s, _ := v.(string); return s }
