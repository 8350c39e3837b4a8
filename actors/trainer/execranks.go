package trainer

import "sync"

// RankStat is one rank's figures over the steps an exec backend's worker
// group trained (StepResult.rank, docs/protocol.md "Worker groups").
type RankStat struct {
	Rank  int `json:"rank"`
	Steps int `json:"steps"`
	// StepSeconds is the rank's time in its TrainBatch (its microbatches,
	// the all-reduces and the optimiser step; not the checkpoint write),
	// summed over Steps; AllReduceSeconds the gradient all-reduce's part.
	StepSeconds      float64 `json:"step_seconds"`
	AllReduceSeconds float64 `json:"allreduce_seconds"`
	// LastStepSeconds and LastAllReduceSeconds are the latest step's.
	LastStepSeconds      float64 `json:"last_step_seconds"`
	LastAllReduceSeconds float64 `json:"last_allreduce_seconds"`
	// MemoryBytes is the rank's peak memory (CUDA's peak allocation, or
	// the process's peak resident set on CPU).
	MemoryBytes float64 `json:"memory_bytes"`
}

// rankBook accumulates the per-rank figures; read concurrently by
// metrics scrapes.
type rankBook struct {
	mu    sync.Mutex
	ranks []RankStat
}

func (b *rankBook) add(figs []map[string]float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, f := range figs {
		r := i
		if v, ok := f["rank"]; ok && v >= 0 && v < 1<<16 {
			r = int(v)
		}
		for len(b.ranks) <= r {
			b.ranks = append(b.ranks, RankStat{Rank: len(b.ranks)})
		}
		st := &b.ranks[r]
		st.Steps++
		st.LastStepSeconds, st.LastAllReduceSeconds = f["step_s"], f["allreduce_s"]
		st.StepSeconds += f["step_s"]
		st.AllReduceSeconds += f["allreduce_s"]
		st.MemoryBytes = max(st.MemoryBytes, f["memory_bytes"])
	}
}

func (b *rankBook) snapshot() []RankStat {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]RankStat(nil), b.ranks...)
}

// RankStats are the worker group's per-rank figures so far, in rank
// order (one entry for a single child that reports them; none for a child
// that does not); safe to call concurrently with Step.
func (e *Exec) RankStats() []RankStat { return e.ranks.snapshot() }

// Ranks is the size of the worker group (trainer.exec_ranks; 1 = one child).
func (e *Exec) Ranks() int { return e.sup.Ranks() }
