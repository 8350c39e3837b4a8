package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/asyncrl/asyncrl/engine/latency"
	"github.com/asyncrl/asyncrl/model/sampler"
	"github.com/asyncrl/asyncrl/model/tokenizer"
)

// reqError is a client error with its HTTP status and offending field.
type reqError struct {
	status int
	param  string
	msg    string
}

func (r *reqError) Error() string { return r.msg }

func badRequest(param, format string, args ...any) *reqError {
	return &reqError{status: http.StatusBadRequest, param: param, msg: fmt.Sprintf(format, args...)}
}

// sampling is a request's validated generation settings.
type sampling struct {
	params    sampler.Params
	filtered  bool
	seed      *int64
	n         int
	stops     []string
	maxTokens int // 0 = fill the context
	ignoreEOS bool
	nTop      int // -1 = no logprobs object
	returnIDs bool
	// tokIDs renders logprob tokens as "token_id:N"
	// (return_tokens_as_token_ids).
	tokIDs bool
	// routes: capture routed experts from position routeStart on.
	routes     bool
	routeStart int
	// codec is the engine's text side (text.go).
	codec textCodec
}

type samplingFields struct {
	temperature, topP, minP *float64
	topK, n, maxTokens      *int
	seed                    *int64
	stop                    json.RawMessage
}

func parseSampling(f samplingFields) (sampling, *reqError) {
	sp := sampling{params: sampler.DefaultParams(), n: 1, nTop: -1}
	if f.temperature != nil {
		sp.params.Temperature = *f.temperature
	}
	if f.topP != nil {
		sp.params.TopP = *f.topP
	}
	if f.minP != nil {
		sp.params.MinP = *f.minP
	}
	if f.topK != nil {
		switch k := *f.topK; {
		case k == -1: // vLLM's historic "off"
		case k < -1:
			return sp, badRequest("top_k", "top_k must be -1, 0 (off) or a positive integer, got %d", k)
		default:
			sp.params.TopK = k
		}
	}
	if err := sampler.Validate(sp.params); err != nil {
		param := ""
		for _, name := range []string{"temperature", "top_p", "min_p", "top_k"} {
			if strings.Contains(err.Error(), name) {
				param = name
				break
			}
		}
		return sp, badRequest(param, "%v", err)
	}
	sp.filtered = sp.params.TopP < 1 || sp.params.TopK > 0 || sp.params.MinP > 0
	if f.n != nil {
		if *f.n < 1 {
			return sp, badRequest("n", "n must be >= 1, got %d", *f.n)
		}
		sp.n = *f.n
	}
	if f.maxTokens != nil {
		if *f.maxTokens < 1 {
			return sp, badRequest("max_tokens", "max_tokens must be at least 1, got %d", *f.maxTokens)
		}
		sp.maxTokens = *f.maxTokens
	}
	sp.seed = f.seed
	if len(f.stop) > 0 && string(f.stop) != "null" {
		var one string
		if err := json.Unmarshal(f.stop, &one); err == nil {
			sp.stops = []string{one}
		} else if err := json.Unmarshal(f.stop, &sp.stops); err != nil {
			return sp, badRequest("stop", "stop must be a string or a list of strings")
		}
	}
	return sp, nil
}

// parsePrompt accepts a string, a list of strings, a list of token ids or
// a list of lists of token ids.
func (e *Engine) parsePrompt(raw json.RawMessage, vocab int) ([][]int32, *reqError) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, badRequest("prompt", "prompt is required")
	}
	codec := e.textCodec()
	text := func(s string) []int32 { return codec.encodePrompt(s, e.cfg.AddBOS) }
	checkIDs := func(ids []int32) *reqError {
		for _, id := range ids {
			if id < 0 || int(id) >= vocab {
				return badRequest("prompt", "token id %d out of range [0, %d)", id, vocab)
			}
		}
		return nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		ids := text(one)
		return [][]int32{ids}, checkTextIDs(ids, vocab)
	}
	var strs []string
	if json.Unmarshal(raw, &strs) == nil && len(strs) > 0 {
		out := make([][]int32, len(strs))
		for i, s := range strs {
			out[i] = text(s)
			if rerr := checkTextIDs(out[i], vocab); rerr != nil {
				return nil, rerr
			}
		}
		return out, nil
	}
	var ids []int32
	if json.Unmarshal(raw, &ids) == nil && len(ids) > 0 {
		return [][]int32{ids}, checkIDs(ids)
	}
	var lists [][]int32
	if json.Unmarshal(raw, &lists) == nil && len(lists) > 0 {
		for _, l := range lists {
			if err := checkIDs(l); err != nil {
				return nil, err
			}
		}
		return lists, nil
	}
	return nil, badRequest("prompt", "prompt must be a non-empty string, list of strings, list of token ids or list of token-id lists")
}

// resolveModel maps a request's model name to a LoRA name ("" = base).
func (e *Engine) resolveModel(name string) (string, Model, *reqError) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed || e.model == nil {
		return "", nil, &reqError{status: http.StatusServiceUnavailable, msg: "engine has no weights loaded"}
	}
	if name == "" || name == e.cfg.ServedModelName {
		return "", e.model, nil
	}
	if m, ok := e.loras[name]; ok {
		return name, m, nil
	}
	return "", nil, &reqError{status: http.StatusNotFound, param: "model", msg: fmt.Sprintf("the model `%s` does not exist", name)}
}

var reqCounter atomic.Uint64

// buildGroup validates lengths and creates one sequence per prompt × n.
// defaultMax is the max_tokens used when the request omits it (0 = the
// rest of the context).
func (e *Engine) buildGroup(id, lora string, m Model, prompts [][]int32, sp sampling, defaultMax int) (*group, *reqError) {
	maxLen := e.maxLen(m)
	g := &group{id: id, notify: make(chan struct{}, 1)}
	codec := sp.codec
	if codec == nil {
		codec = e.textCodec()
	}
	for pi, p := range prompts {
		if len(p) == 0 {
			return nil, badRequest("prompt", "prompt %d is empty", pi)
		}
		maxTok := sp.maxTokens
		if maxTok == 0 {
			// Omitted max_tokens never asks for more than the context or
			// the modelled KV cache can hold.
			limit := min(maxLen, e.cfg.Latency.CacheBlocks*e.cfg.Latency.BlockSize)
			maxTok = defaultMax
			if maxTok == 0 || len(p)+maxTok > limit {
				maxTok = max(1, limit-len(p))
			}
		}
		if len(p) >= maxLen || len(p)+maxTok > maxLen {
			return nil, badRequest("prompt", "This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the prompt, %d for the completion). Please reduce the length of the prompt or max_tokens.",
				maxLen, len(p)+maxTok, len(p), maxTok)
		}
		// The modelled KV cache must hold the whole sequence, or the
		// scheduler could never run it alone.
		lc := e.cfg.Latency
		if need := (len(p) + maxTok + lc.BlockSize - 1) / lc.BlockSize; need > lc.CacheBlocks {
			return nil, badRequest("max_tokens", "%d prompt + %d completion tokens need %d KV blocks; the engine's cache holds %d (raise Latency.CacheBlocks or lower max_tokens)",
				len(p), maxTok, need, lc.CacheBlocks)
		}
		for k := 0; k < sp.n; k++ {
			s := &seqState{
				g: g, index: len(g.seqs), lora: lora,
				prompt: p, all: append(make([]int32, 0, len(p)+maxTok), p...),
				params: sp.params, filtered: sp.filtered, maxTokens: maxTok,
				ignoreEOS: sp.ignoreEOS, stops: sp.stops, nTop: sp.nTop,
				routes: sp.routes, routeStart: sp.routeStart, codec: codec,
			}
			g.seqs = append(g.seqs, s)
		}
	}
	// Seeded requests: choice k of every prompt draws from PCG(seed, k),
	// so the same seed reproduces the same tokens.
	e.mu.Lock()
	for _, s := range g.seqs {
		k := uint64(s.index % sp.n)
		if sp.seed != nil {
			s.rng = rand.New(rand.NewPCG(uint64(*sp.seed), k))
		} else {
			s.rng = rand.New(rand.NewPCG(e.rng.Uint64(), e.rng.Uint64()))
		}
	}
	e.mu.Unlock()
	return g, nil
}

// requestID picks the id /abort_requests knows the request by.
func requestID(r *http.Request, body, prefix string) string {
	if body != "" {
		return body
	}
	if h := r.Header.Get("X-Request-Id"); h != "" {
		return h
	}
	return prefix + strconv.FormatUint(reqCounter.Add(1), 16)
}

// start submits g, answering the client on failure.
func (e *Engine) start(w http.ResponseWriter, g *group) bool {
	err := e.submit(g)
	switch {
	case err == nil:
		return true
	case errors.Is(err, latency.ErrQueueFull):
		writeError(w, http.StatusTooManyRequests, "", "waiting queue is full (max_waiting %d)", e.cfg.Latency.MaxWaiting)
	case errors.Is(err, errDuplicateRequest):
		writeError(w, http.StatusBadRequest, "request_id", "%v", err)
	default:
		writeError(w, http.StatusServiceUnavailable, "", "%v", err)
	}
	return false
}

// waitDone blocks until every sequence of g finished; false (after
// aborting g) when the client went away.
func (e *Engine) waitDone(r *http.Request, g *group) bool {
	for {
		e.mu.Lock()
		done := true
		for _, s := range g.seqs {
			if s.finish == "" {
				done = false
			}
		}
		e.mu.Unlock()
		if done {
			return true
		}
		if !e.awaitProgress(r, g) {
			return false
		}
	}
}

// awaitProgress blocks until g moves on; false (after aborting g) when the
// client went away, so an abandoned request stops using the engine.
func (e *Engine) awaitProgress(r *http.Request, g *group) bool {
	select {
	case <-g.notify:
		return true
	case <-r.Context().Done():
		e.Abort([]string{g.id})
		return false
	}
}

// logprobToken is a token as the logprobs objects name it: its text, or
// "token_id:N" with return_tokens_as_token_ids (as vLLM renders it).
func (sp sampling) logprobToken(id int32) string {
	if sp.tokIDs {
		return "token_id:" + strconv.Itoa(int(id))
	}
	if sp.codec != nil {
		return sp.codec.tokenString(id)
	}
	return tokenText(id)
}

// tokenText is the character tokenizer's display form of a token in
// logprobs.

func tokenText(id int32) string {
	switch id {
	case tokenizer.PAD:
		return "<pad>"
	case tokenizer.BOS:
		return "<s>"
	case tokenizer.EOS:
		return "</s>"
	}
	return tokenizer.Piece(id)
}

// cursor tracks what a stream already sent of one sequence.
type cursor struct {
	tok, text int
	done      bool
}

// visibleLocked is how much of s.text may be shown: a live sequence holds
// back a tail that could still grow into a stop string.
func visibleLocked(s *seqState) int {
	n := len(s.text)
	if s.finish != "" {
		return n
	}
	// A character whose bytes span tokens is shown once complete (vLLM's
	// incremental detokenizer holds back text ending in U+FFFD).
	n -= incompleteUTF8(s.text)
	hold := 0
	for _, st := range s.stops {
		for k := min(len(st)-1, n); k > hold; k-- {
			if string(s.text[n-k:n]) == st[:k] {
				hold = k
				break
			}
		}
	}
	return n - hold
}

func (s *seqState) extensions(a, b int, current int64) Extensions {
	x := Extensions{
		WeightVersion:       current,
		TokenWeightVersions: append([]int64{}, s.vers[a:b]...),
		OutputLogprobs:      append([]float32{}, s.lps[a:b]...),
	}
	if len(s.vers) > 0 {
		x.WeightVersion = s.vers[len(s.vers)-1]
	}
	if s.filtered {
		x.SampleSupport = append([][]int32{}, s.support[a:b]...)
		x.OutputSupportLogprobs = append([]float32{}, s.slps[a:b]...)
	}
	return x
}

func (s *seqState) finishPtr() *string {
	if s.finish == "" {
		return nil
	}
	f := s.finish
	return &f
}

func usageOf(g *group, n int) *Usage {
	u := &Usage{PromptTokensDetails: &PromptTokensDetails{}}
	for i, s := range g.seqs {
		if i%n == 0 {
			u.PromptTokens += len(s.prompt)
			u.PromptTokensDetails.CachedTokens += s.cached
		}
		u.CompletionTokens += len(s.out)
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

// sse writes Server-Sent Events.
type sse struct {
	w http.ResponseWriter
	f http.Flusher
}

func newSSE(w http.ResponseWriter, version int64) *sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Weight-Version", strconv.FormatInt(version, 10))
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	return &sse{w: w, f: f}
}

func (s *sse) send(v any) {
	b, _ := json.Marshal(v)
	fmt.Fprintf(s.w, "data: %s\n\n", b)
}

func (s *sse) done() {
	fmt.Fprint(s.w, "data: [DONE]\n\n")
	s.flush()
}

func (s *sse) flush() {
	if s.f != nil {
		s.f.Flush()
	}
}

// stream runs the streaming loop: chunk builds the chunks of new progress
// under the engine lock and reports whether every sequence is done.
func (e *Engine) stream(r *http.Request, out *sse, g *group, chunk func(current int64) ([]any, bool)) bool {
	for {
		e.mu.Lock()
		cs, done := chunk(e.version)
		e.mu.Unlock()
		for _, c := range cs {
			out.send(c)
		}
		out.flush()
		if done {
			return true
		}
		if !e.awaitProgress(r, g) {
			return false
		}
	}
}

func (e *Engine) currentVersion() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.version
}

func lastVersion(g *group, current int64) int64 {
	v := int64(-1)
	for _, s := range g.seqs {
		if len(s.vers) > 0 && s.vers[len(s.vers)-1] > v {
			v = s.vers[len(s.vers)-1]
		}
	}
	if v < 0 {
		return current
	}
	return v
}

func writeReqError(w http.ResponseWriter, err *reqError) {
	writeError(w, err.status, err.param, "%s", err.msg)
}
