package rollout

import (
	"fmt"

	"github.com/asyncrl/asyncrl/messages/vllmwire"
)

// replayFields decodes the answer's replay data (R3 routes, support sets
// from top logprob rows) into out, once, in the client: nothing after it
// sees per-token JSON.
func (c *HTTPClient) replayFields(out *TurnOutput, req TurnRequest) error {
	wire, top := out.wireRoutes, out.topLogprobs
	out.wireRoutes, out.topLogprobs = nil, nil
	if rs := req.Routes; rs.On() && wire == nil && len(out.Tokens) > 0 {
		// vLLM sends null only for a request aborted before any forward
		// pass; tokens without routes mean an engine not returning them,
		// and padding rows would be replayed on trained tokens.
		return fmt.Errorf("routed experts asked for but the answer has no routed_experts for its %d tokens (vLLM: --enable-return-routed-experts)", len(out.Tokens))
	}
	if rs := req.Routes; rs.On() && wire != nil {
		rows, err := vllmwire.DecodeRoutedExperts(*wire, int32(rs.NumExperts), rs.Layers, rs.TopK)
		if err != nil {
			return err
		}
		// vLLM answers positions [start, prompt + generated − 1).
		total := len(req.Tokens) + len(out.Tokens)
		if req.RoutesStart > 0 && rows.Tokens == total-1 {
			// The rows of every position from 0: an engine that dropped
			// routed_experts_prompt_start (vLLM before PR #51906, see
			// engine/driver VLLMFeatures). The trajectory holds the first
			// RoutesStart; keep the rest rather than fail every later turn.
			rows.Values = rows.Values[req.RoutesStart*rows.Stride():]
			rows.Tokens -= req.RoutesStart
			out.RoutesSliced = true
		}
		if maxRows := total - req.RoutesStart; rows.Tokens > maxRows {
			return fmt.Errorf("routed_experts has %d rows; from position %d a prompt of %d and %d generated tokens have at most %d",
				rows.Tokens, req.RoutesStart, len(req.Tokens), len(out.Tokens), maxRows)
		}
		out.Routes = rows.Values
	}
	if k := c.SupportFromLogprobs; k > 0 && out.Support == nil && top != nil {
		if len(top) != len(out.Tokens) {
			return fmt.Errorf("%d token_ids but %d top_logprobs rows", len(out.Tokens), len(top))
		}
		rows, err := vllmwire.ParseTopLogprobs(top)
		if err != nil {
			return err
		}
		flat, err := vllmwire.SupportSets(rows, out.Tokens, k)
		if err != nil {
			return err
		}
		slps, err := vllmwire.SupportLogprobs(rows, out.Tokens, out.Logprobs, flat, k)
		if err != nil {
			return err
		}
		out.Support = make([][]int32, len(out.Tokens))
		for i := range out.Support {
			out.Support[i] = flat[i*k : (i+1)*k : (i+1)*k]
		}
		out.SupportLogprobs = slps
	}
	return nil
}

// routeRows is how many positions' routes e holds.
func (e *Episode) routeRows(rs RouteSpec) int {
	if !rs.On() {
		return 0
	}
	return len(e.Routes) / (rs.Layers * rs.TopK)
}

// addRoutes appends a call's rows (positions from routeRows on), cut to
// the tokens the episode kept (a call may overshoot the turn's budget).
func (e *Episode) addRoutes(rs RouteSpec, rows []int32) {
	if !rs.On() || rows == nil {
		return
	}
	stride := rs.Layers * rs.TopK
	keep := min(len(rows)/stride, len(e.Tokens)-e.routeRows(rs))
	e.Routes = append(e.Routes, rows[:max(keep, 0)*stride]...)
}

// padRoutes makes Routes cover every token: rows past len(Tokens) (a cut
// context) are dropped, missing ones get arange(top_k) per layer.
func (e *Episode) padRoutes(rs RouteSpec) {
	if !rs.On() {
		return
	}
	stride := rs.Layers * rs.TopK
	if n := len(e.Tokens) * stride; len(e.Routes) > n {
		e.Routes = e.Routes[:n]
	}
	for len(e.Routes) < len(e.Tokens)*stride {
		for range rs.Layers {
			for k := range rs.TopK {
				e.Routes = append(e.Routes, int32(k))
			}
		}
		e.RoutesPadded++
	}
}
