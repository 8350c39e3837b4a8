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
