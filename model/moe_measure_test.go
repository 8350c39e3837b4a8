package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"syscall"
	"testing"

	"github.com/asyncrl/asyncrl/model/sampler"
)

// moeBenchConfigs are the shapes BENCHMARKS.md "R3 on the built-in MoE"
// compares: the default dense policy and mixtures of its hidden layer.
func moeBenchConfigs() []struct {
	name string
	cfg  Config
} {
	moe := func(e, k int) Config {
		c := DefaultConfig()
		c.Experts, c.TopK = e, k
		return c
	}
	return []struct {
		name string
		cfg  Config
	}{{"dense", DefaultConfig()}, {"e4k1", moe(4, 1)}, {"e4k2", moe(4, 2)}, {"e8k2", moe(8, 2)}}
}

// BenchmarkMoEStep: Trainer.Step (one worker) on the same 64 × 8-token
// batch shape as BenchmarkTrainerStep, dense vs mixtures, with the
// engine's routes replayed (replay=1) or routed by the trainer (replay=0).
func BenchmarkMoEStep(b *testing.B) {
	for _, c := range moeBenchConfigs() {
		for _, replay := range []bool{false, true} {
			if replay && c.cfg.Experts == 0 {
				continue
			}
			b.Run(fmt.Sprintf("%s/replay=%v", c.name, replay), func(b *testing.B) {
				m, _ := New(c.cfg, 1)
				tr, _ := NewTrainer(m, DefaultTrainerConfig())
				serve := tr.ServingCopy()
				seqs := rollout(b, serve, 64, 8, rand.New(rand.NewPCG(1, 1)), sampler.DefaultParams())
				if replay {
					for i := range seqs {
						seqs[i].Routes = serve.Routes(seqs[i].Tokens, 0)
					}
				}
				var tokens int
				for b.Loop() {
					st, err := tr.Step(Batch{Sequences: seqs})
					if err != nil {
						b.Fatal(err)
					}
					tokens += st.Tokens
				}
				b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tokens/s")
			})
		}
	}
}

// BenchmarkMoENextLogits: the engine's per-token forward, dense vs mixtures.
func BenchmarkMoENextLogits(b *testing.B) {
	toks := []int32{1, 10, 20, 30, 40, 50, 60, 70, 80, 90, 5, 6, 7, 8, 9, 11, 12, 13}
	for _, c := range moeBenchConfigs() {
		b.Run(c.name, func(b *testing.B) {
			m, _ := New(c.cfg, 1)
			out := make([]float32, m.VocabSize())
			for b.Loop() {
				m.NextLogits(toks, out)
			}
		})
	}
}

// copyAdvantages scores each sequence by the fraction of its generated
// tokens equal to its first prompt token after BOS (a copy task with a
// learnable signal) and sets Advantage = reward − the batch mean.
func copyAdvantages(seqs []Sequence) (mean float64) {
	r := make([]float64, len(seqs))
	for i, s := range seqs {
		var hit, n float64
		for j, m := range s.LossMask {
			if m != 0 {
				n++
				if s.Tokens[j] == s.Tokens[1] {
					hit++
				}
			}
		}
		r[i] = hit / n
		mean += r[i] / float64(len(seqs))
	}
	for i := range seqs {
		seqs[i].Advantage = float32(r[i] - mean)
	}
	return mean
}

// TestMeasureR3Drift measures the train–inference logprob mismatch with and
// without route replay as the trainer drifts from the weights that
// generated a batch (BENCHMARKS.md "R3 on the built-in MoE"). The policy
// first trains ASYNCRL_MEASURE_WARMUP steps (default 0) on a copy task, and
// ASYNCRL_MEASURE_HEAD_SCALE multiplies the initial head weights so the
// distribution is peaked as a trained one's rather than near uniform. Then a batch is sampled from
// the BF16 serving copy with the engine's routes; the trainer takes steps
// on fresh batches of the same task and after each one the batch's mean
// |logp_trainer − logp_rollout| is computed with the routes replayed and
// with the trainer's own routing, plus the fraction of loss rows whose own
// routing differs from the engine's. Measurement only:
// ASYNCRL_MEASURE=1 go test ./model -run TestMeasureR3Drift -v.
func TestMeasureR3Drift(t *testing.T) {
	if os.Getenv("ASYNCRL_MEASURE") == "" {
		t.Skip("measurement: set ASYNCRL_MEASURE=1")
	}
	const maxDrift, seeds = 4, 2
	warmup, _ := strconv.Atoi(os.Getenv("ASYNCRL_MEASURE_WARMUP"))
	headScale, _ := strconv.ParseFloat(os.Getenv("ASYNCRL_MEASURE_HEAD_SCALE"), 64)
	for _, c := range moeBenchConfigs() {
		if c.name == "e4k1" {
			continue
		}
		var reward, entropy float64
		var own, rep, flips [maxDrift + 1]float64
		for seed := range uint64(seeds) {
			m, _ := New(c.cfg, 100+seed)
			if headScale > 0 { // a peaked policy, as a trained one is
				m.UpdateParams(func(p []float32) {
					for i := m.headW; i < m.headB; i++ {
						p[i] *= float32(headScale)
					}
				})
			}
			tr, _ := NewTrainer(m, DefaultTrainerConfig())
			rng := rand.New(rand.NewPCG(seed, 77))
			step := func() StepStats {
				fresh := rollout(t, tr.ServingCopy(), 64, 16, rng, sampler.DefaultParams())
				copyAdvantages(fresh)
				st, err := tr.Step(Batch{Sequences: fresh})
				if err != nil {
					t.Fatal(err)
				}
				return st
			}
			for range warmup {
				step()
			}
			serve := tr.ServingCopy()
			batch := rollout(t, serve, 64, 16, rng, sampler.DefaultParams())
			reward += copyAdvantages(batch) / seeds
			for i := range batch {
				if c.cfg.Experts > 0 {
					batch[i].Routes = serve.Routes(batch[i].Tokens, 0)
				}
			}
			for k := 0; k <= maxDrift; k++ {
				if k > 0 {
					st := step()
					if k == 1 {
						entropy += st.Entropy / seeds
					}
				}
				plain := make([]Sequence, len(batch))
				for i := range batch {
					plain[i] = batch[i]
					plain[i].Routes = nil
				}
				lpOwn, err := tr.Logprobs(Batch{Sequences: plain})
				if err != nil {
					t.Fatal(err)
				}
				lpRep, err := tr.Logprobs(Batch{Sequences: batch})
				if err != nil {
					t.Fatal(err)
				}
				var sOwn, sRep float64
				var n, differ, rows int
				for si, s := range batch {
					var trainerRoutes []int32
					if c.cfg.Experts > 0 {
						trainerRoutes = tr.Model().Routes(s.Tokens, 0)
					}
					rl := tr.Model().RoutesLen()
					for i, mk := range s.LossMask {
						if mk == 0 {
							continue
						}
						sOwn += math.Abs(float64(lpOwn[si][i] - s.RolloutLogprobs[i]))
						sRep += math.Abs(float64(lpRep[si][i] - s.RolloutLogprobs[i]))
						n++
						if rl > 0 {
							rows++
							a, b := slices.Clone(trainerRoutes[(i-1)*rl:i*rl]), slices.Clone(s.Routes[(i-1)*rl:i*rl])
							slices.Sort(a)
							slices.Sort(b)
							if !slices.Equal(a, b) {
								differ++
							}
						}
					}
				}
				own[k] += sOwn / float64(n) / seeds
				rep[k] += sRep / float64(n) / seeds
				if rows > 0 {
					flips[k] += float64(differ) / float64(rows) / seeds
				}
			}
		}
		t.Logf("%-6s after %d warm-up steps, head ×%g: batch reward %.3f, entropy %.3f nats", c.name, warmup, headScale, reward, entropy)
		for k := 0; k <= maxDrift; k++ {
			if c.cfg.Experts == 0 {
				t.Logf("%-6s drift %d: mean |Δlogprob| %.5f (dense: nothing to replay)", c.name, k, own[k])
				continue
			}
			t.Logf("%-6s drift %d: mean |Δlogprob| own routing %.5f, replayed %.5f (×%.2f); rows routed differently %.1f%%",
				c.name, k, own[k], rep[k], own[k]/rep[k], 100*flips[k])
		}
	}
}

// TestMeasureMoEStepCPU: Trainer.Step (one worker, the 64 × 8-token batch
// of BenchmarkMoEStep) dense vs mixtures in process CPU time, the configs
// interleaved in each round and the per-step median over rounds reported:
// on the shared 2-core machine wall-clock benchmarks of the same code
// swing 2–5× between runs. Measurement only:
// ASYNCRL_MEASURE=1 go test ./model -run TestMeasureMoEStepCPU -v.
func TestMeasureMoEStepCPU(t *testing.T) {
	if os.Getenv("ASYNCRL_MEASURE") == "" {
		t.Skip("measurement: set ASYNCRL_MEASURE=1")
	}
	type arm struct {
		name string
		tr   *Trainer
		b    Batch
		cpu  []float64
	}
	var arms []*arm
	for _, c := range moeBenchConfigs() {
		for _, replay := range []bool{false, true} {
			if replay && c.cfg.Experts == 0 {
				continue
			}
			m, _ := New(c.cfg, 1)
			tr, _ := NewTrainer(m, DefaultTrainerConfig())
			serve := tr.ServingCopy()
			seqs := rollout(t, serve, 64, 8, rand.New(rand.NewPCG(1, 1)), sampler.DefaultParams())
			if replay {
				for i := range seqs {
					seqs[i].Routes = serve.Routes(seqs[i].Tokens, 0)
				}
			}
			arms = append(arms, &arm{name: fmt.Sprintf("%s/replay=%v", c.name, replay), tr: tr, b: Batch{Sequences: seqs}})
		}
	}
	cpu := func() float64 {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e6
	}
	const rounds, steps = 7, 5
	for range rounds {
		for _, a := range arms {
			t0 := cpu()
			for range steps {
				if _, err := a.tr.Step(a.b); err != nil {
					t.Fatal(err)
				}
			}
			a.cpu = append(a.cpu, (cpu()-t0)/steps)
		}
	}
	median := func(x []float64) float64 {
		s := slices.Clone(x)
		slices.Sort(s)
		return s[len(s)/2]
	}
	base := median(arms[0].cpu)
	for _, a := range arms {
		t.Logf("%-16s %6.1f CPU ms/step (×%.2f dense)", a.name, median(a.cpu), median(a.cpu)/base)
	}
	// the engine's side: NextLogits per token
	toks := []int32{1, 10, 20, 30, 40, 50, 60, 70, 80, 90, 5, 6, 7, 8, 9, 11, 12, 13}
	out := make([]float32, DefaultConfig().VocabSize)
	var serve []*Model
	for _, c := range moeBenchConfigs() {
		m, _ := New(c.cfg, 1)
		serve = append(serve, m)
	}
	us := make([][]float64, len(serve))
	const calls = 4000
	for range rounds {
		for i, m := range serve {
			t0 := cpu()
			for range calls {
				m.NextLogits(toks, out)
			}
			us[i] = append(us[i], (cpu()-t0)*1000/calls)
		}
	}
	for i, c := range moeBenchConfigs() {
		t.Logf("NextLogits %-6s %5.2f CPU µs/token (×%.2f dense)", c.name, median(us[i]), median(us[i])/median(us[0]))
	}
}
