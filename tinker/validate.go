package tinker

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// FieldError is one entry of FastAPI's 422 body {"detail":[...]} that
// SkyRL's server answers for a bad body: loc names the field from "body".
type FieldError struct {
	Loc  []any  `json:"loc"`
	Msg  string `json:"msg"`
	Type string `json:"type"`
}

// FieldErrors is a request's list of problems; empty means valid.
type FieldErrors []FieldError

func (e FieldErrors) Error() string {
	if len(e) == 0 {
		return "tinker: valid"
	}
	s := "tinker: invalid request:"
	for _, f := range e {
		s += fmt.Sprintf(" %v: %s;", f.Loc, f.Msg)
	}
	return s
}

func (e *FieldErrors) add(typ, msg string, loc ...any) {
	*e = append(*e, FieldError{Loc: append([]any{"body"}, loc...), Msg: msg, Type: typ})
}

func (e *FieldErrors) missing(loc ...any) { e.add("missing", "Field required", loc...) }

func (e FieldErrors) orNil() error {
	if len(e) == 0 {
		return nil
	}
	return e
}

// DecodeError turns a json decoding error into the 422 entry naming the
// field it concerns.
func DecodeError(err error) FieldErrors {
	var e FieldErrors
	switch t := err.(type) {
	case *json.UnmarshalTypeError:
		loc := []any{}
		if t.Field != "" {
			loc = append(loc, t.Field)
		}
		e.add("type_error", fmt.Sprintf("expected %s, got JSON %s", t.Type, t.Value), loc...)
	case *json.SyntaxError:
		e.add("json_invalid", fmt.Sprintf("JSON decode error at byte %d: %v", t.Offset, t))
	default:
		e.add("json_invalid", err.Error())
	}
	return e
}

// checkpointName is SkyRL's rule for save names.
var checkpointName = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// ValidName reports whether a checkpoint name is allowed.
func ValidName(s string) bool { return checkpointName.MatchString(s) && len(s) <= 128 }

func (e *FieldErrors) seq(p *int64, field string) {
	switch {
	case p == nil:
		e.missing(field)
	case *p < 0:
		e.add("value_error", "must be ≥ 0", field)
	}
}

// ValidateCreateModel checks create_model against the server's rank limit.
func ValidateCreateModel(r *CreateModelRequest, maxRank int) error {
	var e FieldErrors
	if r.SessionID == "" {
		e.missing("session_id")
	}
	e.seq(r.ModelSeqID, "model_seq_id")
	if r.BaseModel == "" {
		e.missing("base_model")
	}
	switch {
	case r.LoraConfig == nil:
		e.missing("lora_config")
	case r.LoraConfig.Rank < 1 || r.LoraConfig.Rank > maxRank:
		e.add("value_error", fmt.Sprintf("rank must be in [1, %d], got %d", maxRank, r.LoraConfig.Rank), "lora_config", "rank")
	}
	return e.orNil()
}

// ValidateFwdBwd checks a forward or forward_backward input: known loss,
// encoded_text chunks only, and every loss input the loss needs, of the
// datum's target length.
func ValidateFwdBwd(modelID string, seq *int64, in *ForwardBackwardInput, field string, vocab int) error {
	var e FieldErrors
	if modelID == "" {
		e.missing("model_id")
	}
	e.seq(seq, "seq_id")
	if in == nil {
		e.missing(field)
		return e
	}
	need, ok := LossInputs[in.LossFn]
	if !ok {
		e.add("value_error", fmt.Sprintf("unsupported loss_fn %q (supported: cross_entropy, importance_sampling, ppo, cispo)", in.LossFn), field, "loss_fn")
	}
	e.lossConfig(in, field)
	if len(in.Data) == 0 {
		e.add("value_error", "must hold at least one datum", field, "data")
	}
	for i, d := range in.Data {
		n := e.datumInput(d, field, i, vocab)
		if !ok {
			continue
		}
		e.lossInputs(d, need, n, field, i, vocab)
		for name := range d.LossFnInputs {
			if !knownInput[name] {
				e.add("value_error", fmt.Sprintf("unknown loss input %q", name), field, "data", i, "loss_fn_inputs", name)
			}
		}
	}
	return e.orNil()
}

// lossConfig checks loss_fn_config: keys the loss knows, finite values.
func (e *FieldErrors) lossConfig(in *ForwardBackwardInput, field string) {
	for k, v := range in.LossFnConfig {
		if !allowedConfig[in.LossFn][k] {
			e.add("value_error", fmt.Sprintf("unknown loss_fn_config key %q for %s", k, in.LossFn), field, "loss_fn_config", k)
		} else if math.IsNaN(v) || math.IsInf(v, 0) {
			e.add("value_error", "must be finite", field, "loss_fn_config", k)
		}
	}
}

// tokenRange reports the first token outside [0, vocab) at loc + "tokens", k.
func (e *FieldErrors) tokenRange(tokens []int32, vocab int, loc ...any) {
	for k, t := range tokens {
		if t < 0 || int(t) >= vocab {
			e.add("value_error", fmt.Sprintf("token %d is outside the vocabulary [0, %d)", t, vocab), append(loc, "tokens", k)...)
			break
		}
	}
}

// datumInput checks datum i's model_input chunks (a chunk of another type
// is reported and not counted) and returns its token count.
func (e *FieldErrors) datumInput(d Datum, field string, i, vocab int) int {
	n := 0
	for j, c := range d.ModelInput.Chunks {
		if c.Type != "encoded_text" && c.Type != "" {
			e.add("value_error", fmt.Sprintf("chunk type %q is not supported (encoded_text only)", c.Type), field, "data", i, "model_input", "chunks", j, "type")
			continue
		}
		e.tokenRange(c.Tokens, vocab, field, "data", i, "model_input", "chunks", j)
		n += len(c.Tokens)
	}
	if n == 0 {
		e.add("value_error", "model_input holds no tokens", field, "data", i, "model_input")
	}
	return n
}

// lossInputs checks that datum i holds every loss input the loss needs
// (weights may be absent), each of n entries, targets being token ids.
func (e *FieldErrors) lossInputs(d Datum, need []string, n int, field string, i, vocab int) {
	for _, name := range need {
		td, have := d.LossFnInputs[name]
		if !have {
			if name == "weights" {
				continue // weights default to 1, as SkyRL does
			}
			e.missing(field, "data", i, "loss_fn_inputs", name)
			continue
		}
		if len(td.Data) != n {
			e.add("value_error", fmt.Sprintf("has %d entries, model_input has %d tokens", len(td.Data), n), field, "data", i, "loss_fn_inputs", name)
		}
		if name == "target_tokens" {
			e.targetTokens(td, vocab, field, "data", i, "loss_fn_inputs", name)
		}
	}
}

// targetTokens reports the first target that is not a token id.
func (e *FieldErrors) targetTokens(td TensorData, vocab int, loc ...any) {
	for k, t := range td.Data {
		if t != math.Trunc(t) || t < 0 || int(t) >= vocab {
			e.add("value_error", fmt.Sprintf("target %v is not a token id in [0, %d)", t, vocab), append(loc, "data", k)...)
			break
		}
	}
}

// LossInputs lists each supported loss's loss_fn_inputs (Tinker's loss
// docs; SkyRL skyrl/tinker/loss_fns).
var LossInputs = map[string][]string{
	"cross_entropy":       {"target_tokens", "weights"},
	"importance_sampling": {"target_tokens", "logprobs", "advantages"},
	"ppo":                 {"target_tokens", "logprobs", "advantages"},
	"cispo":               {"target_tokens", "logprobs", "advantages"},
}

var knownInput = map[string]bool{"target_tokens": true, "weights": true, "logprobs": true, "advantages": true}

// allowedConfig is each loss's loss_fn_config keys (SkyRL's names).
var allowedConfig = map[string]map[string]bool{
	"ppo":   {"clip_low_threshold": true, "clip_high_threshold": true},
	"cispo": {"clip_low_threshold": true, "clip_high_threshold": true},
}

// ValidateOptim checks optim_step.
func ValidateOptim(r *OptimStepRequest) error {
	var e FieldErrors
	if r.ModelID == "" {
		e.missing("model_id")
	}
	e.seq(r.SeqID, "seq_id")
	if r.AdamParams == nil {
		e.missing("adam_params")
		return e
	}
	a := r.AdamParams
	for _, f := range []struct {
		name   string
		v      float64
		lo, hi float64
		loOpen bool
	}{
		{"learning_rate", a.LearningRate, 0, 10, false},
		{"beta1", a.Beta1, 0, 1, false},
		{"beta2", a.Beta2, 0, 1, false},
		{"eps", a.Eps, 0, 1, true},
		{"weight_decay", a.WeightDecay, 0, 10, false},
		{"grad_clip_norm", a.GradClipNorm, 0, math.MaxFloat64, false},
	} {
		if math.IsNaN(f.v) || f.v < f.lo || f.v > f.hi || (f.loOpen && f.v == f.lo) || (strings.HasPrefix(f.name, "beta") && f.v >= 1) {
			e.add("value_error", fmt.Sprintf("%s = %v is out of range", f.name, f.v), "adam_params", f.name)
		}
	}
	return e.orNil()
}

// ValidateSample checks asample against the engines' context length and
// fills sampling_params.max_tokens's default (the rest of the context)
// when the request has none.
func ValidateSample(r *SampleRequest, vocab, maxLen int) error {
	var e FieldErrors
	if r.SamplingSessionID == nil && r.ModelPath == nil && r.BaseModel == nil {
		e.add("value_error", "one of sampling_session_id, model_path or base_model is required", "sampling_session_id")
	}
	if r.SamplingSessionID != nil && r.SeqID == nil {
		e.missing("seq_id")
	}
	if r.NumSamples != nil && (*r.NumSamples < 1 || *r.NumSamples > 128) {
		e.add("value_error", fmt.Sprintf("must be in [1, 128], got %d", *r.NumSamples), "num_samples")
	}
	n := e.prompt(r.Prompt, vocab)
	if r.PromptLogprobs != nil && *r.PromptLogprobs || r.TopkPromptLogprobs > 0 {
		e.add("value_error", "prompt logprobs are not supported", "prompt_logprobs")
	}
	e.maxTokens(r.SamplingParams, n, maxLen)
	if sp := r.SamplingParams; sp != nil {
		e.samplingParams(sp)
	}
	return e.orNil()
}

// prompt checks the prompt's chunks and returns its token count.
func (e *FieldErrors) prompt(p *ModelInput, vocab int) int {
	if p == nil {
		e.missing("prompt")
		return 0
	}
	n := 0
	for j, c := range p.Chunks {
		if c.Type != "encoded_text" && c.Type != "" {
			e.add("value_error", fmt.Sprintf("chunk type %q is not supported (encoded_text only)", c.Type), "prompt", "chunks", j, "type")
		}
		e.tokenRange(c.Tokens, vocab, "prompt", "chunks", j)
		n += len(c.Tokens)
	}
	if n == 0 {
		e.add("value_error", "prompt holds no tokens", "prompt")
	}
	return n
}

// maxTokens checks sampling_params (present) and max_tokens against a
// prompt of n tokens, filling max_tokens's default when it is absent.
func (e *FieldErrors) maxTokens(sp *SamplingParams, n, maxLen int) {
	switch {
	case sp == nil:
		e.missing("sampling_params")
	case sp.MaxTokens == nil && n < maxLen:
		// The SDK lets max_tokens be None and drops it from the body
		// (types/_pydantic_types/sampling_params.py, "TODO make max_tokens
		// a required field" in sampling_client.py; tinker 6b025363 and
		// d595dc2b). Default: the rest of the context, so the sample ends
		// at a stop or at the context's end — no hidden cap shorter than
		// what the model can hold. The validator fills it in so that the
		// sampler reads one value.
		m := maxLen - n
		sp.MaxTokens = &m
	case sp.MaxTokens == nil:
		e.add("value_error", fmt.Sprintf("prompt has %d tokens, which fill the context of %d: no room for max_tokens (its default, the rest of the context)", n, maxLen), "sampling_params", "max_tokens")
	case *sp.MaxTokens < 1 || n+*sp.MaxTokens > maxLen:
		e.add("value_error", fmt.Sprintf("must be ≥ 1 with prompt + max_tokens ≤ %d (prompt has %d tokens), got %d", maxLen, n, *sp.MaxTokens), "sampling_params", "max_tokens")
	}
}

// samplingParams checks temperature, top_p, top_k and stop.
func (e *FieldErrors) samplingParams(sp *SamplingParams) {
	if sp.Temperature != nil && (*sp.Temperature < 0 || math.IsNaN(*sp.Temperature)) {
		e.add("value_error", "must be ≥ 0", "sampling_params", "temperature")
	}
	if sp.TopP != nil && !(*sp.TopP > 0 && *sp.TopP <= 1) {
		e.add("value_error", "must be in (0, 1]", "sampling_params", "top_p")
	}
	if sp.TopK != nil && *sp.TopK < -1 {
		e.add("value_error", "must be -1 (off) or ≥ 0", "sampling_params", "top_k")
	}
	if _, err := StopList(sp.Stop); err != nil {
		e.add("value_error", err.Error(), "sampling_params", "stop")
	}
}

// Stop is a parsed sampling_params.stop: strings or token ids.
type Stop struct {
	Strings []string
	Tokens  []int32
}

// StopList parses stop: null, a string, a list of strings or a list of
// token ids.
func StopList(raw json.RawMessage) (Stop, error) {
	var s Stop
	if len(raw) == 0 || string(raw) == "null" {
		return s, nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		s.Strings = []string{one}
		return s, nil
	}
	if json.Unmarshal(raw, &s.Strings) == nil {
		return s, nil
	}
	s.Strings = nil
	if json.Unmarshal(raw, &s.Tokens) == nil {
		return s, nil
	}
	return Stop{}, fmt.Errorf("must be a string, a list of strings or a list of token ids, got %s", strconv.Quote(string(raw)))
}

// Tokens concatenates a model input's encoded_text chunks.
func (m ModelInput) Tokens() []int32 {
	n := 0
	for _, c := range m.Chunks {
		n += len(c.Tokens)
	}
	out := make([]int32, 0, n)
	for _, c := range m.Chunks {
		out = append(out, c.Tokens...)
	}
	return out
}
