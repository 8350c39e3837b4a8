// Package enginetest is the engine conformance suite: Run checks that an
// engine at a URL — the built-in engine, real vLLM or SGLang — answers
// every route asyncrl's engine drivers use with the shapes the engines'
// own source documents. The shapes are fixtures (testdata/<engine>/*.json,
// each citing the upstream file it was taken from); Fake serves them as a
// small stand-in engine for the drivers' and the CLI's tests.
package enginetest

import (
	"embed"
	"encoding/json"
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/asyncrl/asyncrl/engine/driver"
)

//go:embed testdata
var testdata embed.FS

// Source cites where a fixture's shapes come from.
type Source struct {
	Repo   string `json:"repo"`
	Path   string `json:"path"`
	Commit string `json:"commit"`
}

// Fixture is one route's documented exchange.
type Fixture struct {
	Engine string            `json:"engine"`
	Name   string            `json:"name"`
	Source Source            `json:"source"`
	Method string            `json:"method"`
	Path   string            `json:"path"`
	Query  map[string]string `json:"query"`
	// Request is the body asyncrl sends (null: none).
	Request json.RawMessage `json:"request"`
	Status  int             `json:"status"`
	// Response is a JSON answer; ResponseText a non-JSON one (also an
	// empty body); ResponseFile names a file next to the fixture.
	Response     json.RawMessage `json:"response"`
	ResponseText *string         `json:"response_text"`
	ResponseFile string          `json:"response_file"`
	// DevMode: the route exists only with VLLM_SERVER_DEV_MODE=1.
	DevMode bool `json:"dev_mode"`
	// LoRA: the route exists only with runtime LoRA updating enabled.
	LoRA bool `json:"lora"`
	// Expect holds values a parser must read from the response.
	Expect map[string]float64 `json:"expect"`
	Note   string             `json:"note"`
}

// Body is the response body the fixture documents.
func (f *Fixture) Body() []byte {
	switch {
	case f.ResponseFile != "":
		b, err := testdata.ReadFile(path.Join("testdata", f.Engine, f.ResponseFile))
		if err != nil {
			panic(fmt.Sprintf("enginetest: fixture %s/%s: %v", f.Engine, f.Name, err))
		}
		return b
	case f.ResponseText != nil:
		return []byte(*f.ResponseText)
	default:
		return f.Response
	}
}

// IsJSON reports whether the documented answer is a JSON document.
func (f *Fixture) IsJSON() bool {
	return f.ResponseFile == "" && f.ResponseText == nil && len(f.Response) > 0
}

// Fixtures returns the fixtures of an engine kind (builtin uses vLLM's),
// by name.
func Fixtures(kind driver.Kind) (map[string]*Fixture, error) {
	dir := string(kind)
	if kind == driver.KindBuiltin {
		dir = string(driver.KindVLLM)
	}
	ents, err := testdata.ReadDir(path.Join("testdata", dir))
	if err != nil {
		return nil, fmt.Errorf("enginetest: no fixtures for %q: %w", kind, err)
	}
	out := map[string]*Fixture{}
	for _, e := range ents {
		if path.Ext(e.Name()) != ".json" {
			continue
		}
		b, err := testdata.ReadFile(path.Join("testdata", dir, e.Name()))
		if err != nil {
			return nil, err
		}
		var f Fixture
		if err := json.Unmarshal(b, &f); err != nil {
			return nil, fmt.Errorf("enginetest: fixture %s/%s: %w", dir, e.Name(), err)
		}
		out[f.Name] = &f
	}
	return out, nil
}

// MustFixtures is Fixtures that panics (the fixtures are embedded).
func MustFixtures(kind driver.Kind) map[string]*Fixture {
	fx, err := Fixtures(kind)
	if err != nil {
		panic(err)
	}
	return fx
}

// CheckShape reports where got lacks a part of want's shape: every key of a
// want object must be in got with a value of the same JSON type (checked
// recursively); a want null requires nothing (documented, optional); for
// arrays, when both are non-empty, got's elements must have the shape of
// want's first element. Extra keys in got (extensions) are allowed.
func CheckShape(want, got json.RawMessage) []string {
	var w, g any
	if err := json.Unmarshal(want, &w); err != nil {
		return []string{"fixture: " + err.Error()}
	}
	if err := json.Unmarshal(got, &g); err != nil {
		return []string{fmt.Sprintf("answer is not JSON: %.200q", got)}
	}
	var errs []string
	checkShape("$", w, g, &errs)
	return errs
}

func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case float64:
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

func checkShape(at string, w, g any, errs *[]string) {
	if w == nil {
		return
	}
	if jsonType(w) != jsonType(g) {
		*errs = append(*errs, fmt.Sprintf("%s: want %s, got %s", at, jsonType(w), jsonType(g)))
		return
	}
	switch wv := w.(type) {
	case map[string]any:
		gv := g.(map[string]any)
		if sample, ok := dynamicMap(wv); ok {
			// Keys are data (top_logprobs: token → logprob): every value
			// must have the sample's shape.
			for k, v := range gv {
				checkShape(at+"["+k+"]", sample, v, errs)
			}
			return
		}
		keys := make([]string, 0, len(wv))
		for k := range wv {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if wv[k] == nil {
				continue
			}
			gk, ok := gv[k]
			if !ok {
				*errs = append(*errs, fmt.Sprintf("%s.%s: missing", at, k))
				continue
			}
			checkShape(at+"."+k, wv[k], gk, errs)
		}
	case []any:
		gv := g.([]any)
		if len(wv) == 0 {
			return
		}
		if isTuple(wv) {
			// A tuple (SGLang's [logprob, token_id, text]): position by
			// position.
			for i := range min(len(wv), len(gv)) {
				checkShape(fmt.Sprintf("%s[%d]", at, i), wv[i], gv[i], errs)
			}
			if len(gv) < len(wv) {
				*errs = append(*errs, fmt.Sprintf("%s: %d elements, want %d", at, len(gv), len(wv)))
			}
			return
		}
		for i, e := range gv {
			checkShape(fmt.Sprintf("%s[%d]", at, i), wv[0], e, errs)
		}
	}
}

// dynamicMap reports whether an object's keys are data ("token_id:N", as
// in top_logprobs) and returns one value as the sample shape.
func dynamicMap(m map[string]any) (any, bool) {
	if len(m) == 0 {
		return nil, false
	}
	var sample any
	for k, v := range m {
		if !strings.HasPrefix(k, "token_id:") {
			return nil, false
		}
		sample = v
	}
	return sample, true
}

// isTuple reports whether an array's elements have different JSON types.
func isTuple(a []any) bool {
	for _, e := range a[1:] {
		if jsonType(e) != jsonType(a[0]) {
			return true
		}
	}
	return false
}
