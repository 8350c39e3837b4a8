package wiring

import (
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/engine"
	pmodel "github.com/asyncrl/asyncrl/model"
)

// PolicyModel is the built-in policy's shape for the run: DefaultConfig
// with the policy section's mixture of experts.
func PolicyModel(c config.Config) pmodel.Config {
	m := pmodel.DefaultConfig()
	m.Experts, m.TopK = c.Policy.Experts, c.Policy.TopK
	return m
}

// InitialPolicyFor is InitialPolicy for a model of shape cfg when dir is
// empty: a fresh policy from seed rounded to BF16 (with dir, the
// checkpoint's config.json decides the shape).
func InitialPolicyFor(dir string, cfg pmodel.Config, seed uint64) (engine.Model, error) {
	if dir != "" {
		return InitialPolicy(dir, seed)
	}
	m, err := pmodel.New(cfg, seed)
	if err != nil {
		return nil, err
	}
	m.RoundBF16()
	return m, nil
}
