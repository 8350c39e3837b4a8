package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/asyncrl/asyncrl/cluster/rollouthost"
	"github.com/asyncrl/asyncrl/cluster/weightsync"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/engine/driver"
	"github.com/asyncrl/asyncrl/wiring"
)

// newEnginesCmd: asyncrl engines — tools for the inference engines a run
// drives (see docs/engines.md).
func newEnginesCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "engines",
		Short: "Check the inference engines (vLLM, SGLang, built-in) a run will drive",
	}
	cmd.AddCommand(newEnginesCheckCmd(g))
	return cmd
}

type enginesCheckFlags struct {
	kind        string
	model       string
	requireLoRA bool
	timeout     time.Duration
	apiKeyFile  string
	config      string
}

func newEnginesCheckCmd(g *globals) *cobra.Command {
	f := &enginesCheckFlags{}
	cmd := &cobra.Command{
		Use:   "check (--kind vllm|sglang|builtin URL... | --config FILE)",
		Short: "Check that engines answer every route a run uses, with the flags and release it needs",
		Long: "For each engine URL, check over its HTTP API what an RL run needs: the routes\n" +
			"answer, the engine's release (GET /version) has the features the run uses, vLLM's\n" +
			"dev mode is on, the served model name, the token-id and logprob shapes of a\n" +
			"one-token generation, runtime LoRA, asyncrl's worker extension (collective_rpc\n" +
			"asyncrl_loaded_version) and the metrics. Each check prints a verdict and the flag\n" +
			"or release that fixes it; the exit status is 1 when a run would fail.\n" +
			"With --config FILE the engines are the run's engines.external and each is checked\n" +
			"against what that run asks of it (trainer.pause_mode on its release, weight_load,\n" +
			"LoRA, rollout.routed_experts, rollout.support_from_logprobs), exactly as the run's\n" +
			"preflight does. Nothing is changed on the engines (one 1-token generation is run).",
		RunE: func(cmd *cobra.Command, urls []string) error {
			for _, name := range []string{"kind", "model", "api-key-file", "require-lora"} {
				if f.config != "" && cmd.Flags().Changed(name) {
					return fail("asyncrl engines check: --%s does not go with --config: the config's engines.external say each engine's kind, key and what the run needs", name)
				}
			}
			targets, err := checkTargets(f, urls)
			if err != nil {
				return fail("asyncrl engines check: %v", err)
			}
			failed := 0
			for _, t := range targets {
				rows, err := checkEngine(cmd.Context(), t, f.timeout)
				if err != nil {
					return fail("asyncrl engines check: %v", err)
				}
				writeCheckTable(g.stdout, t.url, t.kind, rows)
				failed += len(driver.Failed(rows))
			}
			if failed > 0 {
				return &exitErr{code: exitError, msg: fmt.Sprintf("asyncrl engines check: %d check(s) failed: a run would fail against these engines", failed)}
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.kind, "kind", "vllm", "engine kind: vllm, sglang or builtin")
	fs.StringVar(&f.model, "model", "", "served model name the run will use (default: the first /v1/models lists)")
	fs.BoolVar(&f.requireLoRA, "require-lora", false, "fail (not warn) when runtime LoRA loading is off")
	fs.DurationVar(&f.timeout, "timeout", 30*time.Second, "timeout of each check")
	fs.StringVar(&f.apiKeyFile, "api-key-file", "", "`FILE` holding the engine's API key (vLLM --api-key), sent as Authorization: Bearer")
	fs.StringVar(&f.config, "config", "", "the run's config `FILE`: check its engines.external against what the run needs (no URLs, --kind, --model, --api-key-file or --require-lora with it)")
	return cmd
}

// checkTarget is one engine to check and what the run asks of it.
type checkTarget struct {
	kind   driver.Kind
	url    string
	apiKey string
	needs  driver.Needs
}

// checkTargets are the URLs given with the flags' needs, or with --config
// the run's external engines with theirs (weightsync.NeedsOf, as the
// run's preflight).
func checkTargets(f *enginesCheckFlags, urls []string) ([]checkTarget, error) {
	if f.config != "" {
		if len(urls) > 0 {
			return nil, fmt.Errorf("--config checks the config's engines.external: give no URLs with it")
		}
		cfg, err := config.Load(f.config)
		if err != nil {
			return nil, err
		}
		if len(cfg.Engines.External) == 0 {
			return nil, fmt.Errorf("%s: engines.external is empty: nothing to check (the built-in engines are started by the run)", f.config)
		}
		// The run refuses at start a mix its rollouts cannot speak to
		// (SGLang's /generate beside /v1/completions engines): so must
		// the check, or it passes where the run fails.
		if _, err := rollouthost.Protocol(cfg.Engines); err != nil {
			return nil, fmt.Errorf("%s: %w", f.config, err)
		}
		var out []checkTarget
		for i, e := range cfg.Engines.External {
			key, err := wiring.ReadSecret(fmt.Sprintf("engines.external[%d].api_key_file", i), e.APIKeyFile)
			if err != nil {
				return nil, err
			}
			out = append(out, checkTarget{kind: driver.Kind(e.Kind), url: e.URL, apiKey: key, needs: weightsync.NeedsOf(cfg, e)})
		}
		return out, nil
	}
	if len(urls) == 0 {
		return nil, fmt.Errorf("give engine URLs, or --config FILE")
	}
	kind := driver.Kind(f.kind)
	switch kind {
	case driver.KindVLLM, driver.KindSGLang, driver.KindBuiltin:
	default:
		return nil, fmt.Errorf("--kind %q: want vllm, sglang or builtin", f.kind)
	}
	key, err := wiring.ReadSecret("--api-key-file", f.apiKeyFile)
	if err != nil {
		return nil, err
	}
	out := make([]checkTarget, len(urls))
	for i, u := range urls {
		out[i] = checkTarget{kind: kind, url: u, apiKey: key, needs: driver.Needs{Model: f.model, LoRA: f.requireLoRA}}
	}
	return out, nil
}

// checkEngine runs driver.Check against one engine. It returns an error
// only for a bad URL; an unreachable engine is a FAIL row.
func checkEngine(ctx context.Context, t checkTarget, timeout time.Duration) ([]driver.Finding, error) {
	d, err := driver.New(t.kind, t.url, driver.Options{Model: t.needs.Model, Timeout: timeout, LoadTimeout: timeout, APIKey: t.apiKey})
	if err != nil {
		return nil, err
	}
	return driver.Check(ctx, d, t.needs), nil
}

func writeCheckTable(w io.Writer, url string, kind driver.Kind, rows []driver.Finding) {
	fmt.Fprintf(w, "%s engine %s\n", kind, url)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  CHECK\tVERDICT\tDETAIL\tFIX")
	for _, r := range rows {
		fix := r.Fix
		if fix == "" {
			fix = "-"
		}
		detail := r.Detail
		if len(detail) > 120 {
			detail = detail[:117] + "..."
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", r.Check, r.Verdict, detail, fix)
	}
	tw.Flush()
	fmt.Fprintln(w)
}
