package config

import (
	"strings"
	"testing"
)

func TestSFTSection(t *testing.T) {
	good := `
sft:
  data:
    datasets:
      - {name: a, path: /data/a, weight: 0.7}
      - {name: b, path: /data/b, format: parquet, weight: 0.3}
    sampler: {kind: mixture, seed: 3, epochs: 2, replacement: true}
  steps: 5
  tokens_per_step: 2048
  pack: {microbatch_tokens: 512, strategy: balanced}
  resume: true
trainer:
  init_checkpoint: runs/sft/latest/trainer
`
	c, err := Parse("good.yaml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if s := c.SFT; len(s.Data.Datasets) != 2 || s.Data.Datasets[1].Format != "parquet" || s.Data.Sampler.Kind != "mixture" ||
		s.Pack.Strategy != "balanced" || !s.Resume || s.LearningRate != DefaultSFT().LearningRate || c.Trainer.InitCheckpoint == "" {
		t.Fatalf("parsed %+v", c.SFT)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"sft:\n  data:\n    sampler: {kind: random}\n", `sft.data.sampler.kind: "random" is not one of sequential, shuffle, block_shuffle, mixture`},
		{"sft:\n  data:\n    datasets: [{name: a, path: x, format: csv}]\n", `sft.data.datasets[0].format`},
		{"sft:\n  data:\n    sampler: {kind: block_shuffle, window: -1}\n", `sft.data.sampler.window`},
		{"sft:\n  data:\n    sampler: {kind: block_shuffle, block_rows: -2}\n", `sft.data.sampler.block_rows`},
		{"sft:\n  data:\n    datasets: [{name: a, path: x}, {name: a, path: y}]\n", `is also datasets[0]'s name`},
		{"sft:\n  data:\n    datasets: [{name: a}]\n", `sft.data.datasets[0].path`},
		{"sft:\n  pack: {microbatch_tokens: 0}\n", `sft.pack.microbatch_tokens`},
		{"sft:\n  pack: {strategy: best}\n", `sft.pack.strategy`},
		{"sft:\n  tokens_per_step: 0\n", `sft.tokens_per_step`},
		{"sft:\n  data:\n    datasets: [{path: x, wieght: 1}]\n", `unknown key (did you mean weight?)`},
		{"trainer:\n  backend: exec\n  exec: [x]\n  init_checkpoint: d\n", `trainer.init_checkpoint`},
	} {
		_, err := Parse("bad.yaml", []byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want it to mention %q", tc.yaml, err, tc.want)
		}
	}
}
