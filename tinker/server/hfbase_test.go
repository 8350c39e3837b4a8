package server_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/internal/realtok"
	"github.com/asyncrl/asyncrl/model/transformer"
	"github.com/asyncrl/asyncrl/tinker"
	"github.com/asyncrl/asyncrl/tinker/client"
	"github.com/asyncrl/asyncrl/tinker/server"
)

// tinyQwen3 writes a random-initialised tiny qwen3 checkpoint (vocabulary
// 256, no tokenizer: small enough for a test on two cores) and returns its
// directory.
func tinyQwen3(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "qwen3-tiny")
	if _, err := transformer.Create(transformer.CreateOptions{Arch: "qwen3", Preset: "tiny", Vocab: 256, Out: dir, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// torchConfig is testConfig with the PyTorch worker as the exec trainer;
// it skips the test when /usr/bin/python3 cannot import torch.
func torchConfig(t *testing.T) config.Config {
	t.Helper()
	if out, err := exec.Command("/usr/bin/python3", "-c", "import torch, cbor2, numpy").CombinedOutput(); err != nil {
		t.Skipf("/usr/bin/python3 cannot import torch, cbor2 and numpy: %v: %s", err, out)
	}
	pkg, err := filepath.Abs(filepath.Join("..", "..", "integrations", "torch"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t.TempDir())
	cfg.Tinker.Trainer = config.TinkerTrainerExec
	cfg.Tinker.TrainerExec = []string{"/usr/bin/python3", "-m", "asyncrl_worker"}
	cfg.Tinker.TrainerExecEnv = []string{"PYTHONPATH=" + pkg, "OMP_NUM_THREADS=1", "ASYNCRL_WORKER_LOG=WARNING"}
	return cfg
}

// TestHFBaseModelTrainsAndSamples: a Hugging Face checkpoint in
// tinker.base_models is the server's base model under its Hugging Face
// name — get_server_capabilities lists it, get_info names its architecture
// and tokenizer id (what the SDK's get_tokenizer loads), samplers/{id}
// answers its name — the PyTorch worker trains it (model kind hf:
// forward_backward + optim_step lower the loss on a fixed batch), and the
// built-in engine samples the weights save_weights_for_sampler wrote, in
// both sampler_weights modes: the trained answer greedily, which the base
// model does not produce. save_weights / load_weights restore the child's
// state. Skipped when /usr/bin/python3 cannot import torch.
func TestHFBaseModelTrainsAndSamples(t *testing.T) {
	for _, mode := range []config.SamplerWeightsMode{config.SamplerAdapter, config.SamplerVersion} {
		t.Run(string(mode), func(t *testing.T) { trainHFBase(t, mode) })
	}
}

func trainHFBase(t *testing.T, mode config.SamplerWeightsMode) {
	cfg := torchConfig(t)
	const name = "asyncrl-test/Qwen3-tiny"
	cfg.Tinker.BaseModels = []config.TinkerBaseModel{{Name: name, Path: tinyQwen3(t), TokenizerID: "Qwen/Qwen3-0.6B"}}
	cfg.Tinker.SamplerWeights = mode
	r, c := start(t, cfg, "")
	// children start torch (seconds each on a loaded machine): a longer
	// bound than ctxT's
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)

	names, err := c.Capabilities(ctx)
	if err != nil || !slices.Equal(names, []string{name}) {
		t.Fatalf("get_server_capabilities: %v, %v", names, err)
	}
	sess, err := c.CreateSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateModel(ctx, sess, "asyncrl-policy", 0, 8); err == nil || !strings.Contains(err.Error(), name) {
		t.Fatalf("create_model on the built-in policy's name: %v", err)
	}
	model, err := c.CreateModel(ctx, sess, name, 1, 8)
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.GetInfo(ctx, model)
	if err != nil {
		t.Fatal(err)
	}
	if md := info.ModelData; md.Arch != "qwen3" || md.ModelName != name || md.TokenizerID != "Qwen/Qwen3-0.6B" {
		t.Fatalf("get_info model_data %+v", md)
	}

	prompt := []int32{11, 12, 13, 14, 15}
	answer := []int32{200, 7, 99, 150}
	baseSampler, err := c.CreateSamplingSession(ctx, sess, 2, name, "")
	if err != nil {
		t.Fatal(err)
	}
	base, err := c.Sample(ctx, client.SampleRequest(baseSampler, 1, prompt, 1, len(answer), 0))
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(base.Sequences[0].Tokens, answer) {
		t.Fatalf("the base model answers %v already: the check below proves nothing", answer)
	}

	batch := tinker.ForwardBackwardInput{LossFn: "cross_entropy",
		Data: []tinker.Datum{tinker.NextTokenDatum(append(slices.Clone(prompt), answer...), len(prompt)-1)}}
	p := tinker.DefaultAdamParams()
	p.LearningRate = 1e-2
	seq := int64(1)
	// train until every answer token is likelier than all others together
	// (summed loss under ln 2: each token's probability above 1/2), so
	// greedy sampling must give the answer
	var losses []float64
	for len(losses) < 40 && (len(losses) == 0 || losses[len(losses)-1] >= 0.69) {
		out, err := c.ForwardBackward(ctx, model, seq, batch)
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, out.Metrics["loss:sum"])
		if _, err := c.OptimStep(ctx, model, seq+1, p); err != nil {
			t.Fatal(err)
		}
		seq += 2
	}
	t.Logf("losses %.3f", losses)
	if len(losses) < 4 || !(losses[1] < losses[0] && losses[2] < losses[1] && losses[3] < losses[2]) {
		t.Fatalf("loss did not fall over the first steps: %v", losses)
	}
	final, err := c.Forward(ctx, model, seq, batch) // the weights after the last step
	if err != nil {
		t.Fatal(err)
	}
	seq++
	if last := final.Metrics["loss:sum"]; last >= 0.69 {
		t.Fatalf("loss still %.3f after %d steps: %v", last, len(losses), losses)
	}

	// the trained weights, served as a sampler checkpoint, answer greedily
	_, sampler, err := c.SaveForSampler(ctx, model, seq, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	seq++
	if sp, err := c.GetSampler(ctx, sampler); err != nil || sp["base_model"] != name {
		t.Fatalf("samplers/%s: %v, %v", sampler, sp, err)
	}
	trained, err := c.Sample(ctx, client.SampleRequest(sampler, 1, prompt, 1, len(answer), 0))
	if err != nil {
		t.Fatal(err)
	}
	if got := trained.Sequences[0].Tokens; !slices.Equal(got, answer) {
		t.Fatalf("trained sampler answered %v, want %v (losses %v)", got, answer, losses)
	}
	if mode == config.SamplerVersion {
		if v := r.Engines[0].E.Stats().Version; v != 1 {
			t.Fatalf("the engine serves version %d after the save, want 1", v)
		}
		return
	}

	// save_weights / load_weights restore the child's HF state: a step
	// taken after the save is undone, with and without the optimiser
	path, err := c.SaveWeights(ctx, model, seq, "s1")
	if err != nil {
		t.Fatal(err)
	}
	seq++
	for _, withOpt := range []bool{true, false} {
		if _, err := c.ForwardBackward(ctx, model, seq, batch); err != nil {
			t.Fatal(err)
		}
		if _, err := c.OptimStep(ctx, model, seq+1, p); err != nil {
			t.Fatal(err)
		}
		moved, err := c.Forward(ctx, model, seq+2, batch)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.LoadWeights(ctx, model, seq+3, path, withOpt); err != nil {
			t.Fatal(err)
		}
		back, err := c.Forward(ctx, model, seq+4, batch)
		if err != nil {
			t.Fatal(err)
		}
		seq += 5
		if a, b, m := final.Metrics["loss:sum"], back.Metrics["loss:sum"], moved.Metrics["loss:sum"]; a != b || a == m {
			t.Fatalf("optimizer %v: loss at save %v, after a step %v, after load_weights %v", withOpt, a, m, b)
		}
	}
	if err := c.UnloadModel(ctx, model); err != nil {
		t.Fatal(err)
	}
}

// TestHFBaseModelRandomInit: an entry with arch and the real Qwen3
// tokenizer and no path random-initialises its checkpoint under
// <data_dir>/models at the first start — the tokenizer's files copied in,
// its vocabulary sizing the embedding — and serves it (a base-model sample
// comes back with ids of that vocabulary); a second start reuses the
// directory rather than writing it again.
func TestHFBaseModelRandomInit(t *testing.T) {
	tok := realtok.Dir(t, realtok.Qwen3)
	root := t.TempDir()
	cfg := testConfig(root)
	cfg.Run.Seed = 5
	cfg.Tinker.Trainer = config.TinkerTrainerExec
	cfg.Tinker.TrainerExec = []string{"/bin/false"} // no model is created
	cfg.Tinker.BaseModels = []config.TinkerBaseModel{{Name: "Qwen/Qwen3-0.6B", Arch: config.ArchQwen3, Tokenizer: tok}}
	dir := filepath.Join(cfg.Tinker.DataDir, "models", "qwen3-tiny-seed5")
	var stamp time.Time
	for round := range 2 {
		r, c := start(t, cfg, "")
		ctx := ctxT(t)
		names, err := c.Capabilities(ctx)
		if err != nil || !slices.Equal(names, []string{"Qwen/Qwen3-0.6B"}) {
			t.Fatalf("get_server_capabilities: %v, %v", names, err)
		}
		for _, f := range []string{"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} {
			if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		st, err := os.Stat(filepath.Join(dir, "model.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		if round == 1 && !st.ModTime().Equal(stamp) {
			t.Fatalf("the second start wrote the checkpoint again (%v, first %v)", st.ModTime(), stamp)
		}
		stamp = st.ModTime()
		mc, err := transformer.ReadConfig(dir)
		if err != nil {
			t.Fatal(err)
		}
		if mc.VocabSize < 151000 {
			t.Fatalf("vocabulary %d: not the Qwen3 tokenizer's", mc.VocabSize)
		}
		sess, err := c.CreateSession(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sp, err := c.CreateSamplingSession(ctx, sess, 1, "Qwen/Qwen3-0.6B", "")
		if err != nil {
			t.Fatal(err)
		}
		out, err := c.Sample(ctx, client.SampleRequest(sp, 1, []int32{151644, 872, 198}, 1, 3, 1))
		if err != nil || len(out.Sequences) != 1 || len(out.Sequences[0].Tokens) == 0 {
			t.Fatalf("base-model sample: %+v, %v", out, err)
		}
		for _, id := range out.Sequences[0].Tokens {
			if id < 0 || int(id) >= mc.VocabSize {
				t.Fatalf("sampled id %d outside the vocabulary %d", id, mc.VocabSize)
			}
		}
		r.Close()
	}
}

// TestHFBaseModelErrors: a missing, an invalid and a foreign checkpoint
// directory each fail the start with an error naming the entry, the
// directory and the fix; a directory with a broken config.json is not
// written over; and base_weights pointing at a Hugging Face checkpoint
// says to list it under base_models.
func TestHFBaseModelErrors(t *testing.T) {
	good := tinyQwen3(t)
	broken := t.TempDir()
	if err := os.WriteFile(filepath.Join(broken, "config.json"), []byte(`{"model_type": "qwen3", `), 0o644); err != nil {
		t.Fatal(err)
	}
	noWeights := t.TempDir()
	b, err := os.ReadFile(filepath.Join(good, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(noWeights, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "nope")
	for _, tc := range []struct {
		name  string
		entry config.TinkerBaseModel
		want  []string
	}{
		{"missing", config.TinkerBaseModel{Name: "m", Path: missing},
			[]string{"tinker.base_models[0] (m)", missing, "give a Hugging Face checkpoint directory"}},
		{"broken config", config.TinkerBaseModel{Name: "m", Path: broken, Arch: config.ArchQwen3, Tokenizer: "x"},
			[]string{"tinker.base_models[0] (m)", broken, "it is not written over"}},
		{"no weights", config.TinkerBaseModel{Name: "m", Path: noWeights},
			[]string{"tinker.base_models[0] (m)", noWeights, "not a checkpoint the engines can serve"}},
		{"other arch", config.TinkerBaseModel{Name: "m", Path: good, Arch: config.ArchLlama, Tokenizer: "x"},
			[]string{"arch is llama but", "holds a qwen3 checkpoint"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t.TempDir())
			cfg.Tinker.Trainer = config.TinkerTrainerExec
			cfg.Tinker.TrainerExec = []string{"/bin/false"}
			cfg.Tinker.BaseModels = []config.TinkerBaseModel{tc.entry}
			err := startErr(cfg)
			for _, w := range tc.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Fatalf("want %q in the error, got %v", w, err)
				}
			}
		})
	}
	if b2, err := os.ReadFile(filepath.Join(broken, "config.json")); err != nil || string(b2) != `{"model_type": "qwen3", ` {
		t.Fatalf("the broken config.json was touched: %q, %v", b2, err)
	}
	if _, err := os.Stat(filepath.Join(broken, "model.safetensors")); !os.IsNotExist(err) {
		t.Fatalf("weights were written into the broken directory: %v", err)
	}
	cfg := testConfig(t.TempDir())
	cfg.Tinker.Trainer = config.TinkerTrainerExec
	cfg.Tinker.TrainerExec = []string{"/bin/false"}
	cfg.Tinker.BaseModels = []config.TinkerBaseModel{{Name: "m", Path: good}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if r, err := server.Start(ctx, cfg, server.Options{Log: zerolog.Nop(), NoLocalEngines: true}); err == nil || !strings.Contains(err.Error(), "cluster node's tinker role is not supported yet") {
		if err == nil {
			r.Close()
		}
		t.Fatalf("a cluster node's tinker role with a Hugging Face base: %v", err)
	}
	cfg = testConfig(t.TempDir())
	cfg.Tinker.BaseWeights = good
	if err := startErr(cfg); err == nil || !strings.Contains(err.Error(), "list it under tinker.base_models") {
		t.Fatalf("base_weights with a Hugging Face checkpoint: %v", err)
	}
}

func startErr(cfg config.Config) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := server.Start(ctx, cfg, server.Options{Log: zerolog.Nop()})
	if err == nil {
		r.Close()
	}
	return err
}

// TestHFBaseModelArchitectures: each of the other architectures
// (qwen3_moe, llama, deepseek_v3; qwen3 above) is served as a base model:
// get_info names it, one forward_backward + optim_step runs in its torch
// child and the engine samples the sampler checkpoint the child wrote.
// Skipped with -short and when /usr/bin/python3 cannot import torch.
func TestHFBaseModelArchitectures(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a torch child per architecture")
	}
	for _, arch := range []string{"qwen3_moe", "llama", "deepseek_v3"} {
		t.Run(arch, func(t *testing.T) {
			cfg := torchConfig(t)
			dir := filepath.Join(t.TempDir(), arch)
			if _, err := transformer.Create(transformer.CreateOptions{Arch: arch, Preset: "tiny", Vocab: 128, Out: dir, Seed: 2}); err != nil {
				t.Fatal(err)
			}
			cfg.Tinker.BaseModels = []config.TinkerBaseModel{{Name: "test/" + arch, Path: dir}}
			_, c := start(t, cfg, "")
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			t.Cleanup(cancel)
			sess, err := c.CreateSession(ctx)
			if err != nil {
				t.Fatal(err)
			}
			model, err := c.CreateModel(ctx, sess, "test/"+arch, 1, 8)
			if err != nil {
				t.Fatal(err)
			}
			info, err := c.GetInfo(ctx, model)
			if err != nil || info.ModelData.Arch != arch || info.ModelData.TokenizerID != "test/"+arch {
				t.Fatalf("get_info: %+v, %v", info, err)
			}
			batch := tinker.ForwardBackwardInput{LossFn: "cross_entropy",
				Data: []tinker.Datum{tinker.NextTokenDatum([]int32{3, 4, 5, 6, 7, 8}, 2)}}
			out, err := c.ForwardBackward(ctx, model, 1, batch)
			if err != nil || len(out.LossFnOutputs) != 1 || len(out.LossFnOutputs[0]["logprobs"].Data) != 5 {
				t.Fatalf("forward_backward: %+v, %v", out, err)
			}
			p := tinker.DefaultAdamParams()
			p.LearningRate = 1e-2
			if _, err := c.OptimStep(ctx, model, 2, p); err != nil {
				t.Fatal(err)
			}
			after, err := c.Forward(ctx, model, 3, batch)
			if err != nil {
				t.Fatal(err)
			}
			if !(after.Metrics["loss:sum"] < out.Metrics["loss:sum"]) {
				t.Fatalf("loss %v after a step, %v before", after.Metrics["loss:sum"], out.Metrics["loss:sum"])
			}
			_, sampler, err := c.SaveForSampler(ctx, model, 4, "", 0)
			if err != nil {
				t.Fatal(err)
			}
			s, err := c.Sample(ctx, client.SampleRequest(sampler, 1, []int32{3, 4, 5}, 2, 3, 1))
			if err != nil || len(s.Sequences) != 2 {
				t.Fatalf("sample: %+v, %v", s, err)
			}
		})
	}
}
