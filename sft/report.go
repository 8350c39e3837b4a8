package sft

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Report is what an SFT run measured: the loss curve, the throughput of
// the data path and of the trainer, and the mixture actually seen. It is
// cumulative across resumes (a checkpoint carries the report so far).
type Report struct {
	Backend string `json:"backend"`
	// Steps is the loss curve, one point per step.
	Steps []StepPoint `json:"steps"`
	// FirstLoss and LastLoss are the first and last steps' losses
	// (token-mean NLL with the default reduction).
	FirstLoss float64 `json:"first_loss"`
	LastLoss  float64 `json:"last_loss"`
	// Tokens and Examples count everything trained.
	Tokens   int64 `json:"tokens"`
	Trained  int64 `json:"trained_tokens"`
	Examples int64 `json:"examples"`
	// DataSeconds is the time spent drawing, packing and assembling steps,
	// TrainSeconds the time in the trainer backend; the rates are tokens
	// over each.
	DataSeconds          float64 `json:"data_seconds"`
	TrainSeconds         float64 `json:"train_seconds"`
	DataTokensPerSecond  float64 `json:"data_tokens_per_second"`
	TrainTokensPerSecond float64 `json:"train_tokens_per_second"`
	// Mixture is, per dataset, the configured and the seen proportion of
	// examples.
	Mixture []MixtureRow `json:"mixture"`
}

// StepPoint is one step of the loss curve.
type StepPoint struct {
	Step          int64   `json:"step"`
	Loss          float64 `json:"loss"`
	Tokens        int     `json:"tokens"`
	Trained       int     `json:"trained_tokens"`
	Examples      int     `json:"examples"`
	Bins          int     `json:"bins"`
	PaddingTokens int     `json:"padding_tokens"`
	DataSeconds   float64 `json:"data_seconds"`
	TrainSeconds  float64 `json:"train_seconds"`
}

// MixtureRow is one dataset's share.
type MixtureRow struct {
	Dataset string `json:"dataset"`
	// Configured is the normalised configured weight; absent unless the
	// sampler is a mixture with every weight set (else the proportions
	// follow from the sizes).
	Configured   *float64 `json:"configured,omitempty"`
	SeenExamples int64    `json:"seen_examples"`
	SeenTokens   int64    `json:"seen_tokens"`
	Seen         float64  `json:"seen"` // fraction of all examples seen
}

// newReport starts a report for the datasets of cfg.
func newReport(cfg Config) Report {
	r := Report{Backend: cfg.Backend, Steps: []StepPoint{}}
	var sum float64
	all := true
	for _, d := range cfg.Data.Datasets {
		sum += d.Weight
		all = all && d.Weight > 0
	}
	all = all && cfg.Data.Sampler.Kind == "mixture" // other samplers ignore the weights
	for i, d := range cfg.Data.Datasets {
		row := MixtureRow{Dataset: d.Name}
		if row.Dataset == "" {
			row.Dataset = fmt.Sprintf("dataset %d", i)
		}
		if all && sum > 0 {
			w := d.Weight / sum
			row.Configured = &w
		}
		r.Mixture = append(r.Mixture, row)
	}
	return r
}

// add records one trained step.
func (r *Report) add(p StepPoint, st Step) {
	if len(r.Steps) == 0 {
		r.FirstLoss = p.Loss
	}
	r.LastLoss = p.Loss
	r.Steps = append(r.Steps, p)
	r.Tokens += int64(p.Tokens)
	r.Trained += int64(p.Trained)
	r.Examples += int64(p.Examples)
	r.DataSeconds += p.DataSeconds
	r.TrainSeconds += p.TrainSeconds
	if r.DataSeconds > 0 {
		r.DataTokensPerSecond = float64(r.Tokens) / r.DataSeconds
	}
	if r.TrainSeconds > 0 {
		r.TrainTokensPerSecond = float64(r.Tokens) / r.TrainSeconds
	}
	for i, id := range st.IDs {
		if int(id.Dataset) < len(r.Mixture) {
			r.Mixture[id.Dataset].SeenExamples++
			r.Mixture[id.Dataset].SeenTokens += int64(len(st.Batch.Sequences[i].Tokens))
		}
	}
	for i := range r.Mixture {
		if r.Examples > 0 {
			r.Mixture[i].Seen = float64(r.Mixture[i].SeenExamples) / float64(r.Examples)
		}
	}
}

// Report files in the report directory.
const (
	ReportJSON     = "sft-report.json"
	ReportMarkdown = "sft-report.md"
)

// WriteReport writes r as JSON and as a short markdown summary in dir.
func WriteReport(dir string, r Report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("sft: report: %w", err)
	}
	js, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, ReportJSON), append(js, '\n'), 0o644); err != nil {
		return fmt.Errorf("sft: report: %w", err)
	}
	return os.WriteFile(filepath.Join(dir, ReportMarkdown), []byte(r.Markdown()), 0o644)
}

// Markdown is the report as a short markdown summary.
func (r Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# SFT report\n\nbackend %s, %d steps, %d examples, %d tokens (%d trained)\n\n", r.Backend, len(r.Steps), r.Examples, r.Tokens, r.Trained)
	fmt.Fprintf(&b, "- loss: first %.4f → last %.4f\n", r.FirstLoss, r.LastLoss)
	fmt.Fprintf(&b, "- data path (draw + pack): %.0f tokens/s over %.2f s\n", r.DataTokensPerSecond, r.DataSeconds)
	fmt.Fprintf(&b, "- trainer: %.0f tokens/s over %.2f s\n\n", r.TrainTokensPerSecond, r.TrainSeconds)
	b.WriteString("## Mixture\n\n| dataset | configured | seen | examples | tokens |\n| --- | --- | --- | --- | --- |\n")
	for _, m := range r.Mixture {
		conf := "from sizes"
		if m.Configured != nil {
			conf = fmt.Sprintf("%.4f", *m.Configured)
		}
		fmt.Fprintf(&b, "| %s | %s | %.4f | %d | %d |\n", m.Dataset, conf, m.Seen, m.SeenExamples, m.SeenTokens)
	}
	b.WriteString("\n## Loss curve\n\n| step | loss | tokens | bins |\n| --- | --- | --- | --- |\n")
	every := max(1, len(r.Steps)/20)
	for i, p := range r.Steps {
		if i%every == 0 || i == len(r.Steps)-1 {
			fmt.Fprintf(&b, "| %d | %.4f | %d | %d |\n", p.Step, p.Loss, p.Tokens, p.Bins)
		}
	}
	return b.String()
}
