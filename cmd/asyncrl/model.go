package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/asyncrl/asyncrl/model/transformer"
)

// newModelCmd: asyncrl model init | inspect — Hugging Face checkpoints of
// the supported architectures (docs/models.md).
func newModelCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "model",
		Short: "Create and inspect Hugging Face checkpoints (qwen3, qwen3_moe, llama, deepseek_v3)",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newModelInitCmd(g), newModelInspectCmd(g))
	return cmd
}

type modelInitFlags struct {
	arch, preset, tokenizer, out string
	vocab                        int
	seed                         uint64
	shardSize                    int64
	initRange, routerBiasStd     float64
}

func newModelInitCmd(g *globals) *cobra.Command {
	f := &modelInitFlags{}
	cmd := &cobra.Command{
		Use:   "init --arch ARCH --preset tiny|small (--tokenizer DIR | --vocab N) --out DIR [--seed S]",
		Short: "Write a randomly initialised checkpoint in Hugging Face layout",
		Long: "Write a randomly initialised checkpoint of a supported architecture in Hugging Face's\n" +
			"layout: config.json, model.safetensors (BF16; shards + model.safetensors.index.json\n" +
			"with --shard-size), generation_config.json and the tokenizer's files. The vocabulary\n" +
			"comes from --tokenizer's tokenizer.json (bos/eos from its tokenizer_config.json), or\n" +
			"--vocab N for a checkpoint without a tokenizer (tests, benchmarks). Initialisation\n" +
			"follows transformers' _init_weights and is deterministic for --seed.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := runModelInit(g, f); err != nil {
				return fail("asyncrl model init: %v", err)
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.arch, "arch", "", "architecture: qwen3, qwen3_moe, llama or deepseek_v3")
	fs.StringVar(&f.preset, "preset", "tiny", "size: tiny or small (docs/models.md)")
	fs.StringVar(&f.tokenizer, "tokenizer", "", "tokenizer `DIR` holding tokenizer.json (and tokenizer_config.json); its files are copied into --out")
	fs.IntVar(&f.vocab, "vocab", 0, "vocabulary size `N` without --tokenizer; with it, pads the embedding to N rows (e.g. Qwen3's 151936)")
	fs.StringVar(&f.out, "out", "", "output `DIR` (new or empty)")
	fs.Uint64Var(&f.seed, "seed", 1, "initialisation seed")
	fs.Int64Var(&f.shardSize, "shard-size", 0, "shard the weights into files of at most `BYTES` (0 = one model.safetensors)")
	fs.Float64Var(&f.initRange, "initializer-range", 0.02, "config.json initializer_range: the std of every weight's normal init (HF's default 0.02; larger makes a random model's outputs less uniform)")
	fs.Float64Var(&f.routerBiasStd, "router-bias-std", 0, "deepseek_v3: draw e_score_correction_bias from normal(0, STD) instead of HF's zeros, so the bias matters")
	return cmd
}

func runModelInit(g *globals, f *modelInitFlags) error {
	// the flags a user forgot, by their names; the rest is Create's
	switch {
	case f.arch == "":
		return errors.New("--arch is required (one of qwen3, qwen3_moe, llama, deepseek_v3)")
	case f.out == "":
		return errors.New("--out DIR is required")
	case f.tokenizer == "" && f.vocab <= 0:
		return errors.New("give --tokenizer DIR (a directory with tokenizer.json) or --vocab N")
	case f.initRange <= 0:
		return fmt.Errorf("--initializer-range must be > 0, got %v", f.initRange)
	}
	m, err := transformer.Create(transformer.CreateOptions{Arch: f.arch, Preset: f.preset, Tokenizer: f.tokenizer,
		Vocab: f.vocab, Out: f.out, Seed: f.seed, ShardSize: f.shardSize, InitializerRange: f.initRange,
		RouterBiasStd: f.routerBiasStd})
	if err != nil {
		return err
	}
	fmt.Fprintf(g.stdout, "wrote %s: %s %s, %d parameters, vocabulary %d, seed %d\n", f.out, f.arch, f.preset, m.NumParams(), m.VocabSize(), f.seed)
	return nil
}

func newModelInspectCmd(g *globals) *cobra.Command {
	var asJSON, all bool
	cmd := &cobra.Command{
		Use:   "inspect DIR [--json]",
		Short: "Describe a checkpoint: architecture, parameters, tensors, quantisation, what asyncrl can do with it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := transformer.Inspect(args[0])
			if err != nil {
				return fail("asyncrl model inspect: %v", err)
			}
			if asJSON {
				return writeJSON(g.stdout, r)
			}
			printInspect(g.stdout, r, all)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	cmd.Flags().BoolVar(&all, "all", false, "list every tensor (default: the first 40)")
	return cmd
}

func printInspect(w io.Writer, r *transformer.Report, all bool) {
	fmt.Fprintf(w, "checkpoint    %s\n", r.Dir)
	fmt.Fprintf(w, "architecture  %s (model_type %s)\n", r.Architectures, r.ModelType)
	fmt.Fprintf(w, "parameters    %d\n", r.Params)
	fmt.Fprintf(w, "layers        %d, hidden %d, vocabulary %d\n", r.Layers, r.Hidden, r.Vocab)
	if len(r.MoELayers) > 0 {
		fmt.Fprintf(w, "experts       %d, top-%d, in layers %v\n", r.Experts, r.TopK, r.MoELayers)
	}
	fmt.Fprintf(w, "quantisation  %s\n", r.Quantization)
	fmt.Fprintf(w, "files         %s\n", strings.Join(r.Files, ", "))
	if r.Valid {
		fmt.Fprintf(w, "valid         yes\n")
	} else {
		fmt.Fprintf(w, "valid         NO: %s\n", r.Problem)
	}
	fmt.Fprintf(w, "\nasyncrl can:\n")
	for _, c := range r.Can {
		fmt.Fprintf(w, "  - %s\n", c)
	}
	fmt.Fprintf(w, "\n%d tensors:\n", len(r.Tensors))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  NAME\tDTYPE\tSHAPE\tFILE")
	ts := r.Tensors
	if !all && len(ts) > 40 {
		ts = ts[:40]
	}
	for _, t := range ts {
		fmt.Fprintf(tw, "  %s\t%s\t%v\t%s\n", t.Name, t.DType, t.Shape, t.File)
	}
	tw.Flush()
	if len(ts) < len(r.Tensors) {
		fmt.Fprintf(w, "  … %d more (--all lists them)\n", len(r.Tensors)-len(ts))
	}
}
