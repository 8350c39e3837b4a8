package engine

import "github.com/asyncrl/asyncrl/messages/vllmwire"

// RoutesModel is a Model that reports its mixture-of-experts routing, so
// the engine can answer return_routed_experts the way vLLM does (R3,
// messages/vllmwire). The engine asks for it only when a request sets
// return_routed_experts; models without routes simply do not implement it.
type RoutesModel interface {
	Model
	// RouteShape is the routing's fixed shape: MoE layers, experts chosen
	// per token per layer (top-k) and the number of experts.
	RouteShape() (layers, topK, numExperts int)
	// Routes returns the expert ids chosen at positions [from, len(tokens))
	// when the model runs over tokens: C-order [len(tokens)-from, layers,
	// topK], every id in [0, numExperts). Row i is the routing of the
	// forward pass that takes tokens[from+i] as input (with tokens[:from+i]
	// before it), i.e. the pass whose output predicts tokens[from+i+1].
	// It must be safe for concurrent use, as NextLogits is.
	Routes(tokens []int32, from int) []int32
}

// routeOptions validates return_routed_experts against the model.
func routeOptions(o *SamplingOptions, m Model, sp *sampling) *reqError {
	if o.RoutedExpertsPromptStart < 0 {
		return badRequest("routed_experts_prompt_start", "routed_experts_prompt_start must be >= 0, got %d", o.RoutedExpertsPromptStart)
	}
	if !o.ReturnRoutedExperts {
		return nil
	}
	// A model type may implement RoutesModel yet be dense in this
	// instance (model.Model without experts: RouteShape all zero).
	if rm, ok := m.(RoutesModel); !ok || !hasRoutes(rm) {
		return badRequest("return_routed_experts", "the served model does not report routed experts (not a mixture-of-experts model)")
	}
	if o.Stream {
		return badRequest("return_routed_experts", "routed_experts are returned in non-streamed answers only")
	}
	sp.routes, sp.routeStart = true, o.RoutedExpertsPromptStart
	return nil
}

func hasRoutes(rm RoutesModel) bool {
	l, k, _ := rm.RouteShape()
	return l > 0 && k > 0
}

// checkRouteStart: vLLM requires routed_experts_prompt_start < the prompt's length.
func checkRouteStart(sp sampling, prompts [][]int32) *reqError {
	if !sp.routes {
		return nil
	}
	for i, p := range prompts {
		if sp.routeStart >= len(p) {
			return badRequest("routed_experts_prompt_start", "routed_experts_prompt_start %d must be below the %d tokens of prompt %d", sp.routeStart, len(p), i)
		}
	}
	return nil
}

// captureRoutes appends the rows of positions [routeStart +
// rows held, len(all)) — the prompt on the first step, then the one
// position this step's forward pass reads — from m, the model of the step.
// A swapped-in model without routes, or with another shape, ends the
// sequence's routes (it answers none rather than mixed rows).
func captureRoutes(s *seqState, m Model) {
	rm, ok := m.(RoutesModel)
	var shape [3]int
	if ok {
		shape[0], shape[1], shape[2] = rm.RouteShape()
	}
	if !ok || (s.routeShape != [3]int{} && s.routeShape != shape) || shape[0] <= 0 || shape[1] <= 0 {
		s.routes, s.routeRows = false, nil
		return
	}
	s.routeShape = shape
	from := s.routeStart + len(s.routeRows)/(shape[0]*shape[1])
	if from >= len(s.all) {
		return
	}
	// A batched step left this step's routes in the sequence's cache:
	// read them there instead of running the model again.
	if s.kv != nil && Model(s.kvModel) == m && s.kv.Len() == len(s.all) {
		s.routeRows = append(s.routeRows, s.kv.Routes(from)...)
		return
	}
	s.routeRows = append(s.routeRows, rm.Routes(s.all, from)...)
}

// routedExperts encodes s's rows in vLLM's wire form: positions
// [routeStart, len(all)-1), the last generated token never having been
// forwarded. nil when there are none (an abort before the first token, a
// model without routes) or the model's rows were malformed.
func (s *seqState) routedExperts() *vllmwire.RoutedExperts {
	if !s.routes || len(s.out) == 0 {
		return nil
	}
	l, k, experts := s.routeShape[0], s.routeShape[1], s.routeShape[2]
	n := len(s.all) - 1 - s.routeStart
	if n < 0 || len(s.routeRows) < n*l*k {
		return nil
	}
	r, err := vllmwire.EncodeRoutedExperts(s.routeRows[:n*l*k], n, l, k, int32(experts))
	if err != nil {
		return nil
	}
	return &r
}
