package driver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// kindChecker is a driver with checks of its own kind (vLLM's dev routes,
// pause modes, worker extension, R3, max_logprobs; SGLang's own): Check
// appends what it finds after the common checks.
type kindChecker interface {
	kindFindings(ctx context.Context, c Capabilities, n Needs) []Finding
}

// Check grades the engine behind d against what a run with needs n asks of
// it — the one home of the engine checks, used by `asyncrl engines check`
// and the run's preflight, so both fail exactly where the run would: a
// FAIL finding is something the run cannot do on this engine, a WARN one
// it does at a cost or a risk the Detail names. It changes nothing on the
// engine but runs one 1-token generation.
//
// The common checks are health, the engine's release (GET /version; an
// unknown release is a WARN and every release-dependent feature is then
// assumed, which the rows say), the served model, a 1-token generation's
// token-id and logprob shapes, runtime LoRA and the metrics; a driver that
// implements kindChecker adds its kind's rows.
func Check(ctx context.Context, d Driver, n Needs) []Finding {
	var out []Finding
	if err := d.Health(ctx); err != nil {
		return append(out, Finding{Check: "health", Verdict: VerdictFail, Detail: errDetail(err),
			Fix: "start the engine and check the URL; GET /health must answer 200"})
	}
	out = append(out, Finding{Check: "health", Verdict: VerdictPass, Detail: "GET /health 200"})
	c, err := d.Capabilities(ctx)
	switch {
	case err != nil:
		c = UnknownCapabilities(d.Kind())
		out = append(out, Finding{Check: "release", Verdict: VerdictWarn, Detail: errDetail(err) + ": every feature assumed"})
	case !c.Known:
		route := "GET /version"
		if d.Kind() == KindSGLang {
			route = "GET /get_server_info's version"
		}
		detail := "the engine does not say its release (" + route + "): every release-dependent feature is assumed and the rows below say which"
		if c.Release.Raw != "" {
			detail = fmt.Sprintf("release %q is not a release number: every release-dependent feature is assumed", c.Release.Raw)
		}
		out = append(out, Finding{Check: "release", Verdict: VerdictWarn, Detail: detail, Fix: "an engine release that answers " + route})
	default:
		out = append(out, Finding{Check: "release", Verdict: VerdictPass, Detail: c.Describe()})
	}
	out = append(out, checkModel(ctx, d, n))
	out = append(out, checkGenerate(ctx, d))
	if kc, ok := d.(kindChecker); ok {
		out = append(out, kc.kindFindings(ctx, c, n)...)
	}
	out = append(out, checkLoRA(ctx, d, n))
	return append(out, checkMetrics(ctx, d))
}

// Failed returns the FAIL findings.
func Failed(fs []Finding) []Finding {
	var out []Finding
	for _, f := range fs {
		if f.Verdict == VerdictFail {
			out = append(out, f)
		}
	}
	return out
}

func checkModel(ctx context.Context, d Driver, n Needs) Finding {
	const check = "served model"
	names, err := d.Models(ctx)
	switch {
	case err != nil:
		return Finding{Check: check, Verdict: VerdictFail, Detail: errDetail(err), Fix: "GET /v1/models must answer"}
	case len(names) == 0:
		return Finding{Check: check, Verdict: VerdictFail, Detail: "/v1/models lists no model", Fix: "--served-model-name NAME"}
	case n.Model != "" && !slices.Contains(names, n.Model):
		return Finding{Check: check, Verdict: VerdictFail,
			Detail: fmt.Sprintf("%q not served (serves %s)", n.Model, strings.Join(names, ", ")),
			Fix:    fmt.Sprintf("start it with --served-model-name %s, or set engines.served_model_name: %s in the run's config", n.Model, names[0])}
	}
	m := n.Model
	if m == "" {
		m = names[0]
	}
	return Finding{Check: check, Verdict: VerdictPass, Detail: m}
}

// probePrompt is the prompt of the checks' generations: BOS and two
// characters of the built-in tokenizer on the built-in engine, three small
// ids elsewhere.
func probePrompt(k Kind) []int32 {
	if k == KindBuiltin {
		return []int32{1, 40, 41}
	}
	return []int32{1, 2, 3}
}

func checkGenerate(ctx context.Context, d Driver) Finding {
	const check = "token ids and logprobs"
	const fix = "an engine version that returns token ids and the sampled token's logprob (vLLM: return_token_ids, logprobs: 0)"
	gen := GenerateRequest{PromptIDs: probePrompt(d.Kind()), MaxTokens: 1, Temperature: 1}
	res, err := d.Generate(ctx, gen)
	switch {
	case err != nil:
		return Finding{Check: check, Verdict: VerdictFail, Detail: errDetail(err), Fix: hintOr(err, fix)}
	case len(res.TokenIDs) != 1:
		return Finding{Check: check, Verdict: VerdictFail, Detail: fmt.Sprintf("asked for 1 token, got %d", len(res.TokenIDs)), Fix: fix}
	case !slices.Equal(res.PromptIDs, gen.PromptIDs):
		return Finding{Check: check, Verdict: VerdictFail, Detail: fmt.Sprintf("prompt ids %v, sent %v", res.PromptIDs, gen.PromptIDs), Fix: fix}
	}
	return Finding{Check: check, Verdict: VerdictPass,
		Detail: fmt.Sprintf("1-token generation: token_ids %v, logprob %.4g, prompt ids echoed", res.TokenIDs, res.Logprobs[0])}
}

// loraProbe is an adapter name no engine serves.
const loraProbe = "asyncrl-engines-check-probe"

// checkLoRA probes the unload route with a name nobody loaded: a route
// that exists answers an error about the adapter; a missing one answers
// FastAPI's {"detail":"Not Found"} (vLLM without
// VLLM_ALLOW_RUNTIME_LORA_UPDATING=1). Off is a FAIL for a run that loads
// adapters (n.LoRA), a WARN otherwise.
func checkLoRA(ctx context.Context, d Driver, n Needs) Finding {
	const check = "runtime LoRA"
	err := d.UnloadLoRA(ctx, loraProbe)
	var re *RouteError
	switch {
	case err == nil:
		return Finding{Check: check, Verdict: VerdictPass, Detail: "unload route answers"}
	case errors.As(err, &re) && re.Status != 0 && re.Message != "Not Found" && re.Status != 405:
		return Finding{Check: check, Verdict: VerdictPass, Detail: fmt.Sprintf("unload of an unknown adapter answers HTTP %d", re.Status)}
	}
	v := VerdictWarn
	if n.LoRA {
		v = VerdictFail
	}
	fix := HintLoRA
	if d.Kind() == KindSGLang {
		fix = HintSGLangLoRA
	}
	return Finding{Check: check, Verdict: v, Detail: errDetail(err), Fix: fix}
}

// metricNames are the gauges and counters the router reads for load.
var metricNames = map[Kind][]string{
	KindVLLM:    {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"},
	KindBuiltin: {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"},
	KindSGLang:  {"sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage", "sglang:cache_hit_rate"},
}

func checkMetrics(ctx context.Context, d Driver) Finding {
	const check = "metrics"
	m, err := d.Metrics(ctx)
	if err != nil {
		fix := ""
		if d.Kind() == KindSGLang {
			fix = "--enable-metrics"
		}
		return Finding{Check: check, Verdict: VerdictWarn, Detail: errDetail(err), Fix: hintOr(err, fix)}
	}
	var missing []string
	for _, name := range metricNames[d.Kind()] {
		if _, ok := m.Raw[name]; !ok {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return Finding{Check: check, Verdict: VerdictWarn, Detail: "missing " + strings.Join(missing, ", "),
			Fix: "a newer engine version (the router reads these for load)"}
	}
	return Finding{Check: check, Verdict: VerdictPass,
		Detail: fmt.Sprintf("running %g, waiting %g, kv cache %.0f%%", m.Running, m.Waiting, 100*m.KVCacheUsage)}
}

// errDetail is an error's message without the engine URL (a table names
// it) and without the hint (the fix column has it).
func errDetail(err error) string {
	var re *RouteError
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
	var ue *UnsupportedError
	if errors.As(err, &ue) {
		return ue.Op + " is not supported"
	}
	return err.Error()
}

// hintOr is the error's hint, or def.
func hintOr(err error, def string) string {
	var re *RouteError
	if errors.As(err, &re) && re.Hint != "" {
		return re.Hint
	}
	var ue *UnsupportedError
	if errors.As(err, &ue) && ue.Hint != "" {
		return ue.Hint
	}
	return def
}
