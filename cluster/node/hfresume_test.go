package node

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/internal/realtok"
	"github.com/asyncrl/asyncrl/weights/safetensors"
)

// hfExecConfig is a run of steps on the random-initialised tiny Qwen3
// (real Qwen3 tokenizer, guess_chat) trained by the PyTorch worker.
func hfExecConfig(t *testing.T, steps int) config.Config {
	t.Helper()
	argv, env := torchWorker(t)
	cfg := smallConfig(t, steps)
	cfg.Model.Arch, cfg.Model.Preset, cfg.Model.Tokenizer = config.ModelArch("qwen3"), "tiny", realtok.Dir(t, "qwen3")
	cfg.Trainer.Backend, cfg.Trainer.Exec, cfg.Trainer.ExecEnv = config.BackendExec, argv, env
	cfg.Trainer.LearningRate = 3e-4
	cfg.Rollout.Task, cfg.Rollout.ChatTemplate, cfg.Rollout.ChatTemplateKwargs = "guess_chat", true, `{"enable_thinking": false}`
	cfg.Filter.Mode = config.FilterNone
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestExecResumesHuggingFaceState: a cluster term's resume of a Hugging
// Face model's trainer child (Options.ExecCheckpoint at its version). A
// first run trains step 1 of the tiny Qwen3 and leaves the child's state
// (config.json, F32 model.safetensors, optimiser state); the test copies
// it as the "durable" state and negates every weight in it (sign bit
// flipped: a valid model that survives BF16 rounding and cannot be
// mistaken for model.path's). A second node resumes from it at version 1
// and trains step 2. A random-init model's groups have no reward variance,
// so the step moves no weight (zero advantages: zero gradients and Adam
// moments); hence:
//
//   - the child's step-2 state holds exactly the saved weights, bit for
//     bit: it loaded the resume state, not model.path;
//   - the engines' logprobs equal the child's (mismatch < 1e-4): they
//     served version 0 from the same state, not model.path's weights;
//   - step 2 is trained once, its version counted from the state's.
func TestExecResumesHuggingFaceState(t *testing.T) {
	cfg := hfExecConfig(t, 1)
	_, s := runNode(t, cfg, nil)
	checkRanAllSteps(t, s, 1)

	saved := filepath.Join(t.TempDir(), "state")
	if err := os.CopyFS(saved, os.DirFS(filepath.Join(execDir(cfg), "out", "state-v00000001"))); err != nil {
		t.Fatal(err)
	}
	want := negateWeights(t, filepath.Join(saved, "model.safetensors"))

	cfg2 := cfg
	cfg2.Run.DataDir, cfg2.Run.ReportDir = cfg.Run.DataDir, filepath.Join(t.TempDir(), "report")
	n2, s2 := runNodeWith(t, cfg2, Options{InMemoryBus: true, ExecCheckpoint: saved, ExecCheckpointVersion: 1}, nil)
	checkRanAllSteps(t, s2, 1)
	checkLedger(t, n2, s2)
	for _, r := range n2.steps() {
		if r.Stats.Tokens <= 0 || !(r.Stats.Mismatch < 1e-4) {
			t.Errorf("resumed step %d: %d tokens, mismatch %g (want tokens and < 1e-4: the engines serve the state's weights)", r.Step, r.Stats.Tokens, r.Stats.Mismatch)
		}
	}
	if v := n2.exec.Version(); v != 2 {
		t.Errorf("the resumed child is at step %d, want 2 (state at 1, one step trained)", v)
	}
	got := readTensors(t, filepath.Join(execDir(cfg2), "out", "state-v00000002", "model.safetensors"))
	if len(got) != len(want) {
		t.Fatalf("step 2's state has %d tensors, the saved one %d", len(got), len(want))
	}
	for name, w := range want {
		if !bytes.Equal(got[name], w) {
			t.Errorf("tensor %s after the resumed step differs from the saved state's (the child did not resume it bit for bit)", name)
		}
	}
}

// TestExecHFResumeOfAnotherModel: a resume state of another architecture
// than the run's model is refused at start, naming both; nothing starts.
func TestExecHFResumeOfAnotherModel(t *testing.T) {
	cfg := hfExecConfig(t, 1)
	state := t.TempDir()
	if err := os.WriteFile(filepath.Join(state, "config.json"), []byte(`{"model_type": "qwen3_moe"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	n, err := New(cfg, Options{InMemoryBus: true, ExecCheckpoint: state, ExecCheckpointVersion: 3})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = n.Start(ctx)
	if err == nil {
		n.Stop()
		t.Fatal("started on a qwen3_moe resume state for a qwen3 run")
	}
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "qwen3_moe") || !strings.Contains(err.Error(), state) {
		t.Errorf("error %v: want ErrConfig naming the state and its model type", err)
	}
}

// readTensors is every tensor's raw bytes in a safetensors file.
func readTensors(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]byte{}
	for _, name := range f.Names() {
		data, _, err := f.ReadTensor(name)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = data
	}
	return out
}

// negateWeights flips the sign bit of every F32 element of the
// safetensors file at path in place and returns the new tensors' bytes.
func negateWeights(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	md := f.Metadata
	var ts []safetensors.Tensor
	out := map[string][]byte{}
	for _, name := range f.Names() {
		data, info, err := f.ReadTensor(name)
		if err != nil {
			t.Fatal(err)
		}
		if info.DType != "F32" {
			t.Fatalf("state tensor %s is %s, want the F32 master weights", name, info.DType)
		}
		data = bytes.Clone(data)
		for i := 3; i < len(data); i += 4 {
			data[i] ^= 0x80 // little-endian: the sign bit is in the last byte
		}
		ts = append(ts, safetensors.Tensor{Name: name, DType: info.DType, Shape: info.Shape, Data: data})
		out[name] = data
	}
	f.Close()
	if err := safetensors.WriteFile(path, ts, md); err != nil {
		t.Fatal(err)
	}
	return out
}
