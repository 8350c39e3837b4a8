package proxy

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

// Each bad field is refused with ErrInvalidConfig and named, with its
// value, in the message.
func TestConfigValidateNamesField(t *testing.T) {
	for _, c := range []struct {
		field, value string
		mut          func(*Config)
	}{
		{"MaxBodyBytes", "0", func(c *Config) { c.MaxBodyBytes = 0 }},
		{"HealthInterval", "-1s", func(c *Config) { c.HealthInterval = -time.Second }},
		{"MetricsInterval", "-1s", func(c *Config) { c.MetricsInterval = -time.Second }},
		{"HealthTimeout", "0s", func(c *Config) { c.HealthInterval, c.HealthTimeout = time.Second, 0 }},
		{"RetryRatio", "NaN", func(c *Config) { c.RetryRatio = math.NaN() }},
		{"RetryRatio", "-0.5", func(c *Config) { c.RetryRatio = -0.5 }},
		{"RetryBurst", "-1", func(c *Config) { c.RetryBurst = -1 }},
		{"MaxRetries", "-2", func(c *Config) { c.MaxRetries = -2 }},
		{"DefaultDecodeTokens", "-3", func(c *Config) { c.DefaultDecodeTokens = -3 }},
		{"PrefixBytes", "-4", func(c *Config) { c.PrefixBytes = -4 }},
		{"LoopMaxAnswer", "-5", func(c *Config) { c.LoopMaxAnswer = -5 }},
	} {
		cfg := DefaultConfig()
		c.mut(&cfg)
		err := cfg.Validate()
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), c.field+" "+c.value) {
			t.Errorf("%s = %s: err %v, want ErrInvalidConfig naming %q", c.field, c.value, err, c.field+" "+c.value)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig: %v", err)
	}
}
