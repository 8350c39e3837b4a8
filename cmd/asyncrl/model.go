package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/asyncrl/asyncrl/policy/hftokenizer"
	"github.com/asyncrl/asyncrl/policy/transformer"
	"github.com/asyncrl/asyncrl/weights/safetensors"
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
	if f.arch == "" {
		return fmt.Errorf("--arch is required (one of %s)", archList())
	}
	if !transformer.Supported(f.arch) {
		return fmt.Errorf("--arch %q is not supported; use one of %s", f.arch, archList())
	}
	if f.out == "" {
		return errors.New("--out DIR is required")
	}
	if f.tokenizer == "" && f.vocab <= 0 {
		return errors.New("give --tokenizer DIR (a directory with tokenizer.json) or --vocab N")
	}
	if f.initRange <= 0 {
		return fmt.Errorf("--initializer-range must be > 0, got %v", f.initRange)
	}
	if f.routerBiasStd < 0 {
		return fmt.Errorf("--router-bias-std must be >= 0, got %v", f.routerBiasStd)
	}
	if err := emptyDir(f.out); err != nil {
		return err
	}
	vocab := f.vocab
	var gen transformer.GenerationConfig
	var tokFiles []string
	if f.tokenizer != "" {
		tok, err := hftokenizer.Load(filepath.Join(f.tokenizer, "tokenizer.json"))
		if err != nil {
			return fmt.Errorf("--tokenizer %s: %w", f.tokenizer, err)
		}
		if vocab == 0 {
			vocab = tok.VocabSize()
		} else if vocab < tok.VocabSize() {
			return fmt.Errorf("--vocab %d is smaller than the tokenizer's %d tokens; drop --vocab or raise it", vocab, tok.VocabSize())
		}
		if gen, err = specialTokens(f.tokenizer, tok); err != nil {
			return err
		}
		if tokFiles, err = tokenizerFiles(f.tokenizer); err != nil {
			return err
		}
	}
	c, err := transformer.NewPreset(transformer.Arch(f.arch), transformer.Preset(f.preset), vocab)
	if err != nil {
		return fmt.Errorf("--preset: %w", err)
	}
	c.InitializerRange = f.initRange
	c.BOSTokenID, c.EOSTokenIDs = gen.BOSTokenID, gen.EOSTokenIDs
	m, err := transformer.InitWithOptions(c, gen, f.seed, transformer.InitOptions{CorrectionBiasStd: f.routerBiasStd})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(f.out, 0o755); err != nil {
		return err
	}
	for _, name := range tokFiles {
		if err := copyFile(filepath.Join(f.tokenizer, name), filepath.Join(f.out, name)); err != nil {
			return err
		}
	}
	if err := m.Save(f.out, f.shardSize); err != nil {
		return err
	}
	fmt.Fprintf(g.stdout, "wrote %s: %s %s, %d parameters, vocabulary %d, seed %d\n", f.out, f.arch, f.preset, m.NumParams(), vocab, f.seed)
	return nil
}

func archList() string {
	var s []string
	for _, a := range transformer.Archs() {
		s = append(s, string(a))
	}
	return strings.Join(s, ", ")
}

// emptyDir refuses an existing directory with files in it: init never
// overwrites a checkpoint.
func emptyDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("--out %s: %w", dir, err)
	}
	if len(ents) > 0 {
		return fmt.Errorf("--out %s is not empty; choose a new or empty directory", dir)
	}
	return nil
}

// tokenizerFiles lists the regular files of a tokenizer directory to copy
// (everything but a checkpoint's own files, which init writes).
func tokenizerFiles(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("--tokenizer: %w", err)
	}
	var out []string
	for _, e := range ents {
		name := e.Name()
		if !e.Type().IsRegular() || name == transformer.ConfigFileName || name == transformer.GenerationConfigFileName ||
			strings.HasSuffix(name, ".safetensors") || name == safetensors.IndexFileName {
			continue
		}
		out = append(out, name)
	}
	return out, nil
}

// specialTokens reads tokenizer_config.json's bos_token and eos_token (a
// string or an AddedToken object with "content") and maps them to ids.
func specialTokens(dir string, tok *hftokenizer.Tokenizer) (transformer.GenerationConfig, error) {
	var g transformer.GenerationConfig
	js, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if errors.Is(err, os.ErrNotExist) {
		return g, nil
	}
	if err != nil {
		return g, fmt.Errorf("--tokenizer: %w", err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(js, &raw); err != nil {
		return g, fmt.Errorf("--tokenizer: tokenizer_config.json: %w", err)
	}
	id := func(key string) (*int, error) {
		r, ok := raw[key]
		if !ok || string(r) == "null" {
			return nil, nil
		}
		var s string
		if json.Unmarshal(r, &s) != nil {
			var obj struct {
				Content string `json:"content"`
			}
			if err := json.Unmarshal(r, &obj); err != nil || obj.Content == "" {
				return nil, fmt.Errorf("--tokenizer: tokenizer_config.json: %s is neither a string nor a token object", key)
			}
			s = obj.Content
		}
		v, ok := tok.TokenID(s)
		if !ok {
			return nil, fmt.Errorf("--tokenizer: tokenizer_config.json: %s %q is not in tokenizer.json", key, s)
		}
		n := int(v)
		return &n, nil
	}
	if g.BOSTokenID, err = id("bos_token"); err != nil {
		return g, err
	}
	eos, err := id("eos_token")
	if err != nil {
		return g, err
	}
	if eos != nil {
		g.EOSTokenIDs = []int{*eos}
	}
	return g, nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
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
