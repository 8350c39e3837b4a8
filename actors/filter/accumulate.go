package filter

import "fmt"

// Ref is a handle to one trajectory: Index into the Batch-th generation
// batch given to Accumulator.Add since the last completed training batch.
type Ref struct{ Batch, Index int }

// Result is what Accumulator.Add reports.
type Result struct {
	// Done: a training batch is ready in Refs.
	Done bool
	// Refs: when Done, exactly TrainBatchSize·n trajectories (the first
	// ones kept, in arrival order); otherwise nil.
	Refs []Ref
	// Prompts is the number of kept groups collected (before truncation).
	Prompts int
	// SampleBatches is the number of generation batches sampled so far for
	// this training batch.
	SampleBatches int
}

// Accumulator is DAPO dynamic sampling across generation batches
// (ModeFilter): it keeps the good groups of each batch until at least
// train_batch_size groups are collected, then hands back the first
// train_batch_size·n trajectories and starts over.
type Accumulator struct {
	cfg     Config
	kept    []Ref
	prompts int
	batches int
}

// NewAccumulator validates cfg (the mode is not consulted: accumulation is
// the filter mode's behaviour).
func NewAccumulator(cfg Config) (*Accumulator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Accumulator{cfg: cfg}, nil
}

// Add filters one generation batch and accumulates its kept groups. When
// still short and sample_batch_count ≥ max_sample_batches it returns an
// error wrapping ErrMaxSampleBatches and starts over (SkyRL raises: the
// data set yields too little signal, which the user must see).
func (a *Accumulator) Add(batch []Sample) (Result, error) {
	a.batches++
	for _, g := range groupsOf(batch) {
		if !good(batch, g.indices, a.cfg.NSamplesPerPrompt) {
			continue
		}
		a.prompts++
		for _, i := range g.indices {
			a.kept = append(a.kept, Ref{Batch: a.batches - 1, Index: i})
		}
	}
	r := Result{Prompts: a.prompts, SampleBatches: a.batches}
	if a.prompts >= a.cfg.TrainBatchSize {
		want := a.cfg.TrainBatchSize * a.cfg.NSamplesPerPrompt
		r.Done = true
		r.Refs = a.kept[:min(want, len(a.kept))]
		a.reset()
		return r, nil
	}
	if a.cfg.MaxSampleBatches != -1 && a.batches >= a.cfg.MaxSampleBatches {
		a.reset()
		return r, fmt.Errorf("%w: %d batches sampled, %d of %d prompts kept", ErrMaxSampleBatches,
			r.SampleBatches, r.Prompts, a.cfg.TrainBatchSize)
	}
	return r, nil
}

func (a *Accumulator) reset() {
	a.kept, a.prompts, a.batches = nil, 0, 0
}
