package engine

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
