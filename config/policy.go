package config

// PolicyConfig is the shape of the built-in policy the run trains and its
// built-in engines serve (policy.Config; the other sizes are
// policy.DefaultConfig's). Only the mixture of experts is configurable here.
type PolicyConfig struct {
	// Experts > 0 makes every hidden layer a mixture of that many tanh
	// experts with a top-k router (model/moe.go); 0 is the dense model.
	Experts int `yaml:"experts" doc:"mixture of experts: experts per hidden layer (0 = the dense built-in policy); engines report routes, the trainer can replay them (R3)"`
	// TopK is how many experts each token uses per layer.
	TopK int `yaml:"top_k" doc:"experts each token uses per layer (1..experts; 0 with experts 0)"`
}

// maxPolicyExperts is policy.maxExperts.
const maxPolicyExperts = 1024

// DefaultPolicy is the dense built-in policy.
func DefaultPolicy() PolicyConfig { return PolicyConfig{} }

// Validate checks the policy section.
func (c PolicyConfig) Validate() error {
	v := checker{section: "policy"}
	v.inRange("experts", float64(c.Experts), 0, maxPolicyExperts)
	switch {
	case c.Experts == 0 && c.TopK != 0:
		v.fail("top_k", "must be 0 for the dense policy (experts 0), got %d", c.TopK)
	case c.Experts > 0 && (c.TopK < 1 || c.TopK > c.Experts):
		v.fail("top_k", "must be in [1, experts=%d], got %d", c.Experts, c.TopK)
	}
	return v.err()
}

// BuiltinPolicyLayers is the built-in policy's hidden layers
// (policy.DefaultConfig().Layers, which config cannot import; a test in
// wiring checks they agree): its routes' L.
const BuiltinPolicyLayers = 1

// validatePolicyRoutes: when the run's own engines serve the built-in
// policy (engines.count > 0), rollout.routed_experts must describe that
// policy's routes, or every answer would be refused (a dense policy has
// none; another shape fails the wire check).
func (c Config) validatePolicyRoutes() error {
	r := c.Rollout.RoutedExperts
	if r == (RoutedExpertsConfig{Enabled: true}) && !c.Model.HF() {
		v := checker{section: "rollout.routed_experts"}
		v.fail("layers", "layers, top_k and num_experts are read from the model only for a Hugging Face model (model.path or model.arch); give the served model's routing shape")
		return v.err()
	}
	if !r.Enabled || c.Engines.Count <= 0 || c.Model.HF() {
		return nil // a Hugging Face model's shape is checked against its config.json at start
	}
	v := checker{section: "rollout.routed_experts"}
	if c.Policy.Experts == 0 {
		v.fail("enabled", "the built-in engines serve the dense policy, which reports no routes: set policy.experts and policy.top_k, or turn routed_experts off")
		return v.err()
	}
	if r.Layers != BuiltinPolicyLayers {
		v.fail("layers", "must be %d (the built-in policy's hidden layers) when engines.count > 0, got %d", BuiltinPolicyLayers, r.Layers)
	}
	if r.TopK != c.Policy.TopK {
		v.fail("top_k", "must equal policy.top_k (%d) when engines.count > 0, got %d", c.Policy.TopK, r.TopK)
	}
	if r.NumExperts != c.Policy.Experts {
		v.fail("num_experts", "must equal policy.experts (%d) when engines.count > 0, got %d", c.Policy.Experts, r.NumExperts)
	}
	return v.err()
}
