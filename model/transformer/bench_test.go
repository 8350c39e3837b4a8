package transformer

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// Decode benchmark (docs/models.md, "Benchmark"): the engine's batched
// path — Forward over B per-sequence KV caches — for each architecture's
// tiny preset. One iteration prefills B prompts of benchPrompt tokens in
// one Forward, then decodes benchGen tokens per sequence greedily (argmax
// of each sequence's logits feeds the next step), one Forward per step.
// Reported: decode_tok/s = B·benchGen / decode time (prefill excluded),
// prefill_tok/s = B·benchPrompt / prefill time, and decode_tok/cpu-s =
// B·benchGen / the process's CPU time while decoding (on a shared machine
// the wall rate mostly measures the neighbours).
//
//	go test -run '^$' -bench Decode ./model/transformer/ [-benchtime 3x] \
//	    [-decode.vocab 151936,4096] [-decode.batch 1,32] [-decode.arch qwen3,...]
//
// PyTorch eager is measured with the same definition (integrations/torch).
var (
	benchVocabs = flag.String("decode.vocab", "151936,4096", "vocabulary sizes for BenchmarkDecode (151936 = Qwen3's)")
	benchBatch  = flag.String("decode.batch", "1,32", "batch sizes for BenchmarkDecode")
	benchArchs  = flag.String("decode.arch", "qwen3,qwen3_moe,llama,deepseek_v3", "architectures for BenchmarkDecode")
	benchPreset = flag.String("decode.preset", "tiny", "preset for BenchmarkDecode")
	// benchModels: checkpoint directories to load instead of presets, so
	// the Go engine and PyTorch decode the very same weights
	// (bench/models.sh runs both side by side).
	benchModels = flag.String("decode.model", "", "comma-separated HF checkpoint directories for BenchmarkDecode instead of -decode.arch/-decode.vocab presets")
)

// benchModel is one model BenchmarkDecode decodes with.
type benchModel struct {
	name  string
	vocab int
	m     *Model
}

// benchModelsToRun loads -decode.model's directories, or builds
// -decode.arch × -decode.vocab presets.
func benchModelsToRun(b *testing.B) []benchModel {
	var out []benchModel
	if *benchModels != "" {
		for _, dir := range splitComma(*benchModels) {
			m, err := Load(dir)
			if err != nil {
				b.Fatal(err)
			}
			out = append(out, benchModel{name: fmt.Sprintf("arch=%s/vocab=%d", m.Config().Arch, m.VocabSize()), vocab: m.VocabSize(), m: m})
		}
		return out
	}
	for _, arch := range splitComma(*benchArchs) {
		for _, vocab := range ints(*benchVocabs) {
			c, err := NewPreset(Arch(arch), Preset(*benchPreset), vocab)
			if err != nil {
				b.Fatal(err)
			}
			m, err := Init(c, GenerationConfig{}, 1)
			if err != nil {
				b.Fatal(err)
			}
			out = append(out, benchModel{name: fmt.Sprintf("arch=%s/vocab=%d", arch, vocab), vocab: vocab, m: m})
		}
	}
	return out
}

const (
	benchPrompt = 32
	benchGen    = 128
)

func ints(s string) []int {
	var out []int
	for _, f := range splitComma(s) {
		var v int
		fmt.Sscan(f, &v)
		out = append(out, v)
	}
	return out
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	return out
}

func argmaxF(x []float32) int32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return int32(best)
}

// decodeRun prefills B prompts and decodes gen tokens greedily; it returns
// the prefill and decode wall times and the decode's CPU time.
func decodeRun(m *Model, prompts [][]int32, gen int, logits [][]float32) (prefill, decode, decodeCPU time.Duration) {
	B := len(prompts)
	seqs := make([]*Seq, B)
	for i := range seqs {
		seqs[i] = m.NewCache()
	}
	t0 := time.Now()
	if err := m.ForwardSeqs(seqs, prompts, logits); err != nil {
		panic(err)
	}
	prefill = time.Since(t0)
	toks := make([][]int32, B)
	for i := range toks {
		toks[i] = []int32{argmaxF(logits[i])}
	}
	t1, c1 := time.Now(), cpuTime()
	for range gen {
		if err := m.ForwardSeqs(seqs, toks, logits); err != nil {
			panic(err)
		}
		for i := range toks {
			toks[i][0] = argmaxF(logits[i])
		}
	}
	return prefill, time.Since(t1), cpuTime() - c1
}

func BenchmarkDecode(b *testing.B) {
	for _, bm := range benchModelsToRun(b) {
		m, vocab := bm.m, bm.vocab
		for _, B := range ints(*benchBatch) {
			b.Run(fmt.Sprintf("%s/batch=%d", bm.name, B), func(b *testing.B) {
				rng := rand.New(rand.NewPCG(1, 2))
				prompts := make([][]int32, B)
				logits := make([][]float32, B)
				for i := range prompts {
					prompts[i] = randTokens(rng, benchPrompt, vocab)
					logits[i] = make([]float32, vocab)
				}
				decodeRun(m, prompts, 4, logits) // warm the workspace and caches
				var pre, dec, cpu time.Duration
				n := 0
				for b.Loop() {
					p, d, c := decodeRun(m, prompts, benchGen, logits)
					pre += p
					dec += d
					cpu += c
					n++
				}
				b.ReportMetric(float64(n*B*benchGen)/dec.Seconds(), "decode_tok/s")
				if cpu > 0 {
					b.ReportMetric(float64(n*B*benchGen)/cpu.Seconds(), "decode_tok/cpu-s")
				}
				b.ReportMetric(float64(n*B*benchPrompt)/pre.Seconds(), "prefill_tok/s")
			})
		}
	}
}
