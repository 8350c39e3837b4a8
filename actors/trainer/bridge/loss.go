package bridge

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/asyncrl/asyncrl/model"
)

// Loss keys of Init.loss: the trainer section's YAML names, plus
// temperature and advantage.
var lossKeys = []string{"policy_loss_type", "eps_clip_low", "eps_clip_high", "clip_ratio_c",
	"cispo_eps_clip_low", "cispo_eps_clip_high", "loss_reduction", "max_seq_len", "tis_ratio_type",
	"token_tis_ratio_clip_high", "sequence_tis_ratio_clip_high", "entropy_coef", "kl_coef",
	"normalize_over_support", "temperature", "advantage", "fake_quant"}

// InitFor fills Init's model, optimizer, loss and seed from the built-in
// trainer's config (wiring.PolicyTrainer of the run config: the
// one mapping of the trainer section) and the initial weights in
// modelDir (an HF-layout dir; for kind builtin config.json is embedded).
// normStd is the GRPO advantage's division by the group's std.
func InitFor(t model.TrainerConfig, normStd bool, kind, modelDir, outDir string) (Init, error) {
	in := Init{
		Model: Model{Kind: kind, Path: modelDir},
		Optimizer: Optimizer{Name: "adamw", LR: t.LR, WarmupSteps: t.WarmupSteps, Betas: [2]float64{t.Beta1, t.Beta2}, Eps: t.Eps,
			WeightDecay: t.WeightDecay, MaxGradNorm: t.MaxGradNorm},
		Loss: map[string]any{
			"policy_loss_type": t.PolicyLoss, "eps_clip_low": t.EpsLow, "eps_clip_high": t.EpsHigh,
			"clip_ratio_c": t.ClipRatioC, "cispo_eps_clip_low": t.CISPOEpsLow, "cispo_eps_clip_high": t.CISPOEpsHigh,
			"loss_reduction": t.Reduction, "max_seq_len": int64(t.ReductionMaxSeqLen), "tis_ratio_type": t.TISRatioType,
			"token_tis_ratio_clip_high": t.TokenTISCap, "sequence_tis_ratio_clip_high": t.SequenceTISCap,
			"entropy_coef": t.EntropyCoef, "kl_coef": t.KLCoef, "normalize_over_support": t.SupportNorm,
			"temperature": t.Temperature,
			"advantage":   map[string]any{"estimator": "grpo", "norm_adv_by_std": normStd, "epsilon": 1e-6},
		},
		Seed:   int64(t.Seed),
		OutDir: outDir,
	}
	if t.FakeQuant != "" && t.FakeQuant != string(model.QuantNone) {
		// only when on: a child that cannot fake-quantise refuses the key
		// instead of silently training dense
		in.Loss["fake_quant"] = t.FakeQuant
	}
	if kind == "builtin" {
		js, err := os.ReadFile(filepath.Join(modelDir, model.ConfigFileName))
		if err != nil {
			return Init{}, fmt.Errorf("bridge: model config: %w", err)
		}
		d := json.NewDecoder(bytes.NewReader(js))
		d.UseNumber() // integers stay CBOR integers (vocab_size 98, not 98.0)
		var cfg map[string]any
		if err := d.Decode(&cfg); err != nil {
			return Init{}, fmt.Errorf("bridge: model config %s: %w", modelDir, err)
		}
		for k, v := range cfg {
			if n, ok := v.(json.Number); ok {
				if i, err := n.Int64(); err == nil {
					cfg[k] = i
				} else if f, err := n.Float64(); err == nil {
					cfg[k] = f
				}
			}
		}
		in.Model.Config = cfg
	}
	return in, nil
}

// trainerConfigOf is InitFor's inverse for the built-in child; a bad key
// or value is a *ChildError naming it.
func trainerConfigOf(in Init) (model.TrainerConfig, bool, *ChildError) {
	t := model.DefaultTrainerConfig()
	o := in.Optimizer
	if o.Name != "adamw" {
		return t, false, badField("optimizer.name", "%q: the built-in trainer runs adamw", o.Name)
	}
	t.LR, t.Beta1, t.Beta2, t.Eps, t.WeightDecay, t.MaxGradNorm = o.LR, o.Betas[0], o.Betas[1], o.Eps, o.WeightDecay, o.MaxGradNorm
	t.WarmupSteps = o.WarmupSteps
	normStd := true
	for k, v := range in.Loss {
		if err := setLossKey(&t, &normStd, k, v); err != nil {
			return t, false, err
		}
	}
	t.Seed = uint64(in.Seed)
	t.Workers = max(1, min(runtime.GOMAXPROCS(0), 4))
	if err := t.Validate(); err != nil {
		return t, false, &ChildError{Code: CodeBadField, Field: "loss", Message: err.Error()}
	}
	return t, normStd, nil
}

func badField(field, format string, a ...any) *ChildError {
	return &ChildError{Code: CodeBadField, Field: field, Message: fmt.Sprintf(format, a...)}
}

// setLossKey sets loss key k of the Init to v in t (normStd for the
// advantage's norm_adv_by_std).
func setLossKey(t *model.TrainerConfig, normStd *bool, k string, v any) *ChildError {
	field := "loss." + k
	switch k {
	case "policy_loss_type", "loss_reduction", "tis_ratio_type", "fake_quant":
		str, ok := v.(string)
		if !ok {
			return badField(field, "want text, got %T", v)
		}
		switch k {
		case "fake_quant":
			t.FakeQuant = str
		case "policy_loss_type":
			t.PolicyLoss = str
		case "loss_reduction":
			t.Reduction = str
		default:
			t.TISRatioType = str
		}
	case "normalize_over_support":
		b, ok := v.(bool)
		if !ok {
			return badField(field, "want a bool, got %T", v)
		}
		t.SupportNorm = b
	case "advantage":
		adv, ok := v.(map[string]any)
		if !ok {
			return badField(field, "want a map, got %T", v)
		}
		return setAdvantage(normStd, adv)
	default:
		if !contains(lossKeys, k) {
			return badField(field, "unknown key")
		}
		f, ok := number(v)
		if !ok {
			return badField(field, "want a number, got %T", v)
		}
		if k == "max_seq_len" {
			t.ReductionMaxSeqLen = int(f)
		} else if p := numericLossField(t, k); p != nil {
			*p = f
		}
	}
	return nil
}

// setAdvantage checks loss.advantage: GRPO with the built-in epsilon;
// norm_adv_by_std goes to normStd.
func setAdvantage(normStd *bool, adv map[string]any) *ChildError {
	for ak, av := range adv {
		switch ak {
		case "estimator":
			if av != "grpo" {
				return badField("loss.advantage.estimator", "%v: only grpo", av)
			}
		case "norm_adv_by_std":
			nb, ok := av.(bool)
			if !ok {
				return badField("loss.advantage.norm_adv_by_std", "want a bool, got %T", av)
			}
			*normStd = nb
		case "epsilon":
			if e, ok := number(av); !ok || e != 1e-6 {
				return badField("loss.advantage.epsilon", "%v: the built-in advantages use 1e-6", av)
			}
		default:
			return badField("loss.advantage."+ak, "unknown key")
		}
	}
	return nil
}

// numericLossField is the field of t that numeric loss key k sets (nil
// for a key the built-in trainer ignores).
func numericLossField(t *model.TrainerConfig, k string) *float64 {
	switch k {
	case "eps_clip_low":
		return &t.EpsLow
	case "eps_clip_high":
		return &t.EpsHigh
	case "clip_ratio_c":
		return &t.ClipRatioC
	case "cispo_eps_clip_low":
		return &t.CISPOEpsLow
	case "cispo_eps_clip_high":
		return &t.CISPOEpsHigh
	case "token_tis_ratio_clip_high":
		return &t.TokenTISCap
	case "sequence_tis_ratio_clip_high":
		return &t.SequenceTISCap
	case "entropy_coef":
		return &t.EntropyCoef
	case "kl_coef":
		return &t.KLCoef
	case "temperature":
		return &t.Temperature
	}
	return nil
}
