package policy

import (
	"fmt"
	"time"
)

// Policy names accepted by Config.Policy.
const (
	ConsistentHash    = "consistent_hash"
	StickyLeastLoaded = "sticky_least_loaded"
	BoundedSticky     = "bounded_sticky"
	RoundRobin        = "round_robin"
	LeastRequest      = "least_request"
)

// Lag rules accepted by Config.LagRule: what happens to an existing session
// whose replica is healthy but may not take it right now (paused, updating,
// serving a version below the minimum, or lagging the newest version by
// more than the staleness budget).
const (
	// LagMove reassigns the session on its next request (KV cache lost,
	// latency kept).
	LagMove = "move"
	// LagHold keeps the session where it is and answers its requests with
	// OutcomeGated ("retry later") until the replica catches up (KV cache
	// kept, latency paid). Right for short weight syncs with long prefixes.
	LagHold = "hold"
)

// Version rules accepted by Config.VersionRule: how a replica behind the
// newest acknowledged version (lag = newest − its version) is treated.
const (
	// VersionStaleness (default, issue 15): a lagging replica takes no new
	// sessions while an up-to-date one can, and keeps its sessions while
	// its lag ≤ MaxVersionLag (the run's staleness budget); SkyRL never
	// breaks stickiness for a version.
	VersionStaleness = "staleness"
	// VersionNewest is the rule before issue 15: a replica behind the
	// newest acknowledged version is treated as below the minimum (its
	// sessions follow LagRule the moment another replica acks a newer
	// version). Equivalent to VersionStaleness with MaxVersionLag 0; kept
	// by name so comparisons (bench/routerbench) are reproducible.
	VersionNewest = "newest"
)

// Consistent-hash fallbacks accepted by Config.HashFallback: where a key
// goes when its ring point's replica may not take it.
const (
	// HashWalk (default) walks on to the next ring point whose replica may
	// take the request, so a dead replica's keys spread over the ring.
	HashWalk = "walk"
	// HashFirstHealthy is vllm-router's behaviour (src/policies/
	// consistent_hash.rs): the first replica, in replica order, that may
	// take the request — every key of a dead replica lands on one replica.
	HashFirstHealthy = "first_healthy"
)

// Policies lists every policy name, in the order documentation shows them.
var Policies = []string{BoundedSticky, StickyLeastLoaded, ConsistentHash, RoundRobin, LeastRequest}

// Config configures a Core. Build one with DefaultConfig and change fields.
type Config struct {
	// Policy is the routing policy: bounded_sticky (default),
	// sticky_least_loaded, consistent_hash, round_robin or least_request.
	Policy string
	// VirtualNodes is the number of ring points per replica for
	// consistent_hash (vllm-router uses 160). Must be ≥ 1.
	VirtualNodes int
	// SessionTTL is how long a session may stay idle before Sweep forgets
	// it (SkyRL: 7200 s). 0 expires every idle session at the next sweep.
	SessionTTL time.Duration
	// SweepInterval is the minimum time between two TTL sweeps (SkyRL: 60 s),
	// so that sweeping 100k sessions never runs on every request.
	SweepInterval time.Duration
	// LoadFactor is c of bounded-load hashing: a bounded_sticky session
	// leaves its replica once that replica's load exceeds c × the fleet
	// average. Must be ≥ 1 (1 = perfectly balanced, no locality).
	LoadFactor float64
	// MetricsMaxAge is how old scraped engine metrics (queue length, KV
	// usage) may be and still count; older ones are ignored.
	MetricsMaxAge time.Duration
	// QueueTokens is the weight, in token-equivalents, of one request
	// waiting in an engine's own queue in the bounded_sticky load.
	QueueTokens float64
	// KVTokens is the weight, in token-equivalents, of a full KV cache
	// (kv_cache_usage_perc = 1) in the bounded_sticky load.
	KVTokens float64
	// PrefixCacheEntries is the size of the per-replica LRU of prefix
	// hashes the router has sent there (bounded_sticky move target choice).
	PrefixCacheEntries int
	// MoveCost weighs the re-prefill a bounded_sticky spill causes: a
	// session leaves its over-bound replica r for t only if work(r) −
	// work(t) ≥ MoveCost × the tokens of its history that r holds cached
	// (t must prefill them again). 1 (default) compares like with like;
	// 0 moves whenever the bound is exceeded (the rule before v2).
	MoveCost float64
	// LagRule is "move" (default) or "hold"; see LagMove and LagHold.
	LagRule string
	// VersionRule is "staleness" (default) or "newest"; see
	// VersionStaleness and VersionNewest.
	VersionRule string
	// MaxVersionLag is the staleness budget of VersionStaleness: how many
	// versions a replica may lag behind the newest acknowledged version
	// and keep its sessions (default 4, SkyRL's max_staleness_steps; the
	// run wires its own trainer.max_staleness_steps). Must be ≥ 0.
	MaxVersionLag int64
	// HashFallback is consistent_hash's "walk" (default) or
	// "first_healthy" (vllm-router); see HashWalk and HashFirstHealthy.
	HashFallback string
	// FailThreshold consecutive failed health signals (probes or proxied
	// connection failures) mark a replica unhealthy. Must be ≥ 1.
	FailThreshold int
	// RecoverThreshold consecutive successful probes mark an unhealthy
	// replica healthy again. Must be ≥ 1.
	RecoverThreshold int
}

// DefaultConfig returns the defaults: bounded_sticky, 160 virtual nodes,
// TTL 7200 s swept at most every 60 s, c = 1.25, metrics ≤ 1 s old, lag
// rule move, version rule staleness with a budget of 4 versions,
// consistent_hash walking the ring, unhealthy after 3 failures and healthy again after 2 probes.
func DefaultConfig() Config {
	return Config{
		Policy:             BoundedSticky,
		VirtualNodes:       160,
		SessionTTL:         7200 * time.Second,
		SweepInterval:      60 * time.Second,
		LoadFactor:         1.25,
		MetricsMaxAge:      time.Second,
		QueueTokens:        1024,
		KVTokens:           8192,
		PrefixCacheEntries: 4096,
		MoveCost:           1,
		LagRule:            LagMove,
		VersionRule:        VersionStaleness,
		MaxVersionLag:      4,
		HashFallback:       HashWalk,
		FailThreshold:      3,
		RecoverThreshold:   2,
	}
}

// Validate reports the first invalid field, naming it and what is allowed.
func (c Config) Validate() error {
	switch c.Policy {
	case ConsistentHash, StickyLeastLoaded, BoundedSticky, RoundRobin, LeastRequest:
	default:
		return fmt.Errorf("%w: Policy %q: want one of %v", ErrInvalidConfig, c.Policy, Policies)
	}
	switch {
	case c.VirtualNodes < 1:
		return fmt.Errorf("%w: VirtualNodes %d: want ≥ 1", ErrInvalidConfig, c.VirtualNodes)
	case c.SessionTTL < 0:
		return fmt.Errorf("%w: SessionTTL %v: want ≥ 0", ErrInvalidConfig, c.SessionTTL)
	case c.SweepInterval < 0:
		return fmt.Errorf("%w: SweepInterval %v: want ≥ 0", ErrInvalidConfig, c.SweepInterval)
	case !(c.LoadFactor >= 1):
		return fmt.Errorf("%w: LoadFactor %v: want ≥ 1", ErrInvalidConfig, c.LoadFactor)
	case c.MetricsMaxAge < 0:
		return fmt.Errorf("%w: MetricsMaxAge %v: want ≥ 0", ErrInvalidConfig, c.MetricsMaxAge)
	case !(c.MoveCost >= 0):
		return fmt.Errorf("%w: MoveCost %v: want ≥ 0", ErrInvalidConfig, c.MoveCost)
	case !(c.QueueTokens >= 0) || !(c.KVTokens >= 0):
		return fmt.Errorf("%w: QueueTokens/KVTokens %v/%v: want ≥ 0", ErrInvalidConfig, c.QueueTokens, c.KVTokens)
	case c.FailThreshold < 1 || c.RecoverThreshold < 1:
		return fmt.Errorf("%w: FailThreshold/RecoverThreshold %d/%d: want ≥ 1", ErrInvalidConfig, c.FailThreshold, c.RecoverThreshold)
	case c.PrefixCacheEntries < 0:
		return fmt.Errorf("%w: PrefixCacheEntries %d: want ≥ 0", ErrInvalidConfig, c.PrefixCacheEntries)
	}
	if c.LagRule != LagMove && c.LagRule != LagHold {
		return fmt.Errorf("%w: LagRule %q: want %q or %q", ErrInvalidConfig, c.LagRule, LagMove, LagHold)
	}
	if c.VersionRule != VersionStaleness && c.VersionRule != VersionNewest {
		return fmt.Errorf("%w: VersionRule %q: want %q or %q", ErrInvalidConfig, c.VersionRule, VersionStaleness, VersionNewest)
	}
	if c.MaxVersionLag < 0 {
		return fmt.Errorf("%w: MaxVersionLag %d: want ≥ 0", ErrInvalidConfig, c.MaxVersionLag)
	}
	if c.HashFallback != HashWalk && c.HashFallback != HashFirstHealthy {
		return fmt.Errorf("%w: HashFallback %q: want %q or %q", ErrInvalidConfig, c.HashFallback, HashWalk, HashFirstHealthy)
	}
	return nil
}
