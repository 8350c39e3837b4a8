package config

// PolicyConfig is the shape of the built-in policy the run trains and its
// built-in engines serve (policy.Config; the other sizes are
// policy.DefaultConfig's). Only the mixture of experts is configurable here.
type PolicyConfig struct {
	// Experts > 0 makes every hidden layer a mixture of that many tanh
	// experts with a top-k router (policy/moe.go); 0 is the dense model.
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
