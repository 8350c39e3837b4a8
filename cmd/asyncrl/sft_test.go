package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/sft"
	"github.com/asyncrl/asyncrl/sft/data"
)

// TestSFTThenRL: asyncrl sft on a generated dataset lowers the loss and
// checkpoints; --resume continues to more steps; asyncrl run starts from
// the SFT checkpoint with trainer.init_checkpoint (and a missing one fails
// naming it).
func TestSFTThenRL(t *testing.T) {
	dir := t.TempDir()
	ds := filepath.Join(dir, "counting")
	if err := data.Generate(context.Background(), data.GenerateOptions{Dir: ds, Tokens: 1 << 15, Shards: 2, Seed: 1,
		VocabSize: 98, MinLen: 8, MaxLen: 48, Pattern: "counting", Mask: true}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "sft")
	cfg := writeFile(t, "sft.yaml", "run:\n  data_dir: "+dir+"\n  report_dir: "+filepath.Join(dir, "report")+"\n"+
		"sft:\n  data:\n    datasets: [{name: counting, path: "+ds+"}]\n  tokens_per_step: 1024\n"+
		"  pack: {microbatch_tokens: 256}\n  learning_rate: 0.01\n  output_dir: "+out+"\n  checkpoint_every: 0\n")
	code, stdout, stderr := cli(t, "sft", "--config", cfg, "--steps", "6", "--log-level", "warn")
	if code != 0 || !strings.Contains(stdout, "steps 6, loss first ") || !strings.Contains(stderr, "sft step 6/6: loss ") {
		t.Fatalf("sft: code %d\nstdout %s\nstderr %s", code, stdout, lastLines(stderr, 5))
	}
	if _, err := os.Stat(filepath.Join(dir, "report", sft.ReportMarkdown)); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = cli(t, "sft", "--config", cfg, "--steps", "10", "--resume", "--log-level", "warn")
	if code != 0 || !strings.Contains(stdout, "steps 10, ") || !strings.Contains(stdout, "step-00000010") {
		t.Fatalf("sft --resume: code %d\nstdout %s\nstderr %s", code, stdout, lastLines(stderr, 5))
	}
	var first, last float64
	if _, err := fmtSscanLoss(stdout, &first, &last); err != nil || !(last < first) {
		t.Fatalf("loss %v → %v (%v) in %q", first, last, err, stdout)
	}

	// RL from the SFT checkpoint: two real steps of the default run
	rl := writeFile(t, "rl.yaml", "run:\n  data_dir: "+filepath.Join(dir, "rl")+"\n  report_dir: "+filepath.Join(dir, "rl-report")+"\ntrainer:\n  init_checkpoint: "+filepath.Join(out, sft.LatestName, sft.TrainerDir)+"\n")
	code, stdout, stderr = cli(t, "run", "--config", rl, "--steps", "2", "--log-level", "warn")
	if code != 0 || !strings.Contains(stdout, "steps 2, final version 2") {
		t.Fatalf("run from the SFT checkpoint: code %d\nstdout %s\nstderr %s", code, stdout, lastLines(stderr, 5))
	}
	missing := writeFile(t, "missing.yaml", "run:\n  data_dir: "+filepath.Join(dir, "rl2")+"\n  report_dir: "+filepath.Join(dir, "rl2-report")+"\ntrainer:\n  init_checkpoint: "+filepath.Join(dir, "nope")+"\n")
	if code, _, stderr = cli(t, "run", "--config", missing, "--steps", "1", "--log-level", "warn"); code != 1 || !strings.Contains(stderr, filepath.Join(dir, "nope")) {
		t.Fatalf("missing init_checkpoint: code %d, stderr %s", code, lastLines(stderr, 3))
	}
	// bad input: no datasets
	if code, _, stderr = cli(t, "sft"); code != 1 || !strings.Contains(stderr, "sft.data.datasets is empty") {
		t.Fatalf("no datasets: code %d, stderr %q", code, stderr)
	}
}

// fmtSscanLoss reads "loss first A → last B" from sft's summary line.
func fmtSscanLoss(s string, first, last *float64) (int, error) {
	i := strings.Index(s, "loss first ")
	if i < 0 {
		return 0, os.ErrNotExist
	}
	return fmt.Sscanf(s[i:], "loss first %f → last %f", first, last)
}
