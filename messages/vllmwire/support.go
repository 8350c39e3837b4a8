package vllmwire

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Candidate is one entry of a generated token's logprob row.
type Candidate struct {
	ID      int32
	Logprob float32
}

// FilteredLogprob is the value vLLM's completions API writes for a
// candidate whose logprob is -inf: _create_completion_logprobs clamps every
// entry with max(logprob, -9999.0)
// (vllm/entrypoints/openai/completion/serving.py). With
// --logprobs-mode processed_logprobs the logprobs are taken after
// temperature and top-k/top-p filtering (vllm/config/model.py LogprobsMode),
// so a candidate the filter removed arrives as -9999.0: candidates above
// this floor are the token's sample support.
const FilteredLogprob = -9999.0

// tokenIDPrefix is how return_tokens_as_token_ids names a token in
// top_logprobs keys ("token_id:123").
const tokenIDPrefix = "token_id:"

// maxRowCandidates bounds one token's row (vLLM's max_logprobs is 20 by
// default; -1 may return the whole vocabulary).
const maxRowCandidates = 1 << 20

// ParseTopLogprobs turns a /v1/completions choice's logprobs.top_logprobs
// (one {"token_id:N": logprob} object per generated token; null where vLLM
// has none) into candidate rows, strongest first (ties by id). The request
// must set return_tokens_as_token_ids so that keys are ids, not text.
func ParseTopLogprobs(top []map[string]float64) ([][]Candidate, error) {
	rows := make([][]Candidate, len(top))
	for i, m := range top {
		if m == nil {
			continue
		}
		if len(m) > maxRowCandidates {
			return nil, fmt.Errorf("%w: top_logprobs[%d] has %d entries", ErrMalformed, i, len(m))
		}
		row := make([]Candidate, 0, len(m))
		for k, lp := range m {
			if !strings.HasPrefix(k, tokenIDPrefix) {
				return nil, fmt.Errorf("%w: top_logprobs[%d] key %q is not token_id:N (send return_tokens_as_token_ids)", ErrMalformed, i, truncate(k, 40))
			}
			id, err := strconv.ParseInt(k[len(tokenIDPrefix):], 10, 32)
			if err != nil || id < 0 {
				return nil, fmt.Errorf("%w: top_logprobs[%d] key %q", ErrMalformed, i, truncate(k, 40))
			}
			if math.IsNaN(lp) {
				return nil, fmt.Errorf("%w: top_logprobs[%d][%s] is NaN", ErrMalformed, i, k)
			}
			row = append(row, Candidate{ID: int32(id), Logprob: float32(lp)})
		}
		sortRow(row)
		rows[i] = row
	}
	return rows, nil
}

// sortRow orders candidates strongest first, ties by id.
func sortRow(row []Candidate) {
	slices.SortFunc(row, func(a, b Candidate) int {
		switch {
		case a.Logprob > b.Logprob:
			return -1
		case a.Logprob < b.Logprob:
			return 1
		}
		return int(a.ID) - int(b.ID)
	})
}

// alive reports whether a candidate survived the sampler's filter.
func alive(c Candidate) bool {
	return c.Logprob > FilteredLogprob && !math.IsInf(float64(c.Logprob), -1)
}

// SupportSets turns per-token candidate rows into support sets: flat
// [len(sampled), k] ids, −1 padded. Each token's set holds its surviving
// candidates (logprob above FilteredLogprob), strongest first, at most k;
// if the sampled id is not among them it replaces the weakest member (or
// fills the first free slot), so every set contains its sampled token.
// A nil row yields {sampled, −1, …}.
func SupportSets(rows [][]Candidate, sampled []int32, k int) ([]int32, error) {
	if k <= 0 || k > maxRowCandidates {
		return nil, fmt.Errorf("vllmwire: support k %d: want 1..%d", k, maxRowCandidates)
	}
	if len(rows) != len(sampled) {
		return nil, fmt.Errorf("%w: %d logprob rows for %d tokens", ErrMalformed, len(rows), len(sampled))
	}
	out := make([]int32, len(sampled)*k)
	for i := range out {
		out[i] = -1
	}
	for t, row := range rows {
		set := out[t*k : (t+1)*k]
		n, has := 0, false
		for _, c := range row {
			if n == k {
				break
			}
			if !alive(c) || slices.Contains(set[:n], c.ID) {
				continue
			}
			set[n] = c.ID
			has = has || c.ID == sampled[t]
			n++
		}
		switch {
		case has:
		case n < k:
			set[n] = sampled[t]
		default:
			set[k-1] = sampled[t]
		}
	}
	return out, nil
}

// SupportLogprobs renormalises each sampled token's logprob over its
// support set: lp(sampled) − logsumexp(lp(members)), members' logprobs
// taken from the token's row (the sampled token's own from sampledLP when
// its row lacks it). support is SupportSets' output for the same rows.
// Under processed_logprobs with a complete support this is ≈ the sampled
// logprob itself; over raw logprobs it is the renormalisation the trainer's
// SupportNorm applies.
func SupportLogprobs(rows [][]Candidate, sampled []int32, sampledLP []float32, support []int32, k int) ([]float32, error) {
	if len(rows) != len(sampled) || len(sampledLP) != len(sampled) || k <= 0 || len(support) != len(sampled)*k {
		return nil, fmt.Errorf("%w: %d rows, %d tokens, %d logprobs, %d support values (k=%d)", ErrMalformed, len(rows), len(sampled), len(sampledLP), len(support), k)
	}
	out := make([]float32, len(sampled))
	for t, row := range rows {
		lp := func(id int32) float64 {
			for _, c := range row {
				if c.ID == id {
					return float64(c.Logprob)
				}
			}
			if id == sampled[t] {
				return float64(sampledLP[t])
			}
			return math.Inf(-1)
		}
		mx := math.Inf(-1)
		set := support[t*k : (t+1)*k]
		for _, id := range set {
			if id >= 0 {
				mx = math.Max(mx, lp(id))
			}
		}
		sum := 0.0
		for _, id := range set {
			if id >= 0 {
				sum += math.Exp(lp(id) - mx)
			}
		}
		out[t] = float32(lp(sampled[t]) - (mx + math.Log(sum)))
	}
	return out, nil
}
