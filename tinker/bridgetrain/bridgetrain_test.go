package bridgetrain

import (
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/actors/trainer/bridge"
	"github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/model/tokenizer"
	"github.com/asyncrl/asyncrl/tinker"
	"github.com/asyncrl/asyncrl/tinker/gotrain"
)

const torchPython = "/usr/bin/python3"

// killOn names the next frame type whose child is killed right after the
// frame is sent ("" = none).
var killOn atomic.Value

func init() { killOn.Store("") }

// torchSpec is the torch worker's command, or a skip when Debian's python
// cannot import torch (as actors/trainer/bridge's torchChildSpec).
func torchSpec(t testing.TB) bridge.Spec {
	t.Helper()
	if raceEnabled {
		t.Skip("the torch child's numbers are compared in the plain suite, not under -race")
	}
	if out, err := exec.Command(torchPython, "-c", "import torch, cbor2, numpy").CombinedOutput(); err != nil {
		t.Skipf("%s cannot import torch, cbor2 and numpy (the torch worker's dependencies): %v: %s", torchPython, err, out)
	}
	pkg, err := filepath.Abs(filepath.Join("..", "..", "integrations", "torch"))
	if err != nil {
		t.Fatal(err)
	}
	return bridge.Spec{Argv: []string{torchPython, "-m", "asyncrl_worker"},
		Env: []string{"PYTHONPATH=" + pkg, "OMP_NUM_THREADS=1", "ASYNCRL_WORKER_LOG=WARNING"}}
}

// setup writes one serving checkpoint both backends start from: gotrain
// gets it through model.LoadServing (the BF16 values the child loads).
func setup(t *testing.T) (*Model, *gotrain.Model, string) { return setupB(t) }

func setupB(t testing.TB) (*Model, *gotrain.Model, string) {
	t.Helper()
	spec := torchSpec(t)
	dir := t.TempDir()
	m, err := model.New(model.DefaultConfig(), 3)
	if err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(dir, "base")
	if err := m.SaveServing(base); err != nil {
		t.Fatal(err)
	}
	loaded, err := model.LoadServing(base)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ReadConfig(base)
	if err != nil {
		t.Fatal(err)
	}
	b := &Backend{Opts: Options{Spec: spec, Base: base, Config: cfg, OutDir: filepath.Join(dir, "models"),
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel),
		OnSent: func(typ string, pid int) {
			if killOn.CompareAndSwap(typ, "") {
				if pr, err := os.FindProcess(pid); err == nil {
					_ = pr.Kill()
				}
			}
		}}}
	bm, err := b.NewModel(32, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bm.Close() })
	return bm, gotrain.New(loaded), dir
}

// sft builds next-token datums: input tokens[:-1], targets [1:].
func sft(texts ...string) *tinker.ForwardBackwardInput {
	in := &tinker.ForwardBackwardInput{LossFn: "cross_entropy"}
	for _, s := range texts {
		in.Data = append(in.Data, tinker.NextTokenDatum(append([]int32{tokenizer.BOS}, tokenizer.Encode(s)...), 0))
	}
	return in
}

func relClose(a, b, tol float64) bool { return math.Abs(a-b) <= tol*math.Max(1, math.Abs(b)) }

// TestTorchChildMatchesGotrainAndLearns: forward_backward + optim_step
// through the torch child lowers the loss, and its first loss and
// per-datum logprobs match gotrain's on the same checkpoint; then saveLoad.
func TestTorchChildMatchesGotrainAndLearns(t *testing.T) {
	bm, gm, dir := setup(t)
	in := sft("abcabc", "hello", "12+3=15")
	p := tinker.DefaultAdamParams()
	p.LearningRate = 1e-2
	var losses []float64
	for k := range 4 {
		out, err := bm.ForwardBackward(in, true)
		if err != nil {
			t.Fatal(err)
		}
		if k == 0 {
			ref, err := gm.ForwardBackward(in, false)
			if err != nil {
				t.Fatal(err)
			}
			if !relClose(out.Metrics["loss:sum"], ref.Metrics["loss:sum"], 1e-4) {
				t.Fatalf("first loss: torch %v, gotrain %v", out.Metrics["loss:sum"], ref.Metrics["loss:sum"])
			}
			for d := range ref.LossFnOutputs {
				want, got := ref.LossFnOutputs[d]["logprobs"].Data, out.LossFnOutputs[d]["logprobs"].Data
				if len(got) != len(want) {
					t.Fatalf("datum %d: %d logprobs, want %d", d, len(got), len(want))
				}
				for i := range want {
					if math.Abs(got[i]-want[i]) > 1e-3 {
						t.Fatalf("datum %d token %d: logprob torch %v, gotrain %v", d, i, got[i], want[i])
					}
				}
			}
		}
		losses = append(losses, out.Metrics["loss:sum"])
		met, err := bm.OptimStep(p)
		if err != nil {
			t.Fatal(err)
		}
		if met["grad_norm:mean"] <= 0 || met["step:max"] != float64(k+1) {
			t.Fatalf("step %d metrics %v", k, met)
		}
	}
	for k := 1; k < len(losses); k++ {
		if losses[k] >= losses[k-1] {
			t.Fatalf("loss did not fall: %v", losses)
		}
	}
	// the same loop on gotrain ends near the same loss (same AdamW)
	var last float64
	for range 4 {
		out, err := gm.ForwardBackward(in, true)
		if err != nil {
			t.Fatal(err)
		}
		last = out.Metrics["loss:sum"]
		if _, err := gm.OptimStep(p); err != nil {
			t.Fatal(err)
		}
	}
	if !relClose(losses[3], last, 0.02) {
		t.Fatalf("loss after 3 steps: torch %v, gotrain %v", losses[3], last)
	}
	// one child per test binary: starting torch costs seconds
	saveLoad(t, bm, dir)
}

// saveLoad: a refused call changes nothing; a saved state loads back (with
// the optimiser the next steps repeat exactly, without it the weights); the
// sampler checkpoint loads in Go.
func saveLoad(t *testing.T, bm *Model, dir string) {
	in := sft("hello", "abcabc")
	p := tinker.DefaultAdamParams()
	p.LearningRate = 1e-2
	step := func() float64 {
		t.Helper()
		out, err := bm.ForwardBackward(in, true)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := bm.OptimStep(p); err != nil {
			t.Fatal(err)
		}
		return out.Metrics["loss:sum"]
	}
	// bad input the server's validation does not catch is the child's
	// typed error; nothing is applied and the child keeps serving
	bad := sft("hello")
	bad.LossFn = "dpo"
	var ce *bridge.ChildError
	if _, err := bm.ForwardBackward(bad, true); !errors.As(err, &ce) || ce.Field != "loss" {
		t.Fatalf("unknown loss: %v", err)
	}
	step()
	st := filepath.Join(dir, "state")
	if err := bm.SaveState(st); err != nil {
		t.Fatal(err)
	}
	a, b := step(), step()
	// a child killed during a call: the call and every later one fail as
	// lost (nothing is replayed) until a state is loaded
	killOn.Store(bridge.TypeForwardBackward)
	if _, err := bm.ForwardBackward(in, true); !errors.Is(err, bridge.ErrChildLost) {
		t.Fatalf("forward_backward on a killed child: %v", err)
	}
	if _, err := bm.OptimStep(p); !errors.Is(err, bridge.ErrChildLost) {
		t.Fatalf("optim_step after the child was lost: %v", err)
	}
	if err := bm.LoadState(st, true); err != nil {
		t.Fatal(err)
	}
	if a2, b2 := step(), step(); !relClose(a2, a, 1e-6) || !relClose(b2, b, 1e-6) {
		t.Fatalf("after load_state_with_optimizer: losses %v %v, before %v %v", a2, b2, a, b)
	}
	if err := bm.LoadState(st, false); err != nil {
		t.Fatal(err)
	}
	if a3 := step(); !relClose(a3, a, 1e-6) {
		t.Fatalf("weights-only load: loss %v, want %v", a3, a)
	}
	if err := bm.LoadState(filepath.Join(dir, "nowhere"), true); !errors.Is(err, ErrState) {
		t.Fatalf("load of a missing state: %v", err)
	}
	sd := filepath.Join(dir, "sampler")
	if err := bm.SaveSampler(sd); err != nil {
		t.Fatal(err)
	}
	if _, err := model.LoadServing(sd); err != nil {
		t.Fatalf("sampler checkpoint does not load in Go: %v", err)
	}
}
