package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/weights/safetensors"
)

// TestTorchChildTrainsHFCheckpoint drives the torch worker through the
// real bridge with the Init InitFor builds for model kind "hf" (issue 29):
// a random deepseek_v3 checkpoint in HF layout (sharded), a TrainBatch
// whose routes cover every decoder layer, and a serving checkpoint Go's
// safetensors reader opens -- BF16 weights, the F32 router correction
// bias, the input's shard split and config.json.
func TestTorchChildTrainsHFCheckpoint(t *testing.T) {
	spec := torchChildSpec(t)
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "ckpt")
	writeHFCheckpoint(t, spec, ckpt, "'deepseek_v3', vocab_size=256, seed=3, std=0.1, bias_std=0.2, max_shard_size=60000")
	tc := model.DefaultTrainerConfig()
	tc.LR = 1e-3
	in, err := InitFor(tc, true, "hf", ckpt, filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	if in.Model.Config != nil {
		t.Fatalf("kind hf sends no model.config, got %v", in.Model.Config)
	}
	ctx := context.Background()
	c := startChild(t, spec)
	if _, err := c.Call(ctx, TypeInit, &in, TypeReady, time.Minute); err != nil {
		t.Fatalf("Init: %v", err)
	}

	tb, tok := plainBatch(crossSequences(256))
	var routes []int32
	trained := 0
	const layers, topK = 3, 2 // the tiny deepseek_v3: layer 0 dense, 1 and 2 MoE
	for i, id := range tok {
		trained += int(tb.Arrays["loss_mask"].Data[i])
		routes = append(routes, 0, 0) // the dense layer's row, as the engine reports it
		for l := 1; l < layers; l++ {
			e := (id + int32(l)) % 8
			routes = append(routes, e, (e+3)%8)
		}
	}
	tb.Microbatches = [][]int{{0, 3, 5}, {1, 6}, {2, 4, 7}}
	tb.Arrays["routes"] = Int32TensorShaped(routes, int64(len(tok)), layers, topK)
	rep, err := c.Call(ctx, TypeTrainBatch, tb, TypeStepResult, time.Minute)
	if err != nil {
		t.Fatalf("TrainBatch: %v", err)
	}
	res, err := stepResult(rep)
	if err != nil {
		t.Fatal(err)
	}
	if res.Metrics["tokens"] != float64(trained) || math.IsNaN(res.Metrics["loss"]) || res.Metrics["grad_norm"] <= 0 {
		t.Fatalf("metrics %v (trained tokens %d)", res.Metrics, trained)
	}

	// The serving checkpoint, read the way the Go side reads checkpoints.
	ck, err := safetensors.OpenDir(res.Checkpoint)
	if err != nil {
		t.Fatalf("Go cannot open the serving checkpoint: %v", err)
	}
	defer ck.Close()
	if len(ck.Shards()) < 2 {
		t.Errorf("serving checkpoint has shards %v; the input was sharded", ck.Shards())
	}
	for name, want := range map[string]safetensors.DType{
		"model.layers.2.mlp.experts.7.down_proj.weight":      safetensors.BF16,
		"model.layers.1.self_attn.kv_a_proj_with_mqa.weight": safetensors.BF16,
		"model.layers.1.mlp.gate.e_score_correction_bias":    safetensors.F32,
		"lm_head.weight": safetensors.BF16,
	} {
		f, err := ck.File(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		info, err := f.Info(name)
		if err != nil || info.DType != want {
			t.Errorf("%s: %v %v, want %s", name, info.DType, err, want)
		}
	}
	var cfg map[string]any
	js, err := os.ReadFile(filepath.Join(res.Checkpoint, "config.json"))
	if err == nil {
		err = json.Unmarshal(js, &cfg)
	}
	if err != nil || cfg["model_type"] != "deepseek_v3" || cfg["torch_dtype"] != "bfloat16" {
		t.Fatalf("serving config.json: %v %v", cfg, err)
	}

	// Routes that cover only the MoE layers are not the engine's layout.
	tb.Step = 2
	tb.Arrays["routes"] = Int32TensorShaped(routes[:len(tok)*2*topK], int64(len(tok)), 2, topK)
	_, err = c.Call(ctx, TypeTrainBatch, tb, TypeStepResult, time.Minute)
	var ce *ChildError
	if !errors.As(err, &ce) || ce.Field != "arrays.routes" {
		t.Fatalf("routes over 2 of 3 layers: %v", err)
	}
}

// writeHFCheckpoint writes a random-initialised checkpoint in HF layout
// into dir with the torch worker's randinit.make_checkpoint(dir, ARGS).
func writeHFCheckpoint(t *testing.T, spec Spec, dir, args string) {
	t.Helper()
	script := fmt.Sprintf("from asyncrl_worker.hf import randinit\nrandinit.make_checkpoint(%q, %s)", dir, args)
	cmd := exec.Command(torchPython, "-c", script)
	cmd.Env = append(os.Environ(), spec.Env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("writing the checkpoint: %v: %s", err, out)
	}
}

// plainBatch packs seqs into step 1's TrainBatch: their tokens, offsets,
// loss masks and rewards, every rollout logprob -3 at version 0; tok is
// the tokens flat.
func plainBatch(seqs []crossSeq) (tb *TrainBatch, tok []int32) {
	var off []int64
	var mask []uint8
	var lp []float32
	var ver []int64
	for _, s := range seqs {
		off = append(off, int64(len(tok)))
		for i, id := range s.tokens {
			tok, mask = append(tok, id), append(mask, s.mask[i])
			lp, ver = append(lp, -3), append(ver, 0)
		}
	}
	off = append(off, int64(len(tok)))
	groups := make([]string, len(seqs))
	rewards := make([]float32, len(seqs))
	for i, s := range seqs {
		groups[i], rewards[i] = s.group, s.reward
	}
	return &TrainBatch{Step: 1, Groups: groups, Arrays: map[string]Tensor{
		"tokens": Int32Tensor(tok), "seq_offsets": Int64Tensor(off), "loss_mask": Uint8Tensor(mask),
		"rollout_logprobs": Float32Tensor(lp), "versions": Int64Tensor(ver), "rewards": Float32Tensor(rewards),
	}}, tok
}
