package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/internal/realtok"
	"github.com/asyncrl/asyncrl/model"
)

// TestRunTrainsHuggingFaceModel: the loop on a real architecture — a
// random-initialised tiny Qwen3-MoE with the real Qwen3 tokenizer (the
// model section), the PyTorch worker training it as model kind hf through
// the bridge, the built-in engines serving each version's HF directory,
// chat-format multi-turn episodes with R3 on. Every step trains tokens
// whose trainer logprobs equal the engines', the engines end on the last
// version, the checkpoint was written where
// the model section says, and the child's per-step directories are
// pruned (the newest serving directories and one state).
func TestRunTrainsHuggingFaceModel(t *testing.T) {
	argv, env := torchWorker(t)
	const steps = 2
	cfg := smallConfig(t, steps)
	cfg.Model.Arch, cfg.Model.Preset, cfg.Model.Tokenizer = config.ModelArch("qwen3_moe"), "tiny", realtok.Dir(t, "qwen3")
	cfg.Trainer.Backend, cfg.Trainer.Exec, cfg.Trainer.ExecEnv = config.BackendExec, argv, env
	cfg.Trainer.LearningRate = 3e-4
	cfg.Rollout.Task, cfg.Rollout.ChatTemplate, cfg.Rollout.ChatTemplateKwargs = "guess_chat", true, `{"enable_thinking": false}`
	cfg.Rollout.RoutedExperts.Enabled = true
	cfg.Filter.Mode = config.FilterNone
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}

	n, s := runNode(t, cfg, nil)

	checkRanAllSteps(t, s, steps)
	// A random-init model answers nothing valid: every group has zero
	// variance and no gradient, so the weights stay the checkpoint's and
	// the trainer's logprobs (with the engines' routes replayed) must equal
	// the engines' up to float32 rounding.
	for _, r := range n.steps() {
		if r.Stats.Tokens <= 0 || !(r.Stats.Mismatch < 1e-4) {
			t.Errorf("step %d: %d tokens, mismatch %g (want tokens and < 1e-4): %+v", r.Step, r.Stats.Tokens, r.Stats.Mismatch, r.Stats)
		}
	}
	checkLedger(t, n, s)

	mt, err := model.ReadModelType(filepath.Join(cfg.Run.DataDir, "models", "qwen3_moe-tiny-seed1"))
	if err != nil || mt != "qwen3_moe" {
		t.Errorf("the random-initialised checkpoint: model_type %q, %v", mt, err)
	}
	var states int
	err = filepath.WalkDir(execDir(cfg), func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && strings.HasPrefix(d.Name(), "state-") {
			states++
		}
		return err
	})
	if err != nil || states != 1 {
		t.Errorf("%d child state directories left under %s (%v), want the last step's only", states, execDir(cfg), err)
	}
}
