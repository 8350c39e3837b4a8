package sft

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/actors/trainer/bridge"
	"github.com/asyncrl/asyncrl/internal/fsutil"
	"github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/model/transformer"
)

// backend trains steps and saves checkpoints: the built-in policy in
// process, or a child over the worker bridge.
type backend interface {
	// Step trains one optimiser step (the loss is cross-entropy) and
	// returns the loss under the weights before it.
	Step(ctx context.Context, st Step, step int64) (model.StepStats, error)
	// Save writes the serving weights to dir/serving and the resume state
	// to dir/trainer.
	Save(ctx context.Context, dir string) error
	Close(ctx context.Context) error
}

// Checkpoint layout inside a step directory.
const (
	ServingDir = "serving"
	TrainerDir = "trainer"
	StateFile  = "state.json"
)

// builtin is the in-process built-in policy trainer.
type builtin struct{ tr *model.Trainer }

var _ backend = (*builtin)(nil)

func (b *builtin) Step(_ context.Context, st Step, step int64) (model.StepStats, error) {
	if v := b.tr.Version() + 1; v != step {
		return model.StepStats{}, fmt.Errorf("sft: trainer at version %d cannot train step %d", v-1, step)
	}
	return b.tr.StepMicrobatches(st.Batch, st.Micro)
}

func (b *builtin) Save(_ context.Context, dir string) error {
	if err := b.tr.ServingCopy().SaveServing(filepath.Join(dir, ServingDir)); err != nil {
		return err
	}
	return b.tr.SaveTrainer(filepath.Join(dir, TrainerDir))
}

func (b *builtin) Close(context.Context) error { return nil }

// initialModel is the starting weights: InitCheckpoint (serving or
// trainer checkpoint) or fresh ones from the seed.
func initialModel(cfg Config) (*model.Model, error) {
	dir := cfg.InitCheckpoint
	if dir == "" {
		return model.New(cfg.Model, cfg.Seed)
	}
	if _, err := os.Stat(filepath.Join(dir, model.TrainerFileName)); err == nil {
		tr, err := model.LoadTrainer(dir)
		if err != nil {
			return nil, fmt.Errorf("sft: sft.init_checkpoint %s: %w", dir, err)
		}
		return tr.Model(), nil
	}
	m, err := model.LoadServing(dir)
	if err != nil {
		return nil, fmt.Errorf("sft: sft.init_checkpoint %s: %w", dir, err)
	}
	return m, nil
}

// newBuiltin starts the built-in backend: from resumeDir's trainer state
// (a checkpoint's trainer/), else the initial weights with a new trainer.
func newBuiltin(cfg Config, resumeDir string) (*builtin, Limits, error) {
	if resumeDir != "" {
		tr, err := model.LoadTrainer(filepath.Join(resumeDir, TrainerDir))
		if err != nil {
			return nil, Limits{}, fmt.Errorf("sft: resume from %s: %w", resumeDir, err)
		}
		return &builtin{tr: tr}, limitsOf(tr.Model()), nil
	}
	m, err := initialModel(cfg)
	if err != nil {
		return nil, Limits{}, err
	}
	tr, err := model.NewTrainer(m, cfg.Trainer)
	if err != nil {
		return nil, Limits{}, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return &builtin{tr: tr}, limitsOf(m), nil
}

func limitsOf(m *model.Model) Limits {
	return Limits{VocabSize: m.VocabSize(), MaxSeqLen: m.MaxSeqLen()}
}

// execBackend is a trainer child over the worker bridge.
type execBackend struct {
	sup  *bridge.Supervisor
	last string // serving checkpoint dir of the last step
	// lastOwned: last is a directory the child wrote for a step (not the
	// initial model): Save copies it into the step's checkpoint, so once
	// the next step's exists it is deleted — one serving directory per
	// step would otherwise fill the disk.
	lastOwned bool
}

var _ backend = (*execBackend)(nil)

// newExec starts the child. Fresh: the built-in policy's initial weights
// are written to OutputDir/exec/init as its model.path, or a Hugging Face
// model (Config.HFModel) is its model.path as it is. Resumed: Init.resume
// is the checkpoint's trainer/ (the child's own state) at step. It
// returns the model's limits.
func newExec(ctx context.Context, cfg Config, resumeDir string, step int64, log zerolog.Logger) (*execBackend, Limits, error) {
	work := filepath.Join(cfg.OutputDir, "exec")
	initDir, kind := filepath.Join(work, "init"), "builtin"
	var lim Limits
	if cfg.HFModel != "" {
		c, err := transformer.ReadConfig(cfg.HFModel)
		if err != nil {
			return nil, lim, fmt.Errorf("sft: model.path: %w", err)
		}
		initDir, kind = cfg.HFModel, "hf"
		lim = Limits{VocabSize: c.VocabSize, MaxSeqLen: c.MaxPositionEmbeddings}
	} else {
		var m *model.Model
		var err error
		if resumeDir != "" {
			m, err = model.LoadServing(filepath.Join(resumeDir, ServingDir))
		} else {
			m, err = initialModel(cfg)
		}
		if err != nil {
			return nil, lim, err
		}
		if err := os.RemoveAll(initDir); err != nil {
			return nil, lim, fmt.Errorf("sft: %w", err)
		}
		if err := m.SaveServing(initDir); err != nil {
			return nil, lim, fmt.Errorf("sft: exec initial weights: %w", err)
		}
		lim = Limits{VocabSize: m.VocabSize(), MaxSeqLen: m.MaxSeqLen()}
	}
	in, err := bridge.InitFor(cfg.Trainer, true, kind, initDir, filepath.Join(work, "out"))
	if err != nil {
		return nil, lim, err
	}
	if resumeDir != "" {
		state := filepath.Join(resumeDir, TrainerDir)
		in.Resume, in.Step = &state, step
	}
	sup, err := bridge.Start(ctx, bridge.Options{Spec: bridge.Spec{Argv: cfg.Exec, Env: cfg.ExecEnv}, Init: in,
		StepTimeout: cfg.ExecStepTimeout, Restarts: cfg.ExecRestarts,
		Logger: log.With().Str("component", "trainer-child").Logger()})
	if err != nil {
		return nil, lim, fmt.Errorf("sft: trainer.exec %v: %w", cfg.Exec, err)
	}
	return &execBackend{sup: sup, last: initDir}, lim, nil
}

func (e *execBackend) Step(ctx context.Context, st Step, step int64) (model.StepStats, error) {
	res, err := e.sup.Train(ctx, FrameBatch(st, step))
	if err != nil {
		return model.StepStats{}, err
	}
	if e.lastOwned && e.last != res.Checkpoint {
		if err := os.RemoveAll(e.last); err != nil {
			return model.StepStats{}, fmt.Errorf("sft: removing the superseded serving directory: %w", err)
		}
	}
	e.last, e.lastOwned = res.Checkpoint, true
	mt := res.Metrics
	return model.StepStats{Version: step, Loss: mt["loss"], Entropy: mt["entropy"], GradNorm: mt["grad_norm"],
		Tokens: int(mt["tokens"])}, nil
}

func (e *execBackend) Save(ctx context.Context, dir string) error {
	if err := fsutil.CopyDir(filepath.Join(dir, ServingDir), e.last); err != nil {
		return fmt.Errorf("sft: serving checkpoint %s: %w", e.last, err)
	}
	if _, err := e.sup.SaveCheckpoint(ctx, filepath.Join(dir, TrainerDir)); err != nil {
		return fmt.Errorf("sft: trainer child state: %w", err)
	}
	return nil
}

func (e *execBackend) Close(ctx context.Context) error { return e.sup.Close(ctx) }

// FrameBatch is a step as the bridge's TrainBatch (loss cross_entropy):
// tokens, offsets and loss masks of every example, the example ids as
// group ids, and one microbatch per non-padding bin.
func FrameBatch(st Step, step int64) *bridge.TrainBatch {
	seqs := st.Batch.Sequences
	var tok []int32
	var mask []uint8
	off := make([]int64, 0, len(seqs)+1)
	groups := make([]string, len(seqs))
	for i, s := range seqs {
		off = append(off, int64(len(tok)))
		tok = append(tok, s.Tokens...)
		mask = append(mask, s.LossMask...)
		groups[i] = s.Group
	}
	off = append(off, int64(len(tok)))
	var micro [][]int
	for _, m := range st.Micro {
		if len(m) > 0 {
			micro = append(micro, m)
		}
	}
	return &bridge.TrainBatch{Step: step, Loss: bridge.LossCrossEntropy, Groups: groups, Microbatches: micro,
		Arrays: map[string]bridge.Tensor{"tokens": bridge.Int32Tensor(tok), "seq_offsets": bridge.Int64Tensor(off),
			"loss_mask": bridge.Uint8Tensor(mask)}}
}
