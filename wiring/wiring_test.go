package wiring

import (
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/actors/router/policy"
	"github.com/asyncrl/asyncrl/config"
)

func TestEngineConfigMapsUnitsAndValidates(t *testing.T) {
	c := config.DefaultEngines()
	c.PrefillUSPerToken = 40
	c.DecodeUSPerToken = 10000
	c.DecodeBatchSlope = 2.5
	c.PrefixCacheBlocks = 333
	c.MaxNumSeqs = 7
	e := EngineConfig(c, "engine-3", 9)
	if e.Latency.PrefillPerToken != 40*time.Microsecond || e.Latency.DecodeBase != 10*time.Millisecond ||
		e.Latency.DecodePerSeq != 2500*time.Nanosecond {
		t.Fatalf("durations mapped wrong: %+v", e.Latency)
	}
	if e.Latency.CacheBlocks != 333 || e.Latency.MaxNumSeqs != 7 || e.ServedModelName != "engine-3" || e.Seed != 9 {
		t.Fatalf("fields mapped wrong: %+v", e)
	}
	if err := EngineConfig(config.DefaultEngines(), "", 1).Validate(); err != nil {
		t.Fatalf("default engines section gives an invalid engine config: %v", err)
	}
}

func TestRouterConfigMapsPolicyAndRule(t *testing.T) {
	c := config.DefaultRouter()
	c.Policy = config.RouterPolicy(policy.StickyLeastLoaded)
	c.BalanceFactor = 1.5
	c.MoveCost = 0.5
	c.BehindVersionRule = config.BehindHold
	c.RetryAfter = 7 * time.Second
	p := RouterConfig(c)
	if p.Policy.Policy != policy.StickyLeastLoaded || p.Policy.LoadFactor != 1.5 || p.Policy.MoveCost != 0.5 || p.Policy.LagRule != policy.LagHold {
		t.Fatalf("policy mapped wrong: %+v", p.Policy)
	}
	if p.RetryAfter != 7*time.Second {
		t.Fatalf("router.retry_after 7s reached the proxy as %v", p.RetryAfter)
	}
	d := RouterConfig(config.DefaultRouter())
	d.Replicas = []string{"http://127.0.0.1:1"}
	if err := d.Validate(); err != nil {
		t.Fatalf("default router section gives an invalid proxy config: %v", err)
	}
}

func TestInitialPolicyFreshAndMissingDir(t *testing.T) {
	m, err := InitialPolicy("", 3)
	if err != nil || m.VocabSize() != 98 {
		t.Fatalf("fresh policy: %v, vocab %v", err, m)
	}
	if _, err := InitialPolicy(t.TempDir()+"/nope", 3); err == nil {
		t.Fatal("loading a missing checkpoint dir succeeded")
	}
}

// TestVersionRuleWiring: the staleness budget reaches both the router
// (a lagging replica keeps its sessions) and the publisher (it keeps
// routing to such replicas, so its hard minimum is target − budget), and
// defaults to the run's trainer.max_staleness_steps.
func TestVersionRuleWiring(t *testing.T) {
	for _, tc := range []struct {
		name string
		mut  func(*config.Config)
		want int64
		rule string
	}{
		{"default follows max_staleness_steps", func(c *config.Config) { c.Trainer.MaxStalenessSteps = 3 }, 3, policy.VersionStaleness},
		{"explicit budget", func(c *config.Config) { c.Trainer.MaxStalenessSteps = 3; c.Router.MaxVersionLag = 1 }, 1, policy.VersionStaleness},
		{"budget 0", func(c *config.Config) { c.Router.MaxVersionLag = 0 }, 0, policy.VersionStaleness},
		{"newest rule", func(c *config.Config) { c.Trainer.MaxStalenessSteps = 3; c.Router.VersionRule = config.VersionNewest }, 0, policy.VersionNewest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := config.Default()
			tc.mut(&c)
			p := RunRouterConfig(c)
			if p.Policy.MaxVersionLag != tc.want && tc.rule == policy.VersionStaleness || p.Policy.VersionRule != tc.rule {
				t.Fatalf("router policy: budget %d rule %s, want %d %s", p.Policy.MaxVersionLag, p.Policy.VersionRule, tc.want, tc.rule)
			}
			if got := PublisherTracker(c).MaxLag; got != tc.want {
				t.Fatalf("publisher MaxLag %d, want %d", got, tc.want)
			}
			if err := PublisherTracker(c).Validate(); err != nil {
				t.Fatal(err)
			}
		})
	}
	c := config.DefaultRouter()
	c.HashFallback = config.HashFirstHealthy
	if p := RouterConfig(c); p.Policy.HashFallback != policy.HashFirstHealthy {
		t.Fatalf("hash fallback: %q", p.Policy.HashFallback)
	}
}

// The trainer section reaches the built-in trainer, SkyRL knobs included,
// and seq_mean_token_sum_norm's max_seq_len falls back to the engines'
// max_model_len.
func TestPolicyTrainerMapsSkyRLKnobs(t *testing.T) {
	c := config.Default()
	c.Trainer.LossReduction = config.LossSeqMeanTokenSumNorm
	c.Trainer.PolicyLossType = config.PolicyLossDualClip
	c.Trainer.ClipRatioC = 4
	c.Trainer.TISRatioType = config.TISSequence
	c.Trainer.TokenTISRatioClipHigh, c.Trainer.SequenceTISRatioClipHigh = 1.5, 7
	c.Trainer.CISPOEpsClipLow, c.Trainer.CISPOEpsClipHigh = 0.1, 4
	c.Engines.MaxModelLen = 48
	got := PolicyTrainer(c)
	if got.Reduction != "seq_mean_token_sum_norm" || got.PolicyLoss != "dual_clip" || got.ClipRatioC != 4 ||
		got.TISRatioType != "sequence" || got.TokenTISCap != 1.5 || got.SequenceTISCap != 7 ||
		got.CISPOEpsLow != 0.1 || got.CISPOEpsHigh != 4 || got.ReductionMaxSeqLen != 48 {
		t.Fatalf("mapped %+v", got)
	}
	c.Trainer.MaxSeqLen = 100
	if got := PolicyTrainer(c); got.ReductionMaxSeqLen != 100 {
		t.Fatalf("trainer.max_seq_len 100 mapped to %d", got.ReductionMaxSeqLen)
	}
	if err := PolicyTrainer(config.Default()).Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
}
