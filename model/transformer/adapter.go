package transformer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/asyncrl/asyncrl/weights/safetensors"
)

// A LoRA adapter in PEFT's layout, the directory vLLM's
// /v1/load_lora_adapter loads (doc.go, "LoRA adapters"):
//
//   - adapter_config.json: LoraConfig's fields (huggingface/peft
//     src/peft/tuners/lora/config.py); this package reads r, lora_alpha,
//     target_modules (vLLM's required fields: PEFTHelper in
//     vllm-project/vllm @e745baff vllm/lora/peft_helper.py), use_rslora and
//     the options it refuses.
//   - adapter_model.safetensors: per adapted Linear module M (an HF module
//     path such as model.layers.0.self_attn.q_proj),
//     base_model.model.M.lora_A.weight [r, in] and
//     base_model.model.M.lora_B.weight [out, r] (PEFT's LoraLayer.update_layer
//     makes lora_A nn.Linear(in, r) and lora_B nn.Linear(r, out):
//     huggingface/peft @00336949 src/peft/tuners/lora/layer.py; its
//     save_pretrained drops the adapter name from the keys).
//
// The adapted layer computes W·x + scaling·B·(A·x), scaling = lora_alpha/r,
// or lora_alpha/√r with use_rslora (layer.py update_layer; vLLM's
// PEFTHelper.__post_init__ computes the same vllm_lora_scaling_factor).

// PEFT adapter file names (PEFT's save_pretrained writes them; vLLM's
// LoRAModel.from_local_checkpoint reads them).
const (
	AdapterConfigName  = "adapter_config.json"
	AdapterWeightsName = "adapter_model.safetensors"
)

// ErrAdapter wraps every LoRA adapter error (a refused file, option,
// tensor or module).
var ErrAdapter = errors.New("transformer: bad LoRA adapter")

// AdapterConfig is what this package reads of adapter_config.json.
type AdapterConfig struct {
	// PeftType is "LORA" (absent: LORA).
	PeftType string
	// TaskType is PEFT's task_type (CAUSAL_LM for these models); not checked.
	TaskType string
	// BaseModel is base_model_name_or_path, informational (vLLM does not
	// check it against the served model either).
	BaseModel string
	// R is the rank every module's A and B have.
	R int
	// LoraAlpha is lora_alpha.
	LoraAlpha float64
	// TargetModules is target_modules as PEFT wrote it: a list of module
	// name suffixes, or one regular expression (TargetRegex). The tensors
	// in adapter_model.safetensors, not this list, decide what is adapted
	// (as vLLM: a target that matched nothing leaves no tensors).
	TargetModules []string
	TargetRegex   string
	// UseRSLoRA scales by lora_alpha/√r instead of lora_alpha/r.
	UseRSLoRA bool
}

// Scaling is the factor of B·A: lora_alpha/r, or lora_alpha/√r with
// use_rslora.
func (c AdapterConfig) Scaling() float64 {
	if c.UseRSLoRA {
		return c.LoraAlpha / math.Sqrt(float64(c.R))
	}
	return c.LoraAlpha / float64(c.R)
}

// Adapter is a read and checked PEFT LoRA adapter, independent of any base
// model until Apply.
type Adapter struct {
	Dir    string
	Config AdapterConfig
	mods   []loraModule // by module name
}

// loraModule is one adapted Linear: A [r, in] and B [out, r], row-major.
type loraModule struct {
	name         string // HF module path
	aName, bName string // tensor names in adapter_model.safetensors
	a, b         []float32
	r, in, out   int
}

// Modules lists the adapted modules' HF paths, sorted.
func (a *Adapter) Modules() []string {
	out := make([]string, len(a.mods))
	for i, m := range a.mods {
		out[i] = m.name
	}
	return out
}

// IsAdapterDir reports whether dir holds adapter_config.json (a PEFT
// adapter rather than a checkpoint).
func IsAdapterDir(dir string) bool {
	fi, err := os.Stat(filepath.Join(dir, AdapterConfigName))
	return err == nil && fi.Mode().IsRegular()
}

// LoadAdapter reads the PEFT adapter in dir and applies it onto base:
// ReadAdapter then Apply.
func LoadAdapter(base *Model, dir string) (*Model, error) {
	a, err := ReadAdapter(dir)
	if err != nil {
		return nil, err
	}
	return a.Apply(base)
}

// ReadAdapter reads adapter_config.json and adapter_model.safetensors of
// dir and checks them as vLLM does before it knows the model: the
// options vLLM refuses (DoRA, modules_to_save: PEFTHelper._validate_features;
// a LoRA bias without --enable-lora-bias: PEFTHelper.validate_legal, which
// asyncrl has no equivalent of) and tensor names that are not
// lora_A/lora_B weights (vllm/lora/utils.py parse_fine_tuned_lora_name,
// vllm-project/vllm @001e63a8). It also refuses what vLLM would load but
// serve differently from what PEFT trained: rank_pattern / alpha_pattern
// (vLLM scales every module by the one lora_alpha/r) and modules whose A
// and B ranks disagree with r. Errors wrap ErrAdapter and name the file
// and the field or tensor.
func ReadAdapter(dir string) (*Adapter, error) {
	cfg, err := readAdapterConfig(dir)
	if err != nil {
		return nil, err
	}
	mods, err := readAdapterTensors(dir, cfg)
	if err != nil {
		return nil, err
	}
	return &Adapter{Dir: dir, Config: cfg, mods: mods}, nil
}

func readAdapterConfig(dir string) (AdapterConfig, error) {
	var c AdapterConfig
	path := filepath.Join(dir, AdapterConfigName)
	js, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("%w: %w", ErrAdapter, err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(js, &m); err != nil {
		return c, fmt.Errorf("%w: %s: %v", ErrAdapter, path, err)
	}
	a := adapterJSON{path: path, m: m}
	for _, read := range []func(*AdapterConfig) error{a.readRank, a.readTargets, a.readPeftFields, a.refuseUnsupported} {
		if err := read(&c); err != nil {
			return c, err
		}
	}
	return c, nil
}

// adapterJSON is adapter_config.json's top-level object, read from path.
type adapterJSON struct {
	path string
	m    map[string]json.RawMessage
}

func (a adapterJSON) bad(key, format string, args ...any) error {
	return fmt.Errorf("%w: %s: field %q: %s", ErrAdapter, a.path, key, fmt.Sprintf(format, args...))
}

// get decodes key into v; false when it is absent or null.
func (a adapterJSON) get(key string, v any) (bool, error) {
	r, ok := a.m[key]
	if !ok || bytes.Equal(bytes.TrimSpace(r), []byte("null")) {
		return false, nil
	}
	if err := json.Unmarshal(r, v); err != nil {
		return true, a.bad(key, "%v", err)
	}
	return true, nil
}

// readRank reads the required fields' presence, the rank r and lora_alpha.
func (a adapterJSON) readRank(c *AdapterConfig) error {
	for _, k := range []string{"r", "lora_alpha", "target_modules"} {
		if _, ok := a.m[k]; !ok {
			// PEFTHelper.from_dict: "Missing required configuration fields".
			return a.bad(k, "missing (r, lora_alpha and target_modules are required, as vLLM requires them)")
		}
	}
	var r float64
	if _, err := a.get("r", &r); err != nil {
		return err
	}
	if r != math.Trunc(r) || r < 1 || r > 1<<16 {
		return a.bad("r", "want a positive integer rank, got %v", r)
	}
	c.R = int(r)
	if ok, err := a.get("lora_alpha", &c.LoraAlpha); err != nil {
		return err
	} else if !ok || math.IsNaN(c.LoraAlpha) || math.IsInf(c.LoraAlpha, 0) {
		return a.bad("lora_alpha", "want a number")
	}
	return nil
}

// readTargets reads target_modules: a list of module names or a regular
// expression.
func (a adapterJSON) readTargets(c *AdapterConfig) error {
	var tm any
	if _, err := a.get("target_modules", &tm); err != nil {
		return err
	}
	switch v := tm.(type) {
	case string:
		c.TargetRegex = v
	case []any:
		for _, x := range v {
			s, ok := x.(string)
			if !ok {
				return a.bad("target_modules", "want module names, got %v", x)
			}
			c.TargetModules = append(c.TargetModules, s)
		}
	default:
		return a.bad("target_modules", "want a list of module names or a regular expression, got %v", tm)
	}
	return nil
}

// readPeftFields reads peft_type (LoRA only), task_type, the base model and
// use_rslora.
func (a adapterJSON) readPeftFields(c *AdapterConfig) error {
	if _, err := a.get("peft_type", &c.PeftType); err != nil {
		return err
	}
	if c.PeftType != "" && c.PeftType != "LORA" {
		return a.bad("peft_type", "%q: only LoRA adapters (LORA) are served", c.PeftType)
	}
	if _, err := a.get("task_type", &c.TaskType); err != nil {
		return err
	}
	if _, err := a.get("base_model_name_or_path", &c.BaseModel); err != nil {
		return err
	}
	_, err := a.get("use_rslora", &c.UseRSLoRA)
	return err
}

// refuseUnsupported refuses, in this order, the PEFT options vLLM would
// serve differently from how PEFT trained: each set field is an error.
func (a adapterJSON) refuseUnsupported(*AdapterConfig) error {
	for _, f := range []struct {
		key string
		v   any
		set func(any) bool
		msg func(any) string
	}{
		{"use_dora", new(bool), isTrue, fixed("DoRA adapters are not supported (vLLM: \"vLLM does not yet support DoRA\"); train a plain LoRA")},
		{"modules_to_save", new([]any), func(v any) bool { return len(*v.(*[]any)) > 0 }, func(v any) string {
			return fmt.Sprintf("%v: fully trained extra modules are not supported (vLLM: \"only supports modules_to_save being None\"); leave it null", *v.(*[]any))
		}},
		{"bias", new(string), func(v any) bool { b := *v.(*string); return b != "" && b != "none" }, func(v any) string {
			return fmt.Sprintf("%q: LoRA biases are not supported (vLLM needs --enable-lora-bias); train with bias \"none\"", *v.(*string))
		}},
		{"lora_bias", new(bool), isTrue, fixed("a bias on lora_B is not supported; train with lora_bias false")},
		{"fan_in_fan_out", new(bool), isTrue, fixed("true is for Conv1D (GPT-2) layers; these architectures' projections are nn.Linear")},
		{"rank_pattern", new(map[string]any), nonEmptyMap, fixed(patternMsg)},
		{"alpha_pattern", new(map[string]any), nonEmptyMap, fixed(patternMsg)},
	} {
		if _, err := a.get(f.key, f.v); err != nil {
			return err
		}
		if f.set(f.v) {
			return a.bad(f.key, "%s", f.msg(f.v))
		}
	}
	return nil
}

const patternMsg = "per-module ranks or alphas are not supported (vLLM would scale every module by lora_alpha/r, not what PEFT trained); leave it empty"

func isTrue(v any) bool                 { return *v.(*bool) }
func nonEmptyMap(v any) bool            { return len(*v.(*map[string]any)) > 0 }
func fixed(msg string) func(any) string { return func(any) string { return msg } }

// loraName splits a PEFT tensor name into its module path and whether it
// is lora_A; anything but a lora_A/lora_B weight is refused with the
// reason.
func loraName(name string) (module string, isA bool, err error) {
	// parse_fine_tuned_lora_name: the base_model.model. prefix is PEFT's
	// wrapper (PeftModel.base_model = LoraModel, .model = the HF model);
	// vLLM also takes names without it.
	rest := strings.TrimPrefix(name, "base_model.model.")
	switch {
	case strings.HasSuffix(rest, ".lora_A.weight"):
		module, isA = strings.TrimSuffix(rest, ".lora_A.weight"), true
	case strings.HasSuffix(rest, ".lora_B.weight"):
		module = strings.TrimSuffix(rest, ".lora_B.weight")
	case strings.Contains(rest, "lora_embedding_"):
		return "", false, errors.New("an embedding LoRA (embed_tokens / lm_head); only attention and MLP projections are adapted")
	case strings.Contains(rest, "lora_magnitude_vector"):
		return "", false, errors.New("a DoRA magnitude vector; DoRA is not supported")
	case strings.HasSuffix(rest, ".bias"):
		return "", false, errors.New("a LoRA bias; train with bias \"none\"")
	default:
		return "", false, errors.New("not a LoRA weight (want <module>.lora_A.weight or <module>.lora_B.weight)")
	}
	if module == "" || strings.Contains(module, ".lora_") {
		return "", false, errors.New("not a LoRA weight (want <module>.lora_A.weight or <module>.lora_B.weight)")
	}
	return module, isA, nil
}

func readAdapterTensors(dir string, cfg AdapterConfig) ([]loraModule, error) {
	path := filepath.Join(dir, AdapterWeightsName)
	f, err := openAdapterWeights(dir, path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	byMod := map[string]*loraModule{}
	for _, name := range f.Names() {
		mod, isA, err := loraName(name)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: tensor %q is %v", ErrAdapter, path, name, err)
		}
		if strings.HasSuffix(mod, ".experts") || strings.Contains(mod, ".experts.base_layer") {
			// PEFT's target_parameters on transformers' fused 3-D experts
			// (vLLM's FusedMoE3DWithLoRA path): asyncrl's checkpoints and
			// vLLM's default 2-D path keep one module per expert.
			return nil, fmt.Errorf("%w: %s: tensor %q adapts fused 3-D experts; train per-expert LoRA (target gate_proj/up_proj/down_proj of mlp.experts.E)", ErrAdapter, path, name)
		}
		shape, data, err := readLoraTensor(f, path, name)
		if err != nil {
			return nil, err
		}
		m := byMod[mod]
		if m == nil {
			m = &loraModule{name: mod}
			byMod[mod] = m
		}
		if err := m.add(path, name, isA, shape, data, cfg.R); err != nil {
			return nil, err
		}
	}
	return collectModules(byMod, path, cfg)
}

// openAdapterWeights opens adapter_model.safetensors, naming a pickled
// adapter file found in its place.
func openAdapterWeights(dir, path string) (*safetensors.File, error) {
	f, err := safetensors.Open(path)
	if err == nil {
		return f, nil
	}
	for _, other := range []string{"adapter_model.bin", "adapter_model.pt"} {
		if _, serr := os.Stat(filepath.Join(dir, other)); serr == nil {
			return nil, fmt.Errorf("%w: %s holds %s but no %s; save the adapter with safe_serialization (PEFT's default)", ErrAdapter, dir, other, AdapterWeightsName)
		}
	}
	return nil, fmt.Errorf("%w: %w", ErrAdapter, err)
}

// readLoraTensor reads one LoRA matrix as float32 after checking its rank
// and dtype, and refuses a NaN or infinite value.
func readLoraTensor(f *safetensors.File, path, name string) ([]int64, []float32, error) {
	info, err := f.Info(name)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %w", ErrAdapter, path, err)
	}
	if len(info.Shape) != 2 {
		return nil, nil, fmt.Errorf("%w: %s: tensor %q has shape %v; LoRA weights are matrices", ErrAdapter, path, name, info.Shape)
	}
	switch info.DType {
	case safetensors.F32, safetensors.BF16, safetensors.F16:
	default:
		return nil, nil, fmt.Errorf("%w: %s: tensor %q has dtype %s; want F32, BF16 or F16", ErrAdapter, path, name, info.DType)
	}
	data, _, err := f.ReadFloat32(name)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %w", ErrAdapter, path, err)
	}
	for _, v := range data {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return nil, nil, fmt.Errorf("%w: %s: tensor %q holds a NaN or infinite value", ErrAdapter, path, name)
		}
	}
	return info.Shape, data, nil
}

// add sets the module's lora_A (isA) or lora_B from tensor name, refusing a
// repeat and a shape whose rank is not r.
func (m *loraModule) add(path, name string, isA bool, shape []int64, data []float32, r int) error {
	rows, cols := int(shape[0]), int(shape[1])
	if isA {
		if m.a != nil {
			return fmt.Errorf("%w: %s: tensor %q repeats module %q's lora_A (%q)", ErrAdapter, path, name, m.name, m.aName)
		}
		if rows != r {
			return fmt.Errorf("%w: %s: tensor %q has shape %v; lora_A is [r, in] with r = %d (adapter_config.json)", ErrAdapter, path, name, shape, r)
		}
		m.aName, m.a, m.in = name, data, cols
	} else {
		if m.b != nil {
			return fmt.Errorf("%w: %s: tensor %q repeats module %q's lora_B (%q)", ErrAdapter, path, name, m.name, m.bName)
		}
		if cols != r {
			return fmt.Errorf("%w: %s: tensor %q has shape %v; lora_B is [out, r] with r = %d (adapter_config.json)", ErrAdapter, path, name, shape, r)
		}
		m.bName, m.b, m.out = name, data, rows
	}
	m.r = r
	return nil
}

// collectModules returns the modules sorted by name, each with both
// matrices; an adapter without any is refused.
func collectModules(byMod map[string]*loraModule, path string, cfg AdapterConfig) ([]loraModule, error) {
	if len(byMod) == 0 {
		return nil, fmt.Errorf("%w: %s holds no LoRA weights (did target_modules %v match nothing?)", ErrAdapter, path, targetsOf(cfg))
	}
	mods := make([]loraModule, 0, len(byMod))
	for _, m := range byMod {
		switch {
		case m.a == nil:
			return nil, fmt.Errorf("%w: %s: module %q has %q but no lora_A", ErrAdapter, path, m.name, m.bName)
		case m.b == nil:
			return nil, fmt.Errorf("%w: %s: module %q has %q but no lora_B", ErrAdapter, path, m.name, m.aName)
		}
		mods = append(mods, *m)
	}
	slices.SortFunc(mods, func(x, y loraModule) int { return strings.Compare(x.name, y.name) })
	return mods, nil
}

func targetsOf(c AdapterConfig) any {
	if c.TargetRegex != "" {
		return c.TargetRegex
	}
	return c.TargetModules
}

// Apply returns base with every adapted projection merged: W + scaling·B·A
// in float32. base is not modified, and the result shares every other
// parameter (and its packed transposes) with base, so an adapter costs
// the memory of the projections it adapts. Every module must be a Linear
// projection of base's architecture — attention (q/k/v/o_proj; DeepSeek's
// q_proj or q_a_proj/q_b_proj, kv_a_proj_with_mqa, kv_b_proj) or MLP
// (gate/up/down_proj of the dense MLP, of each expert, of the shared
// experts; the per-expert layout vLLM's 2-D FusedMoEWithLoRA packs,
// LoRAModel.from_local_checkpoint accepting experts.E.* modules:
// vllm-project/vllm @0306474e vllm/lora/lora_model.py) — with A [r, in]
// and B [out, r] fitting it. Router gates, embeddings and lm_head are
// refused. Nothing is applied unless every module passes.
func (a *Adapter) Apply(base *Model) (*Model, error) {
	c := base.cfg
	w := base.w.clone(&c)
	byName := make(map[string]*tensor, len(w.tensors))
	for i := range w.tensors {
		byName[w.tensors[i].name] = &w.tensors[i]
	}
	path := filepath.Join(a.Dir, AdapterWeightsName)
	lins := make([]*linear, len(a.mods))
	for i, m := range a.mods {
		t := byName[m.name+".weight"]
		if t == nil {
			return nil, fmt.Errorf("%w: %s: tensor %q: the base model (model_type %s, %d layers%s) has no module %q",
				ErrAdapter, path, m.aName, c.Arch, c.NumHiddenLayers, moeNote(&c), m.name)
		}
		if t.kind != kindProj || t.lin == nil {
			return nil, fmt.Errorf("%w: %s: tensor %q: module %q is %s, not a linear projection LoRA adapts here (attention: q/k/v/o_proj, q_a/q_b_proj, kv_a_proj_with_mqa, kv_b_proj; MLP: gate/up/down_proj of the MLP, experts and shared experts)",
				ErrAdapter, path, m.aName, m.name, kindName(t.kind))
		}
		l := t.lin
		if m.in != l.in {
			return nil, fmt.Errorf("%w: %s: tensor %q is [%d, %d]; module %q of the base model takes %d inputs (weight [%d, %d])",
				ErrAdapter, path, m.aName, m.r, m.in, m.name, l.in, l.out, l.in)
		}
		if m.out != l.out {
			return nil, fmt.Errorf("%w: %s: tensor %q is [%d, %d]; module %q of the base model has %d outputs (weight [%d, %d])",
				ErrAdapter, path, m.bName, m.out, m.r, m.name, l.out, l.out, l.in)
		}
		lins[i] = l
	}
	scale := float32(a.Config.Scaling())
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(runtime.GOMAXPROCS(0), len(a.mods)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				l := lins[i]
				l.w = mergeLoRA(l.w, a.mods[i], scale)
				l.wt = packPanels(l.w, l.out, l.in)
			}
		}()
	}
	for i := range a.mods {
		next <- i
	}
	close(next)
	wg.Wait()
	return wrapModel(&c, base.gen, w), nil
}

// mergeLoRA returns W + scale·B·A ([out, in]) as a new slice: row o adds
// scale·B[o,k]·A[k,:] for k in order.
func mergeLoRA(w []float32, m loraModule, scale float32) []float32 {
	out := slices.Clone(w)
	for o := range m.out {
		row := out[o*m.in : (o+1)*m.in]
		for k := range m.r {
			s := scale * m.b[o*m.r+k]
			if s == 0 {
				continue
			}
			for i, v := range m.a[k*m.in : (k+1)*m.in] {
				row[i] += s * v
			}
		}
	}
	return out
}

func kindName(k kind) string {
	switch k {
	case kindBias:
		return "a bias"
	case kindNorm:
		return "a norm"
	case kindEmbed:
		return "the token embedding"
	case kindHead:
		return "lm_head"
	case kindRouter:
		return "an MoE router gate"
	case kindCorr:
		return "the router's correction bias"
	}
	return "a projection"
}
