package node

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/internal/realtok"
	"github.com/asyncrl/asyncrl/wiring"
	"github.com/rs/zerolog"
)

// TestInitCheckpointWithoutTokenizer: asyncrl sft's serving directories
// hold the weights only (config.json, model.safetensors); an RL run that
// starts from one with trainer.init_checkpoint trains and serves those
// weights but tokenises — and renders its chat template — with the model
// directory's copy of model.tokenizer. Before, the run refused to start
// ("rollout.chat_template: no tokenizer directory").
func TestInitCheckpointWithoutTokenizer(t *testing.T) {
	cfg := smallConfig(t, 1)
	cfg.Model.Arch, cfg.Model.Preset, cfg.Model.Tokenizer = config.ArchQwen3, "tiny", realtok.Dir(t, realtok.Qwen3)
	cfg.Rollout.ChatTemplate = true
	modelDir, _, err := wiring.ModelDir(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// an SFT serving directory: the checkpoint's weights, no tokenizer
	ic := filepath.Join(t.TempDir(), "serving")
	if err := os.MkdirAll(ic, 0o755); err != nil {
		t.Fatal(err)
	}
	copyFiles(t, modelDir, ic, "config.json", "model.safetensors")
	cfg.Trainer.InitCheckpoint = ic
	n := &Node{cfg: cfg, opts: Options{Logger: zerolog.Nop()}}
	if err := n.resolveModel(); err != nil {
		t.Fatal(err)
	}
	if n.hf != ic || n.tok != modelDir {
		t.Fatalf("weights from %q, tokenizer from %q; want %q and the model directory %q", n.hf, n.tok, ic, modelDir)
	}
	if _, err := wiring.ChatFormat(cfg.Rollout, wiring.RunTokenizer(cfg, n.tok)); err != nil {
		t.Fatalf("the chat template of the run's tokenizer: %v", err)
	}
	// a checkpoint that has its own tokenizer is tokenised with it
	copyFiles(t, modelDir, ic, "tokenizer.json", "tokenizer_config.json")
	n = &Node{cfg: cfg, opts: Options{Logger: zerolog.Nop()}}
	if err := n.resolveModel(); err != nil || n.tok != ic {
		t.Fatalf("a checkpoint with a tokenizer: tokenizer from %q (%v), want %q", n.tok, err, ic)
	}
}

// copyFiles copies the named files from one directory to another.
func copyFiles(t *testing.T, from, to string, names ...string) {
	t.Helper()
	for _, f := range names {
		b, err := os.ReadFile(filepath.Join(from, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
