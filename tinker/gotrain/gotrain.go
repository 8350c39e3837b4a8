package gotrain

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/tinker"
)

// ErrState is wrapped by errors about a missing or corrupt saved state.
var ErrState = errors.New("gotrain: bad saved state")

// Model is one trainable model.
type Model struct {
	m     *model.Model
	ws    *model.Workspace
	g     *model.Grad
	dlog  []float32
	probs []float64
	grads bool // the accumulator holds a gradient
	adamM []float64
	adamV []float64
	step  int64
}

// New returns a trainable copy of base (base is not modified).
func New(base *model.Model) *Model {
	m := base.Clone()
	return &Model{m: m, ws: m.NewWorkspace(), g: m.NewGrad(), dlog: make([]float32, m.VocabSize()),
		probs: make([]float64, m.VocabSize())}
}

// Policy returns the current weights (do not mutate).
func (t *Model) Policy() *model.Model { return t.m }

// Steps is the number of optimiser steps taken.
func (t *Model) Steps() int64 { return t.step }

// VocabSize and MaxSeqLen are the model's limits.
func (t *Model) VocabSize() int { return t.m.VocabSize() }

// MaxSeqLen is the longest sequence the model takes.
func (t *Model) MaxSeqLen() int { return t.m.MaxSeqLen() }

type lossFn func(lp float64, i int, in map[string]tinker.TensorData) (loss, dlp float64)

func makeLoss(name string, cfg map[string]float64) (lossFn, error) {
	lo, hi := 0.8, 1.2
	if v, ok := cfg["clip_low_threshold"]; ok {
		lo = v
	}
	if v, ok := cfg["clip_high_threshold"]; ok {
		hi = v
	}
	weight := func(in map[string]tinker.TensorData, i int) float64 {
		if w, ok := in["weights"]; ok {
			return w.Data[i]
		}
		return 1
	}
	ratio := func(lp float64, i int, in map[string]tinker.TensorData) (r, a float64) {
		return math.Exp(min(max(lp-in["logprobs"].Data[i], -20), 20)), in["advantages"].Data[i]
	}
	switch name {
	case "cross_entropy":
		return func(lp float64, i int, in map[string]tinker.TensorData) (float64, float64) {
			w := weight(in, i)
			return -w * lp, -w
		}, nil
	case "importance_sampling":
		return func(lp float64, i int, in map[string]tinker.TensorData) (float64, float64) {
			r, a := ratio(lp, i, in)
			return -r * a, -r * a
		}, nil
	case "ppo":
		return func(lp float64, i int, in map[string]tinker.TensorData) (float64, float64) {
			r, a := ratio(lp, i, in)
			un, cl := r*a, min(max(r, lo), hi)*a
			if un <= cl {
				return -un, -r * a
			}
			return -cl, 0
		}, nil
	case "cispo":
		return func(lp float64, i int, in map[string]tinker.TensorData) (float64, float64) {
			r, a := ratio(lp, i, in)
			c := min(max(r, lo), hi)
			return -c * a * lp, -c * a
		}, nil
	}
	return nil, fmt.Errorf("gotrain: unsupported loss %q", name)
}

// ForwardBackward runs the loss over in (validated by
// tinker.ValidateFwdBwd) and, with backward, accumulates its gradient.
func (t *Model) ForwardBackward(in *tinker.ForwardBackwardInput, backward bool) (tinker.ForwardBackwardOutput, error) {
	loss, err := makeLoss(in.LossFn, in.LossFnConfig)
	if err != nil {
		return tinker.ForwardBackwardOutput{}, err
	}
	out := tinker.ForwardBackwardOutput{LossFnOutputType: "TensorData", Metrics: map[string]float64{}}
	var total float64
	for di := range in.Data {
		d := &in.Data[di]
		toks := d.ModelInput.Tokens()
		if len(toks) > t.m.MaxSeqLen() {
			return tinker.ForwardBackwardOutput{}, fmt.Errorf("gotrain: datum %d has %d tokens, the model takes at most %d", di, len(toks), t.m.MaxSeqLen())
		}
		tgt := d.LossFnInputs["target_tokens"].Data
		lps := make([]float64, len(toks))
		els := make([]float64, len(toks))
		for i := range toks {
			logits := t.m.Forward(toks[:i+1], t.ws)
			lse := t.softmax(logits)
			y := int(tgt[i])
			lp := float64(logits[y]) - lse
			l, dlp := loss(lp, i, d.LossFnInputs)
			lps[i], els[i] = lp, l
			total += l
			if !backward || dlp == 0 {
				continue
			}
			for v, p := range t.probs {
				t.dlog[v] = float32(-dlp * p)
			}
			t.dlog[y] += float32(dlp)
			t.m.Backward(t.ws, t.dlog, t.g)
			t.grads = true
		}
		n := []int{len(toks)}
		out.LossFnOutputs = append(out.LossFnOutputs, tinker.LossFnOutput{
			"logprobs":         {Data: lps, DType: "float32", Shape: n},
			"elementwise_loss": {Data: els, DType: "float32", Shape: n},
		})
	}
	out.Metrics["loss:sum"] = total
	return out, nil
}

// softmax fills t.probs with softmax(logits) and returns log-sum-exp.
func (t *Model) softmax(logits []float32) float64 {
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = max(mx, float64(v))
	}
	var s float64
	for i, v := range logits {
		e := math.Exp(float64(v) - mx)
		t.probs[i] = e
		s += e
	}
	for i := range t.probs {
		t.probs[i] /= s
	}
	return mx + math.Log(s)
}

// OptimStep applies the accumulated gradient with AdamW and clears it.
// Without a gradient it still counts the step (Tinker allows an optim_step
// after a forward only) but leaves the weights unchanged.
func (t *Model) OptimStep(p tinker.AdamParams) (map[string]float64, error) {
	g := t.m.Flatten(t.g)
	if t.adamM == nil {
		t.adamM = make([]float64, len(g))
		t.adamV = make([]float64, len(g))
	}
	var norm float64
	for _, v := range g {
		norm += v * v
	}
	norm = math.Sqrt(norm)
	if math.IsNaN(norm) || math.IsInf(norm, 0) {
		t.g.Reset()
		t.grads = false
		return nil, fmt.Errorf("gotrain: gradient norm is %v; step skipped", norm)
	}
	scale := 1.0
	if p.GradClipNorm > 0 && norm > p.GradClipNorm {
		scale = p.GradClipNorm / norm
	}
	t.step++
	if t.grads {
		b1c := 1 - math.Pow(p.Beta1, float64(t.step))
		b2c := 1 - math.Pow(p.Beta2, float64(t.step))
		t.m.UpdateParams(func(w []float32) {
			for i, gi := range g {
				gi *= scale
				t.adamM[i] = p.Beta1*t.adamM[i] + (1-p.Beta1)*gi
				t.adamV[i] = p.Beta2*t.adamV[i] + (1-p.Beta2)*gi*gi
				upd := (t.adamM[i] / b1c) / (math.Sqrt(t.adamV[i]/b2c) + p.Eps)
				w[i] = float32(float64(w[i]) - p.LearningRate*(upd+p.WeightDecay*float64(w[i])))
			}
		})
	}
	t.g.Reset()
	t.grads = false
	return map[string]float64{"grad_norm:mean": norm, "learning_rate:mean": p.LearningRate, "step:max": float64(t.step)}, nil
}

// SaveSampler writes the BF16 serving checkpoint an engine loads.
func (t *Model) SaveSampler(dir string) error { return t.m.SaveServing(dir) }

type stateMeta struct {
	Config model.Config `json:"config"`
	Step   int64        `json:"step"`
	Params int          `json:"params"`
	Adam   bool         `json:"adam"`
	SHA256 string       `json:"sha256"`
}

// SaveState writes weights (FP32) and optimiser state into dir:
// state.bin and meta.json (written last, with the checksum of state.bin).
func (t *Model) SaveState(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("gotrain: %w", err)
	}
	var params []float32
	t.m.UpdateParams(func(w []float32) { params = append([]float32(nil), w...) })
	buf := make([]byte, 0, 4*len(params)+16*len(t.adamM))
	for _, v := range params {
		buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
	}
	for i := range t.adamM {
		buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(t.adamM[i]))
		buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(t.adamV[i]))
	}
	sum := sha256.Sum256(buf)
	if err := writeFileSync(filepath.Join(dir, "state.bin"), buf); err != nil {
		return err
	}
	meta, _ := json.Marshal(stateMeta{Config: t.m.Config(), Step: t.step, Params: len(params), Adam: t.adamM != nil, SHA256: hex.EncodeToString(sum[:])})
	return writeFileSync(filepath.Join(dir, "meta.json"), meta)
}

func writeFileSync(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("gotrain: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("gotrain: write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("gotrain: sync %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("gotrain: %w", err)
	}
	return os.Rename(tmp, path)
}

// LoadState replaces the weights (and, with optimizer, the optimiser state
// and step; without, Adam starts fresh) with those SaveState wrote to dir.
// The gradient accumulator is cleared.
func (t *Model) LoadState(dir string, optimizer bool) error {
	mb, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err != nil {
		return fmt.Errorf("%w: %v", ErrState, err)
	}
	var meta stateMeta
	if err := json.Unmarshal(mb, &meta); err != nil {
		return fmt.Errorf("%w: %s/meta.json: %v", ErrState, dir, err)
	}
	if meta.Config != t.m.Config() {
		return fmt.Errorf("%w: %s holds a model of shape %+v, this model is %+v", ErrState, dir, meta.Config, t.m.Config())
	}
	b, err := os.ReadFile(filepath.Join(dir, "state.bin"))
	if err != nil {
		return fmt.Errorf("%w: %v", ErrState, err)
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != meta.SHA256 {
		return fmt.Errorf("%w: %s/state.bin does not match its checksum", ErrState, dir)
	}
	n := meta.Params
	want := 4 * n
	if meta.Adam {
		want += 16 * n
	}
	if len(b) != want || n != t.m.NumParams() {
		return fmt.Errorf("%w: %s/state.bin has %d bytes, want %d", ErrState, dir, len(b), want)
	}
	t.m.UpdateParams(func(w []float32) {
		for i := range w {
			w[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	})
	t.g.Reset()
	t.grads = false
	t.adamM, t.adamV, t.step = nil, nil, 0
	if optimizer && meta.Adam {
		t.adamM, t.adamV = make([]float64, n), make([]float64, n)
		o := b[4*n:]
		for i := range n {
			t.adamM[i] = math.Float64frombits(binary.LittleEndian.Uint64(o[16*i:]))
			t.adamV[i] = math.Float64frombits(binary.LittleEndian.Uint64(o[16*i+8:]))
		}
		t.step = meta.Step
	}
	return nil
}
