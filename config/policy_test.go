package config

import (
	"errors"
	"strings"
	"testing"
)

func TestPolicySection(t *testing.T) {
	c := Default()
	if c.Policy != (PolicyConfig{}) {
		t.Fatalf("default policy %+v, want the dense model", c.Policy)
	}
	for _, tc := range []struct {
		experts, topK int
		want          string // "" = valid
	}{
		{0, 0, ""}, {4, 2, ""}, {8, 8, ""},
		{0, 2, "policy.top_k"}, {4, 0, "policy.top_k"}, {4, 5, "policy.top_k"},
		{-1, 0, "policy.experts"}, {2000, 1, "policy.experts"},
	} {
		c.Policy = PolicyConfig{Experts: tc.experts, TopK: tc.topK}
		err := c.Validate()
		if tc.want == "" {
			if err != nil {
				t.Errorf("experts %d top_k %d: %v", tc.experts, tc.topK, err)
			}
			continue
		}
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("experts %d top_k %d: got %v, want an error naming %s", tc.experts, tc.topK, err, tc.want)
		}
	}
}

func TestPolicyRoutesAgree(t *testing.T) {
	moe := func(mod func(*Config)) error {
		c := Default()
		c.Policy = PolicyConfig{Experts: 4, TopK: 2}
		c.Rollout.RoutedExperts = RoutedExpertsConfig{Enabled: true, Layers: BuiltinPolicyLayers, TopK: 2, NumExperts: 4}
		mod(&c)
		return c.Validate()
	}
	if err := moe(func(*Config) {}); err != nil {
		t.Fatalf("matching shapes: %v", err)
	}
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"dense policy", func(c *Config) { c.Policy = PolicyConfig{} }, "rollout.routed_experts.enabled"},
		{"top_k", func(c *Config) { c.Rollout.RoutedExperts.TopK = 1 }, "rollout.routed_experts.top_k"},
		{"num_experts", func(c *Config) { c.Rollout.RoutedExperts.NumExperts = 8 }, "rollout.routed_experts.num_experts"},
		{"layers", func(c *Config) { c.Rollout.RoutedExperts.Layers = 2 }, "rollout.routed_experts.layers"},
	} {
		if err := moe(tc.mod); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error naming %s", tc.name, err, tc.want)
		}
	}
	// external engines only: their model's shape is theirs to declare
	err := moe(func(c *Config) {
		c.Policy = PolicyConfig{}
		c.Engines.Count = 0
		c.Engines.ExternalURLs = []string{"http://10.0.0.5:8000"}
		c.Rollout.RoutedExperts.NumExperts, c.Rollout.RoutedExperts.Layers = 64, 8
	})
	if err != nil && strings.Contains(err.Error(), "routed_experts") {
		t.Errorf("external engines: %v", err)
	}
}
