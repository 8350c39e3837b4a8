package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/asyncrl/asyncrl/engine/driver"
	"github.com/asyncrl/asyncrl/internal/wiring"
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
}

func newEnginesCheckCmd(g *globals) *cobra.Command {
	f := &enginesCheckFlags{}
	cmd := &cobra.Command{
		Use:   "check --kind vllm|sglang|builtin URL...",
		Short: "Check that engines answer every route a run uses, with the flags it needs",
		Long: "For each engine URL, check over its HTTP API what an RL run needs: the routes\n" +
			"answer, vLLM's dev mode is on, the served model name, the token-id and logprob\n" +
			"shapes of a one-token generation, runtime LoRA, asyncrl's worker extension\n" +
			"(collective_rpc asyncrl_loaded_version) and the metrics. Each check prints a\n" +
			"verdict and the flag that fixes it; the exit status is 1 when a run would fail.\n" +
			"Nothing is changed on the engines (one 1-token generation is run).",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, urls []string) error {
			kind := driver.Kind(f.kind)
			switch kind {
			case driver.KindVLLM, driver.KindSGLang, driver.KindBuiltin:
			default:
				return fail("asyncrl engines check: --kind %q: want vllm, sglang or builtin", f.kind)
			}
			failed := 0
			for _, u := range urls {
				rows, err := checkEngine(cmd.Context(), kind, u, f)
				if err != nil {
					return fail("asyncrl engines check: %v", err)
				}
				writeCheckTable(g.stdout, u, kind, rows)
				for _, r := range rows {
					if r.Verdict == verdictFail {
						failed++
					}
				}
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
	return cmd
}

const (
	verdictPass = "PASS"
	verdictWarn = "WARN"
	verdictFail = "FAIL"
	verdictInfo = "INFO"
)

// checkRow is one line of an engine's check table.
type checkRow struct {
	Check   string
	Verdict string
	Detail  string
	Fix     string // the flag or variable that fixes a WARN/FAIL
}

// checkEngine runs the checks against one engine. It returns an error only
// for a bad URL; an unreachable engine is a FAIL row.
func checkEngine(ctx context.Context, kind driver.Kind, url string, f *enginesCheckFlags) ([]checkRow, error) {
	key, err := wiring.ReadSecret("--api-key-file", f.apiKeyFile)
	if err != nil {
		return nil, err
	}
	d, err := driver.New(kind, url, driver.Options{Model: f.model, Timeout: f.timeout, LoadTimeout: f.timeout, APIKey: key})
	if err != nil {
		return nil, err
	}
	var rows []checkRow
	add := func(check, verdict, detail, fix string) {
		rows = append(rows, checkRow{Check: check, Verdict: verdict, Detail: detail, Fix: fix})
	}
	if err := d.Health(ctx); err != nil {
		add("health", verdictFail, errDetail(err), "start the engine and check the URL; GET /health must answer 200")
		return rows, nil
	}
	add("health", verdictPass, "GET /health 200", "")

	names, err := d.Models(ctx)
	switch {
	case err != nil:
		add("served model", verdictFail, errDetail(err), "GET /v1/models must answer")
	case len(names) == 0:
		add("served model", verdictFail, "/v1/models lists no model", "--served-model-name NAME")
	case f.model != "" && !slices.Contains(names, f.model):
		add("served model", verdictFail, fmt.Sprintf("%q not served (serves %s)", f.model, strings.Join(names, ", ")), "--served-model-name "+f.model)
	default:
		m := f.model
		if m == "" {
			m = names[0]
		}
		add("served model", verdictPass, m, "")
	}

	if kind != driver.KindSGLang {
		if _, err := d.IsPaused(ctx); err != nil {
			add("dev mode (RL routes)", verdictFail, errDetail(err), hintOr(err, driver.HintDevMode))
		} else {
			add("dev mode (RL routes)", verdictPass, "GET /is_paused answers (pause, resume, collective_rpc, sleep served)", "")
		}
	} else {
		add("RL routes", verdictInfo, "SGLang serves /pause_generation, /continue_generation, /update_weights_from_disk natively (not probed: they change the engine)", "")
	}

	gen := driver.GenerateRequest{PromptIDs: []int32{1, 2, 3}, MaxTokens: 1, Temperature: 1}
	if kind == driver.KindBuiltin {
		gen.PromptIDs = []int32{1, 40, 41} // BOS and two characters of the built-in tokenizer
	}
	const genFix = "an engine version that returns token ids and the sampled token's logprob (vLLM: return_token_ids, logprobs: 0)"
	switch res, err := d.Generate(ctx, gen); {
	case err != nil:
		add("token ids and logprobs", verdictFail, errDetail(err), hintOr(err, genFix))
	case len(res.TokenIDs) != 1:
		add("token ids and logprobs", verdictFail, fmt.Sprintf("asked for 1 token, got %d", len(res.TokenIDs)), genFix)
	case !slices.Equal(res.PromptIDs, gen.PromptIDs):
		add("token ids and logprobs", verdictFail, fmt.Sprintf("prompt ids %v, sent %v", res.PromptIDs, gen.PromptIDs), genFix)
	default:
		add("token ids and logprobs", verdictPass, fmt.Sprintf("1-token generation: token_ids %v, logprob %.4g, prompt ids echoed", res.TokenIDs, res.Logprobs[0]), "")
	}
	if kind == driver.KindVLLM {
		add("logprobs mode", verdictInfo, "not visible over HTTP: start vLLM with the flag so logprobs are the sampled distribution's", "--logprobs-mode processed_logprobs")
	}

	switch kind {
	case driver.KindSGLang:
		add("weight loading", verdictInfo, "full checkpoints via /update_weights_from_disk; SkyRL deltas are not supported", "weight_load: full for SGLang engines")
	default:
		if v, err := d.ServedVersion(ctx); err != nil {
			add("asyncrl extension", verdictFail, errDetail(err), hintOr(err, driver.HintExtension))
		} else {
			add("asyncrl extension", verdictPass, fmt.Sprintf("collective_rpc %s → %d", driver.RPCLoadedVersion, v), "")
		}
	}

	loraVerdict := verdictWarn
	if f.requireLoRA {
		loraVerdict = verdictFail
	}
	if on, detail := loraEnabled(ctx, d); on {
		add("runtime LoRA", verdictPass, detail, "")
	} else if kind == driver.KindSGLang {
		add("runtime LoRA", loraVerdict, detail, driver.HintSGLangLoRA)
	} else {
		add("runtime LoRA", loraVerdict, detail, driver.HintLoRA)
	}

	if m, err := d.Metrics(ctx); err != nil {
		fix := ""
		if kind == driver.KindSGLang {
			fix = "--enable-metrics"
		}
		add("metrics", verdictWarn, errDetail(err), hintOr(err, fix))
	} else {
		want := []string{"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"}
		if kind == driver.KindSGLang {
			want = []string{"sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage", "sglang:cache_hit_rate"}
		}
		var missing []string
		for _, n := range want {
			if _, ok := m.Raw[n]; !ok {
				missing = append(missing, n)
			}
		}
		if len(missing) > 0 {
			add("metrics", verdictWarn, "missing "+strings.Join(missing, ", "), "a newer engine version (the router reads these for load)")
		} else {
			add("metrics", verdictPass, fmt.Sprintf("running %g, waiting %g, kv cache %.0f%%", m.Running, m.Waiting, 100*m.KVCacheUsage), "")
		}
	}
	return rows, nil
}

// loadLoRAProbe is an adapter name no engine serves.
const loadLoRAProbe = "asyncrl-engines-check-probe"

// loraEnabled probes the unload route with a name nobody loaded: a route
// that exists answers an error about the adapter; a missing route answers
// FastAPI's {"detail":"Not Found"} (vLLM without
// VLLM_ALLOW_RUNTIME_LORA_UPDATING=1).
func loraEnabled(ctx context.Context, d driver.Driver) (bool, string) {
	err := d.UnloadLoRA(ctx, loadLoRAProbe)
	var re *driver.RouteError
	switch {
	case err == nil:
		return true, "unload route answers"
	case errors.As(err, &re) && re.Status != 0 && re.Message != "Not Found" && re.Status != 405:
		return true, fmt.Sprintf("unload of an unknown adapter answers HTTP %d", re.Status)
	default:
		return false, errDetail(err)
	}
}

// errDetail is an error's message without the engine URL (the table names
// it) and without the hint (the fix column has it).
func errDetail(err error) string {
	var re *driver.RouteError
	if errors.As(err, &re) {
		s := re.Route
		if re.Status != 0 {
			s += fmt.Sprintf(": HTTP %d", re.Status)
		}
		if re.Message != "" {
			s += ": " + re.Message
		}
		return s
	}
	return err.Error()
}

// hintOr is the error's hint, or def.
func hintOr(err error, def string) string {
	var re *driver.RouteError
	if errors.As(err, &re) && re.Hint != "" {
		return re.Hint
	}
	var ue *driver.UnsupportedError
	if errors.As(err, &ue) && ue.Hint != "" {
		return ue.Hint
	}
	return def
}

func writeCheckTable(w io.Writer, url string, kind driver.Kind, rows []checkRow) {
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
