package sft

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/sft/data"
)

// testConfig is a small built-in model on two fake datasets (weights
// 0.75/0.25), 256-token steps in 64-token microbatches, DP 2.
func testConfig(t *testing.T) Config {
	t.Helper()
	tc := model.DefaultTrainerConfig()
	tc.LR, tc.EntropyCoef, tc.Workers = 1e-2, 0, 2
	return Config{
		Data: data.Config{Datasets: []data.DatasetConfig{{Name: "counting", Path: "x", Weight: 3}, {Name: "prompted", Path: "y", Weight: 1}},
			Sampler: data.SamplerConfig{Kind: "mixture"}},
		Steps: 30, TokensPerStep: 256,
		Pack:    data.PackConfig{Budget: 64, DP: 2, Strategy: "ffd"},
		Trainer: tc,
		Model:   model.Config{VocabSize: 32, Window: 4, EmbedDim: 8, Hidden: 32, Layers: 1, MaxSeqLen: 32},
		Seed:    1, OutputDir: t.TempDir(), CheckpointEvery: 10, Backend: BackendBuiltin,
	}
}

func fakeOpts(d *fakeData, rec *[]StepRecord) Options {
	return Options{Open: d.open, Pack: greedyPack, OnStep: func(r StepRecord) {
		if rec != nil {
			*rec = append(*rec, r)
		}
	}}
}

func newFake() *fakeData { return &fakeData{sizes: []int{500, 300}, weights: []float64{3, 1}, seed: 7} }

// TestRunLowersLossAndReports: the built-in backend learns the counting
// data (loss well below its start), and the report holds the curve, the
// throughputs and the mixture seen vs configured.
func TestRunLowersLossAndReports(t *testing.T) {
	cfg := testConfig(t)
	var rec []StepRecord
	opts := fakeOpts(newFake(), &rec)
	opts.ReportDir = t.TempDir()
	var progress strings.Builder
	opts.Progress = &progress
	res, err := Run(context.Background(), cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	r := res.Report
	if len(r.Steps) != 30 || len(rec) != 30 {
		t.Fatalf("%d report steps, %d records, want 30", len(r.Steps), len(rec))
	}
	if !(r.LastLoss < 0.5*r.FirstLoss) {
		t.Fatalf("loss %.4f → %.4f: not learning", r.FirstLoss, r.LastLoss)
	}
	if math.Abs(r.FirstLoss-math.Log(32)) > 0.5 {
		t.Errorf("first loss %.4f, a fresh model's NLL is near ln 32 = %.4f", r.FirstLoss, math.Log(32))
	}
	for _, p := range r.Steps {
		if p.Tokens < cfg.TokensPerStep || p.Bins%2 != 0 || p.Bins < p.Tokens/64 {
			t.Fatalf("step %+v: want ≥ %d tokens in an even number of ≤64-token bins", p, cfg.TokensPerStep)
		}
	}
	if r.DataTokensPerSecond <= 0 || r.TrainTokensPerSecond <= 0 {
		t.Errorf("throughputs %v, %v", r.DataTokensPerSecond, r.TrainTokensPerSecond)
	}
	if *r.Mixture[0].Configured != 0.75 || math.Abs(r.Mixture[0].Seen-0.75) > 0.06 || r.Mixture[0].Dataset != "counting" {
		t.Errorf("mixture %+v, want counting configured 0.75 and seen ≈ 0.75", r.Mixture[0])
	}
	if r.Mixture[0].SeenExamples+r.Mixture[1].SeenExamples != r.Examples {
		t.Errorf("mixture counts %d+%d ≠ %d examples", r.Mixture[0].SeenExamples, r.Mixture[1].SeenExamples, r.Examples)
	}
	var back Report
	js, err := os.ReadFile(filepath.Join(opts.ReportDir, ReportJSON))
	if err != nil || json.Unmarshal(js, &back) != nil || len(back.Steps) != 30 || back.LastLoss != r.LastLoss {
		t.Fatalf("report JSON: %v %+v", err, back.LastLoss)
	}
	if md, err := os.ReadFile(filepath.Join(opts.ReportDir, ReportMarkdown)); err != nil || !strings.Contains(string(md), "| prompted |") {
		t.Fatalf("report markdown: %v\n%s", err, md)
	}
	if !strings.Contains(progress.String(), "sft step 30/30: loss ") {
		t.Errorf("progress lines:\n%s", progress.String())
	}
	// checkpoints at 10, 20, 30; latest is 30 and loads as a serving
	// model and as a trainer checkpoint (what an RL run starts from)
	if res.Checkpoint != StepDir(cfg.OutputDir, 30) {
		t.Fatalf("checkpoint %q", res.Checkpoint)
	}
	for _, s := range []int64{10, 20, 30} {
		if _, err := os.Stat(filepath.Join(StepDir(cfg.OutputDir, s), StateFile)); err != nil {
			t.Errorf("step %d checkpoint: %v", s, err)
		}
	}
	if _, err := model.LoadServing(filepath.Join(cfg.OutputDir, LatestName, ServingDir)); err != nil {
		t.Fatal(err)
	}
	tr, err := model.LoadTrainer(filepath.Join(cfg.OutputDir, LatestName, TrainerDir))
	if err != nil || tr.Version() != 30 {
		t.Fatalf("trainer checkpoint: %v, version %d", err, tr.Version())
	}
}

// runIDs runs cfg and returns its step records.
func runIDs(t *testing.T, cfg Config, d *fakeData, ctx context.Context) ([]StepRecord, Result) {
	t.Helper()
	var rec []StepRecord
	res, err := Run(ctx, cfg, fakeOpts(d, &rec))
	if err != nil {
		t.Fatal(err)
	}
	return rec, res
}

// sameSteps: the same examples in the same order and (built-in backend,
// same seed) bit-equal losses.
func sameSteps(t *testing.T, what string, got, want []StepRecord, lossTol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d steps, want %d", what, len(got), len(want))
	}
	for i := range got {
		if got[i].Step != want[i].Step || !slices.Equal(got[i].IDs, want[i].IDs) {
			t.Fatalf("%s: step %d has examples %v, the uninterrupted run's step %d had %v", what, got[i].Step, got[i].IDs, want[i].Step, want[i].IDs)
		}
		if d := math.Abs(got[i].Loss - want[i].Loss); d > lossTol {
			t.Fatalf("%s: step %d loss %.12g, uninterrupted %.12g", what, got[i].Step, got[i].Loss, want[i].Loss)
		}
	}
}

// TestResumeSeesTheSameExamples: stop at step k, resume, and steps k+1…
// draw exactly the uninterrupted run's examples with equal losses (built-in
// backend, same seed); the report carries over.
func TestResumeSeesTheSameExamples(t *testing.T) {
	base := testConfig(t)
	base.Steps, base.CheckpointEvery = 12, 4
	full, _ := runIDs(t, base, newFake(), context.Background())

	for _, k := range []int{4, 7} { // at a periodic checkpoint, and between two (the last step is always written)
		cfg := base
		cfg.OutputDir = t.TempDir()
		cfg.Steps = k
		first, _ := runIDs(t, cfg, newFake(), context.Background())
		sameSteps(t, "before the stop", first, full[:k], 0)
		cfg.Steps, cfg.Resume = 12, true
		rest, res := runIDs(t, cfg, newFake(), context.Background())
		if res.ResumedFrom != int64(k) {
			t.Fatalf("resumed from %d, want %d", res.ResumedFrom, k)
		}
		sameSteps(t, "after resume", rest, full[k:], 0)
		if len(res.Report.Steps) != 12 || res.Report.FirstLoss != full[0].Loss {
			t.Fatalf("resumed report has %d steps, first loss %v", len(res.Report.Steps), res.Report.FirstLoss)
		}
	}
}

// TestInterruptCheckpointsLastStep: a run whose context ends after step 5
// checkpoints step 5 (not a periodic step) and a resume continues with the
// uninterrupted run's step 6.
func TestInterruptCheckpointsLastStep(t *testing.T) {
	base := testConfig(t)
	base.Steps, base.CheckpointEvery = 9, 0
	full, _ := runIDs(t, base, newFake(), context.Background())

	cfg := base
	cfg.OutputDir = t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var rec []StepRecord
	opts := fakeOpts(newFake(), &rec)
	opts.OnStep = func(r StepRecord) {
		rec = append(rec, r)
		if r.Step == 5 {
			cancel()
		}
	}
	res, err := Run(ctx, cfg, opts)
	if err != nil || !res.Interrupted || res.Checkpoint != StepDir(cfg.OutputDir, 5) {
		t.Fatalf("interrupted run: %v, %+v", err, res)
	}
	cfg.Resume = true
	rest, _ := runIDs(t, cfg, newFake(), context.Background())
	sameSteps(t, "after interrupt", rest, full[5:], 0)
}

// TestEpochsEndTheRun: with a finite sampler and steps 0 the run trains
// until the data ends and checkpoints the last (partial) step.
func TestEpochsEndTheRun(t *testing.T) {
	cfg := testConfig(t)
	cfg.Steps, cfg.CheckpointEvery = 0, 0
	cfg.Data.Sampler.Epochs = 1
	d := &fakeData{sizes: []int{40, 20}, weights: []float64{3, 1}, seed: 7, epochs: 1}
	rec, res := runIDs(t, cfg, d, context.Background())
	n := 0
	for _, r := range rec {
		n += r.Examples
	}
	if n != 60 || res.Checkpoint != StepDir(cfg.OutputDir, int64(len(rec))) {
		t.Fatalf("%d examples in %d steps, checkpoint %q", n, len(rec), res.Checkpoint)
	}
	// resuming an ended run trains nothing more
	cfg.Resume = true
	rest, _ := runIDs(t, cfg, d, context.Background())
	if len(rest) != 0 {
		t.Fatalf("resume after the end trained %d steps", len(rest))
	}
}

func TestRunErrors(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig(t)
	cfg.Resume = true
	if _, err := Run(ctx, cfg, fakeOpts(newFake(), nil)); !errors.Is(err, ErrNoCheckpoint) {
		t.Fatalf("resume without a checkpoint: %v", err)
	}
	cfg = testConfig(t)
	cfg.Data.MaxLen = 64
	if _, err := Run(ctx, cfg, fakeOpts(newFake(), nil)); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "max_len 64") {
		t.Fatalf("max_len over the model's: %v", err)
	}
	cfg = testConfig(t)
	cfg.Model.MaxSeqLen = 12 // the fake data's examples are up to 15 tokens
	cfg.Pack.Budget = 12
	_, err := Run(ctx, cfg, fakeOpts(newFake(), nil))
	if !errors.Is(err, ErrExample) || !strings.Contains(err.Error(), `dataset "`) || !strings.Contains(err.Error(), "max_seq_len 12") {
		t.Fatalf("too long an example: %v", err)
	}
	cfg = testConfig(t)
	cfg.Pack.Budget = 16
	if _, err := Run(ctx, cfg, fakeOpts(newFake(), nil)); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "microbatch_tokens 16") {
		t.Fatalf("budget below max_len: %v", err)
	}
	cfg = testConfig(t)
	cfg.Data.Datasets = nil
	if _, err := Run(ctx, cfg, fakeOpts(newFake(), nil)); !errors.Is(err, ErrConfig) {
		t.Fatalf("no datasets: %v", err)
	}
	// a checkpoint of one backend does not resume another
	cfg = testConfig(t)
	cfg.Steps = 1
	if _, err := Run(ctx, cfg, fakeOpts(newFake(), nil)); err != nil {
		t.Fatal(err)
	}
	cfg.Resume, cfg.Backend, cfg.Exec = true, BackendExec, []string{"/bin/false"}
	if _, err := Run(ctx, cfg, fakeOpts(newFake(), nil)); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "backend builtin") {
		t.Fatalf("resume across backends: %v", err)
	}
}

func TestAssemble(t *testing.T) {
	ex := func(row uint32, n int, mask []uint8) data.Example {
		return data.Example{ID: data.ExampleID{Row: row}, Tokens: make([]int32, n), LossMask: mask}
	}
	// example 5 drawn twice in one step (with replacement)
	exs := []data.Example{ex(5, 4, nil), ex(6, 3, []uint8{1, 0, 1}), ex(5, 4, nil)}
	bins := []data.Bin{{Tokens: make([]int32, 8), IDs: []data.ExampleID{{Row: 5}, {Row: 5}}}, {Tokens: make([]int32, 3), IDs: []data.ExampleID{{Row: 6}}}, {}}
	st, err := Assemble(exs, bins)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(st.Micro, [][]int{{0, 2}, {1}, {}}, slices.Equal[[]int]) {
		t.Fatalf("micro %v", st.Micro)
	}
	if st.Tokens != 11 || st.Trained != 3+1+3 || st.Batch.Loss != model.LossCrossEntropy {
		t.Fatalf("tokens %d trained %d loss %q", st.Tokens, st.Trained, st.Batch.Loss)
	}
	if got := st.Batch.Sequences[1].LossMask; !slices.Equal(got, []uint8{0, 0, 1}) {
		t.Fatalf("first token trained: mask %v", got)
	}
	if _, err := Assemble(exs, bins[:1]); err == nil {
		t.Fatal("a bin plan missing an example was accepted")
	}
	if _, err := Assemble(exs[:1], bins[:1]); err == nil {
		t.Fatal("a bin listing an example twice was accepted")
	}
}

// TestExecBackendMatchesBuiltin: the exec backend (this test binary as the
// built-in child over the worker bridge) learns, resumes with the same
// examples, and its losses track the in-process trainer's (it starts from
// the BF16 serving copy of the same weights, so they are close, not equal).
func TestExecBackendMatchesBuiltin(t *testing.T) {
	base := testConfig(t)
	base.Steps, base.CheckpointEvery = 8, 0
	inproc, _ := runIDs(t, base, newFake(), context.Background())

	cfg := base
	cfg.OutputDir = t.TempDir()
	cfg.Backend, cfg.Exec, cfg.ExecEnv = BackendExec, []string{os.Args[0]}, []string{"ASYNCRL_TEST_SFT_CHILD=1"}
	cfg.ExecStepTimeout, cfg.ExecRestarts = time.Minute, 1
	cfg.Steps = 3
	first, _ := runIDs(t, cfg, newFake(), context.Background())
	cfg.Steps, cfg.Resume = 8, true
	rest, res := runIDs(t, cfg, newFake(), context.Background())
	sameSteps(t, "exec vs builtin", append(first, rest...), inproc, 0.05)
	if !(res.Report.LastLoss < 0.8*res.Report.FirstLoss) {
		t.Fatalf("exec loss %.4f → %.4f", res.Report.FirstLoss, res.Report.LastLoss)
	}
	if _, err := model.LoadServing(filepath.Join(cfg.OutputDir, LatestName, ServingDir)); err != nil {
		t.Fatal(err)
	}
	// The child's per-step directories do not pile up: the newest serving
	// and state directory only (checkpoints are copies under step-N/).
	out := filepath.Join(cfg.OutputDir, "exec", "out")
	var left []string
	err := filepath.WalkDir(out, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && strings.HasPrefix(d.Name(), "v0") {
			left = append(left, p)
		}
		return err
	})
	if err != nil || len(left) != 2 {
		t.Errorf("step directories left under %s: %v (%v); want the last step's serving and state", out, left, err)
	}
}

// TestInitCheckpoint: sft.init_checkpoint starts from another run's
// weights (its serving or its trainer checkpoint), not from the seed's.
func TestInitCheckpoint(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig(t)
	cfg.Steps = 15
	_, trained := runIDs(t, cfg, newFake(), ctx)
	for _, sub := range []string{ServingDir, TrainerDir} {
		next := testConfig(t)
		next.Steps = 1
		next.InitCheckpoint = filepath.Join(cfg.OutputDir, LatestName, sub)
		rec, _ := runIDs(t, next, newFake(), ctx)
		// step 1 draws the fresh run's step-1 examples; on trained weights
		// their loss is far below the fresh model's
		if !(rec[0].Loss < 0.6*trained.Report.FirstLoss) {
			t.Fatalf("%s: first loss %.4f, a fresh start's %.4f: the checkpoint was not used", sub, rec[0].Loss, trained.Report.FirstLoss)
		}
	}
	bad := testConfig(t)
	bad.InitCheckpoint = t.TempDir()
	if _, err := Run(ctx, bad, fakeOpts(newFake(), nil)); err == nil || !strings.Contains(err.Error(), "sft.init_checkpoint") {
		t.Fatalf("empty init_checkpoint dir: %v", err)
	}
}
