package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/sft"
	"github.com/asyncrl/asyncrl/wiring"
)

// sftFlags are asyncrl sft's flags; each overrides its config key when given.
type sftFlags struct {
	config string // --config FILE
	steps  int    // --steps → sft.steps
	report string // --report DIR → run.report_dir
	resume bool   // --resume → sft.resume
}

// newSFTCmd: asyncrl sft — supervised fine-tuning of the policy on
// pretokenized datasets (sft section), on the RL trainer backends, with
// checkpoints an RL run starts from.
func newSFTCmd(g *globals) *cobra.Command {
	var f sftFlags
	cmd := &cobra.Command{
		Use:   "sft",
		Short: "Supervised fine-tuning on pretokenized datasets (the sft section), with RL's trainer backends and checkpoints",
		Long: "Supervised fine-tuning: draws examples from the datasets of sft.data with its sampler,\n" +
			"packs sft.tokens_per_step tokens per step into microbatches of sft.pack.microbatch_tokens,\n" +
			"and trains the cross-entropy loss on trainer.backend (builtin, or exec: a child over the\n" +
			"worker bridge such as the PyTorch worker). Checkpoints go to sft.output_dir/step-N\n" +
			"(serving/, trainer/, state.json; latest points at the newest); --resume continues from the\n" +
			"newest with the sampler where it was. An RL run starts from one with\n" +
			"trainer.init_checkpoint: <output_dir>/latest/trainer. Ctrl-C checkpoints the last completed\n" +
			"step. The report (sft-report.json, sft-report.md) goes to --report or run.report_dir.\n" +
			"See docs/sft.md.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			changed := cmd.Flags().Changed
			cfg, err := loadConfig(f.config, func(c *config.Config) {
				if changed("steps") {
					c.SFT.Steps = f.steps
				}
				if changed("report") {
					c.Run.ReportDir = f.report
				}
				if changed("resume") {
					c.SFT.Resume = f.resume
				}
			})
			if err != nil {
				return fail("asyncrl sft: %v", err)
			}
			log, err := g.logger(cmd, cfg.Log)
			if err != nil {
				return fail("asyncrl sft: %v", err)
			}
			scfg := wiring.SFT(cfg)
			// a Hugging Face model (the model section): found, or
			// random-initialised from run.seed, and trained as kind hf
			if scfg.HFModel, _, err = wiring.ModelDir(cfg); err != nil {
				return fail("asyncrl sft: %v", err)
			}
			if err := scfg.Validate(); err != nil {
				return fail("asyncrl sft: %v", err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			tty := false
			if fl, ok := g.stderr.(*os.File); ok {
				tty = term.IsTerminal(int(fl.Fd()))
			}
			fmt.Fprintf(g.stderr, "asyncrl sft: %d datasets, sampler %s, %d steps of %d tokens in %d-token microbatches (dp %d, %s), trainer %s, checkpoints in %s\n",
				len(scfg.Data.Datasets), scfg.Data.Sampler.Kind, scfg.Steps, scfg.TokensPerStep, scfg.Pack.Budget, scfg.Pack.DP,
				scfg.Pack.Strategy, scfg.Backend, scfg.OutputDir)
			res, err := sft.Run(ctx, scfg, sft.Options{Log: log, Progress: g.stderr, Terminal: tty, ReportDir: cfg.Run.ReportDir})
			r := res.Report
			if n := len(r.Steps); n > 0 {
				fmt.Fprintf(g.stdout, "steps %d, loss first %.4f → last %.4f, %d tokens, data %.0f tok/s, trainer %.0f tok/s\n",
					n, r.FirstLoss, r.LastLoss, r.Tokens, r.DataTokensPerSecond, r.TrainTokensPerSecond)
				if cfg.Run.ReportDir != "" {
					fmt.Fprintf(g.stdout, "report: %s, %s\n", filepath.Join(cfg.Run.ReportDir, sft.ReportJSON), filepath.Join(cfg.Run.ReportDir, sft.ReportMarkdown))
				}
			}
			if res.Checkpoint != "" {
				// the built-in policy resumes its trainer state; a Hugging
				// Face model starts from the serving directory (the child's
				// fresh optimiser, the same model section)
				from := filepath.Join(res.Checkpoint, sft.TrainerDir)
				if scfg.HFModel != "" {
					from = filepath.Join(res.Checkpoint, sft.ServingDir)
				}
				fmt.Fprintf(g.stdout, "checkpoint: %s (an RL run starts from it with trainer.init_checkpoint: %s)\n", res.Checkpoint, from)
			}
			if err != nil {
				if errors.Is(err, sft.ErrNoCheckpoint) {
					return fail("asyncrl sft: %v (drop --resume / sft.resume to start fresh)", err)
				}
				return fail("asyncrl sft: %v", err)
			}
			if res.Interrupted {
				fmt.Fprintln(g.stderr, "asyncrl sft: interrupted; the last completed step is checkpointed (--resume continues)")
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.config, "config", "", "run configuration `FILE` (YAML; its sft section)")
	fs.IntVar(&f.steps, "steps", 0, "optimiser steps (overrides sft.steps; 0 = until the data ends)")
	fs.StringVar(&f.report, "report", "", "report `DIR` (overrides run.report_dir)")
	fs.BoolVar(&f.resume, "resume", false, "continue from the newest checkpoint in sft.output_dir (overrides sft.resume)")
	return cmd
}
