package sft

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/sft/data"
)

// Options are the shell's inputs besides the config.
type Options struct {
	// Log receives the run's events (zerolog.Nop when zero).
	Log zerolog.Logger
	// Progress, when set, gets a progress line per step (Terminal: one
	// line rewritten in place; otherwise about 20 lines per run).
	Progress io.Writer
	Terminal bool
	// ReportDir, when set, gets sft-report.json and sft-report.md.
	ReportDir string
	// Now is the clock for the throughput figures (nil = time.Now).
	Now func() time.Time
	// Open and Pack are the data path (nil = data.Open and data.Pack).
	Open func(context.Context, data.Config) (data.Stream, error)
	Pack func([]data.Example, data.PackConfig) ([]data.Bin, error)
	// OnStep, when set, is called after each trained step with its record
	// (tests compare the example ids of runs).
	OnStep func(StepRecord)
}

// StepRecord is one trained step: its point on the loss curve and the ids
// of its examples in draw order.
type StepRecord struct {
	StepPoint
	IDs []data.ExampleID
}

// Result is what Run did.
type Result struct {
	Report Report
	// Checkpoint is the newest checkpoint directory written ("" if none).
	Checkpoint string
	// ResumedFrom is the step the run resumed after (0: a fresh start).
	ResumedFrom int64
	// Interrupted is set when ctx ended the run; the last completed step
	// was checkpointed.
	Interrupted bool
}

// Run trains cfg.Steps steps (or until the data ends), checkpointing every
// cfg.CheckpointEvery steps and after the last, and writes the report. On
// ctx's end it checkpoints the last completed step and returns with
// Result.Interrupted (and a nil error).
func Run(ctx context.Context, cfg Config, opts Options) (res Result, err error) {
	if err := cfg.Validate(); err != nil {
		return res, err
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Open == nil {
		opts.Open = data.Open
	}
	if opts.Pack == nil {
		opts.Pack = data.Pack
	}
	log := opts.Log
	var resumeDir string
	var saved savedState
	if cfg.Resume {
		if resumeDir, saved, err = latestCheckpoint(cfg.OutputDir); err != nil {
			return res, err
		}
		if saved.Backend != cfg.Backend {
			return res, fmt.Errorf("%w: trainer.backend %s, but the checkpoint %s was written by backend %s", ErrConfig, cfg.Backend, resumeDir, saved.Backend)
		}
		res.ResumedFrom = saved.Step
	}
	var be backend
	var lim Limits
	switch cfg.Backend {
	case BackendExec:
		be, lim, err = newExec(ctx, cfg, resumeDir, saved.Step, log)
	default:
		be, lim, err = newBuiltin(cfg, resumeDir)
	}
	if err != nil {
		return res, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if cerr := be.Close(cctx); cerr != nil && err == nil {
			err = fmt.Errorf("sft: closing the trainer: %w", cerr)
		}
	}()

	dcfg, lim, err := dataConfig(cfg, lim)
	if err != nil {
		return res, err
	}
	stream, err := opts.Open(ctx, dcfg)
	if err != nil {
		return res, fmt.Errorf("sft: opening the data: %w", err)
	}
	defer stream.Close()
	report := newReport(cfg)
	if resumeDir != "" {
		if err := stream.Restore(saved.Sampler); err != nil {
			return res, fmt.Errorf("sft: restoring the sampler from %s: %w", resumeDir, err)
		}
		report = saved.Report
		log.Info().Str("checkpoint", resumeDir).Int64("step", saved.Step).Msg("sft: resumed")
	}

	r := &runner{cfg: cfg, opts: opts, be: be, stream: stream, lim: lim, report: report, step: saved.Step, log: log}
	res, err = r.loop(ctx)
	res.ResumedFrom = saved.Step
	if opts.ReportDir != "" && len(r.report.Steps) > 0 {
		if werr := WriteReport(opts.ReportDir, r.report); werr != nil && err == nil {
			err = werr
		}
	}
	return res, err
}

// dataConfig fills the data config's vocabulary and length limits from
// the model's (lim, VocabSize and MaxSeqLen), and the dataset names of the
// limits Limits.Check uses.
func dataConfig(cfg Config, lim Limits) (data.Config, Limits, error) {
	d := cfg.Data
	for _, ds := range d.Datasets {
		lim.Names = append(lim.Names, ds.Name)
	}
	switch {
	case d.VocabSize == 0:
		d.VocabSize = lim.VocabSize
	case d.VocabSize > lim.VocabSize:
		return d, lim, fmt.Errorf("%w: sft.data.vocab_size %d exceeds the model's vocab_size %d", ErrConfig, d.VocabSize, lim.VocabSize)
	}
	switch {
	case d.MaxLen == 0:
		d.MaxLen = lim.MaxSeqLen
	case d.MaxLen > lim.MaxSeqLen:
		return d, lim, fmt.Errorf("%w: sft.data.max_len %d exceeds the model's max_seq_len %d", ErrConfig, d.MaxLen, lim.MaxSeqLen)
	}
	if cfg.Pack.Budget < d.MaxLen {
		return d, lim, fmt.Errorf("%w: sft.pack.microbatch_tokens %d is below the longest example allowed (%d = sft.data.max_len or the model's max_seq_len): raise it or lower max_len", ErrConfig, cfg.Pack.Budget, d.MaxLen)
	}
	return d, lim, nil
}

// runner is Run's loop state.
type runner struct {
	cfg    Config
	opts   Options
	be     backend
	stream data.Stream
	lim    Limits
	report Report
	step   int64
	log    zerolog.Logger
	// sampler is the stream's state after the last trained step's examples.
	sampler []byte
	saved   int64 // last step checkpointed
}

func (r *runner) loop(ctx context.Context) (Result, error) {
	var res Result
	r.saved = r.step
	for r.cfg.Steps == 0 || r.step < int64(r.cfg.Steps) {
		if ctx.Err() != nil {
			res.Interrupted = true
			break
		}
		stop, err := r.oneStep(ctx, &res)
		if err != nil {
			return res, err
		}
		if stop {
			break
		}
	}
	if r.step > r.saved && r.sampler != nil {
		// the data ended, or the run was interrupted, after an
		// unsaved step: its checkpoint is the one to resume from
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
		defer cancel()
		var err error
		if res.Checkpoint, err = r.checkpoint(sctx); err != nil {
			return res, err
		}
	}
	res.Report = r.report
	return res, nil
}

// oneStep draws, packs and trains one step, records it and checkpoints when
// due; stop says the loop ends (the data ended or ctx was cancelled, which
// sets res.Interrupted).
func (r *runner) oneStep(ctx context.Context, res *Result) (stop bool, err error) {
	t0 := r.opts.Now()
	examples, end, err := r.draw(ctx)
	if err != nil {
		if ctx.Err() != nil {
			res.Interrupted = true
			return true, nil
		}
		return true, err
	}
	if len(examples) == 0 {
		return true, nil // the data ended with the previous step
	}
	state, err := r.stream.State()
	if err != nil {
		return true, fmt.Errorf("sft: sampler state: %w", err)
	}
	bins, err := r.opts.Pack(examples, r.cfg.Pack)
	if err != nil {
		return true, fmt.Errorf("sft: step %d: packing: %w", r.step+1, err)
	}
	st, err := Assemble(examples, bins)
	if err != nil {
		return true, err
	}
	t1 := r.opts.Now()
	stats, err := r.be.Step(ctx, st, r.step+1)
	if err != nil {
		if ctx.Err() != nil {
			res.Interrupted = true
			return true, nil
		}
		return true, fmt.Errorf("sft: step %d: %w", r.step+1, err)
	}
	t2 := r.opts.Now()
	r.step++
	r.sampler = state
	p := StepPoint{Step: r.step, Loss: stats.Loss, Tokens: st.Tokens, Trained: st.Trained, Examples: len(examples),
		Bins: len(bins), PaddingTokens: st.PaddingTokens, DataSeconds: t1.Sub(t0).Seconds(), TrainSeconds: t2.Sub(t1).Seconds()}
	r.report.add(p, st)
	if r.opts.OnStep != nil {
		r.opts.OnStep(StepRecord{StepPoint: p, IDs: st.IDs})
	}
	last := end || (r.cfg.Steps > 0 && r.step == int64(r.cfg.Steps))
	r.progress(p, last)
	if last || (r.cfg.CheckpointEvery > 0 && r.step%int64(r.cfg.CheckpointEvery) == 0) {
		if res.Checkpoint, err = r.checkpoint(ctx); err != nil {
			return true, err
		}
	}
	return end, nil
}

// draw takes examples from the stream until they hold TokensPerStep
// tokens; end reports that the stream ran out (io.EOF).
func (r *runner) draw(ctx context.Context) (examples []data.Example, end bool, err error) {
	tokens := 0
	for tokens < r.cfg.TokensPerStep {
		ex, err := r.stream.Next(ctx)
		if errors.Is(err, io.EOF) {
			return examples, true, nil
		}
		if err != nil {
			return nil, false, fmt.Errorf("sft: step %d: reading examples: %w", r.step+1, err)
		}
		if err := r.lim.Check(ex); err != nil {
			return nil, false, err
		}
		examples = append(examples, ex)
		tokens += len(ex.Tokens)
	}
	return examples, false, nil
}

func (r *runner) checkpoint(ctx context.Context) (string, error) {
	dir, err := saveCheckpoint(ctx, r.cfg.OutputDir, r.be, savedState{Version: stateVersion, Step: r.step,
		Backend: r.cfg.Backend, Sampler: r.sampler, Report: r.report})
	if err != nil {
		return "", err
	}
	r.saved = r.step
	r.log.Info().Str("checkpoint", dir).Int64("step", r.step).Msg("sft: checkpoint written")
	return dir, nil
}

// progress prints the step's line: every step on a terminal (rewritten in
// place), about 20 lines per run otherwise.
func (r *runner) progress(p StepPoint, last bool) {
	w := r.opts.Progress
	if w == nil {
		return
	}
	total := "?"
	if r.cfg.Steps > 0 {
		total = fmt.Sprint(r.cfg.Steps)
	}
	line := fmt.Sprintf("sft step %d/%s: loss %.4f, %d tokens (%d examples, %d bins), data %s tok/s, trainer %s tok/s",
		p.Step, total, p.Loss, p.Tokens, p.Examples, p.Bins, rate(r.report.DataTokensPerSecond), rate(r.report.TrainTokensPerSecond))
	switch {
	case r.opts.Terminal:
		fmt.Fprintf(w, "\r\x1b[K%s", line)
		if last {
			fmt.Fprintln(w)
		}
	case last || r.cfg.Steps == 0 || p.Step%int64(max(1, r.cfg.Steps/20)) == 0:
		fmt.Fprintln(w, line)
	}
}

// rate formats tokens/s with a unit.
func rate(x float64) string {
	switch {
	case x >= 1e9:
		return fmt.Sprintf("%.2fG", x/1e9)
	case x >= 1e6:
		return fmt.Sprintf("%.2fM", x/1e6)
	case x >= 1e3:
		return fmt.Sprintf("%.1fk", x/1e3)
	}
	return fmt.Sprintf("%.0f", x)
}
