package config

import (
	"math"
	"net"
	"time"
)

// RouterConfig configures the session-aware HTTP router in front of the engines.
type RouterConfig struct {
	// Policy picks the replica for each request.
	Policy RouterPolicy `yaml:"policy" doc:"replica selection policy"`
	// BalanceFactor is bounded_sticky's c: no replica holds more than
	// ceil(c · sessions / replicas) sessions.
	// MoveCost weighs the re-prefill a bounded_sticky move causes: a session
	// moves off an over-bound replica only when the work queued there minus
	// the target's is at least move_cost × its cached history (0 = always).
	MoveCost      float64 `yaml:"move_cost" doc:"bounded_sticky: move a session only when the queued work saved ≥ move_cost × its cached history tokens (0 = move whenever over the bound)"`
	BalanceFactor float64 `yaml:"balance_factor" doc:"bounded_sticky load bound c: a replica holds at most ceil(c·sessions/replicas) sessions (≥ 1)"`
	// SessionTTL releases a session not seen for this long (SkyRL: 7200 s).
	SessionTTL time.Duration `yaml:"session_ttl" doc:"a session idle this long is released"`
	// SweepInterval is how often expired sessions are swept (SkyRL: 60 s).
	SweepInterval time.Duration `yaml:"sweep_interval" doc:"how often expired sessions are swept"`
	// VirtualNodes is the ring points per replica for consistent_hash and
	// bounded_sticky (vllm-router: 160).
	VirtualNodes int `yaml:"virtual_nodes" doc:"hash ring points per replica (consistent_hash, bounded_sticky)"`
	// HealthCheckInterval is the time between health probes of each replica.
	HealthCheckInterval time.Duration `yaml:"health_check_interval" doc:"time between health probes of each replica"`
	// HealthCheckTimeout bounds one probe.
	HealthCheckTimeout time.Duration `yaml:"health_check_timeout" doc:"timeout of one health probe"`
	// UnhealthyThreshold is the consecutive failed probes that mark a replica down.
	UnhealthyThreshold int `yaml:"unhealthy_threshold" doc:"consecutive failed probes that mark a replica unhealthy"`
	// HealthyThreshold is the consecutive good probes that bring it back.
	HealthyThreshold int `yaml:"healthy_threshold" doc:"consecutive good probes that mark a replica healthy again"`
	// MaxBodyBytes caps a request body; bigger ones get 413.
	MaxBodyBytes int64 `yaml:"max_body_bytes" doc:"largest request body accepted (413 above)"`
	// MaxRetries is how many other replicas one failed request may be retried on.
	MaxRetries int `yaml:"max_retries" doc:"retries of one failed request on other replicas"`
	// RetryBudget caps retries as a fraction of first attempts, so a failing
	// fleet is not hit with a retry storm.
	RetryBudget float64 `yaml:"retry_budget" doc:"retries allowed as a fraction of first attempts (0–1), against retry storms"`
	// RetryAfter is the Retry-After the router sends with its own
	// temporary 503s (a request of a held session, a request that came
	// while it shuts down): how long a client, or a load balancer in
	// front, waits before it tries again. Sent in whole seconds.
	RetryAfter time.Duration `yaml:"retry_after" doc:"Retry-After of the router's own 503s (a held session's request, one that came during shutdown); whole seconds, ≥ 1s"`
	// BehindVersionRule is what happens to sessions on a replica that falls
	// behind the minimum policy version.
	BehindVersionRule BehindVersionRule `yaml:"behind_version_rule" doc:"sessions on a replica behind the minimum version: move (reassign) or hold (wait for it)"`
	// VersionRule is how a replica behind the newest acknowledged version
	// is treated: staleness (keeps its sessions within max_version_lag,
	// takes no new ones) or newest (the rule before issue 15).
	VersionRule VersionRule `yaml:"version_rule" doc:"a replica behind the newest acked version: staleness (keeps its sessions while its lag ≤ max_version_lag, takes no new ones) or newest (loses them at once)"`
	// MaxVersionLag is the staleness budget in versions: how far a replica
	// may lag the newest acknowledged version and keep its sessions; the
	// publisher routes to replicas down to the newest version minus it.
	// -1 (default) follows trainer.max_staleness_steps.
	MaxVersionLag int `yaml:"max_version_lag" doc:"versions a replica may lag the newest and keep its sessions; -1 = trainer.max_staleness_steps"`
	// HashFallback is where consistent_hash sends a key whose ring point's
	// replica cannot take it: walk (next ring point) or first_healthy
	// (vllm-router: the first healthy replica).
	HashFallback HashFallback `yaml:"hash_fallback" doc:"consistent_hash, target down: walk (next ring point) or first_healthy (vllm-router)"`
	// Listen is the router's HTTP address.
	Listen string `yaml:"listen" doc:"router HTTP address (host:port; port 0 = any free port)"`
	// Front is the HTTP front end serving Listen.
	Front RouterFront `yaml:"front" doc:"HTTP front end: loop (plain requests served from event loops, one per CPU; the rest as fast), fast (the router's own HTTP/1.1 server on the proxied path, a goroutine per connection, net/http for the rest) or net_http"`
}

// DefaultRouter uses bounded_sticky with SkyRL's and vllm-router's constants
// (c=1.25, TTL 2 h, sweep 60 s, 160 virtual nodes).
func DefaultRouter() RouterConfig {
	return RouterConfig{
		Policy:              PolicyBoundedSticky,
		BalanceFactor:       1.25,
		MoveCost:            1,
		SessionTTL:          7200 * time.Second,
		SweepInterval:       60 * time.Second,
		VirtualNodes:        160,
		HealthCheckInterval: 5 * time.Second,
		HealthCheckTimeout:  2 * time.Second,
		UnhealthyThreshold:  3,
		HealthyThreshold:    2,
		MaxBodyBytes:        8 << 20,
		MaxRetries:          2,
		RetryBudget:         0.2,
		RetryAfter:          time.Second,
		BehindVersionRule:   BehindMove,
		VersionRule:         VersionStaleness,
		MaxVersionLag:       -1,
		HashFallback:        HashWalk,
		Listen:              "127.0.0.1:8000",
		Front:               FrontLoop,
	}
}

// Validate checks the router section.
func (c RouterConfig) Validate() error {
	v := checker{section: "router"}
	v.checkEnums(c)
	if !(c.BalanceFactor >= 1) {
		v.fail("balance_factor", "must be ≥ 1, got %g", c.BalanceFactor)
	}
	if !(c.MoveCost >= 0) || math.IsInf(c.MoveCost, 0) {
		v.fail("move_cost", "must be a finite number ≥ 0, got %g", c.MoveCost)
	}
	v.positiveDuration("session_ttl", c.SessionTTL)
	v.positiveDuration("sweep_interval", c.SweepInterval)
	v.atLeast("virtual_nodes", int64(c.VirtualNodes), 1)
	v.positiveDuration("health_check_interval", c.HealthCheckInterval)
	v.positiveDuration("health_check_timeout", c.HealthCheckTimeout)
	v.atLeast("unhealthy_threshold", int64(c.UnhealthyThreshold), 1)
	v.atLeast("healthy_threshold", int64(c.HealthyThreshold), 1)
	v.atLeast("max_body_bytes", c.MaxBodyBytes, 1)
	v.atLeast("max_retries", int64(c.MaxRetries), 0)
	v.atLeast("max_version_lag", int64(c.MaxVersionLag), -1)
	v.inRange("retry_budget", c.RetryBudget, 0, 1)
	if c.RetryAfter < time.Second || c.RetryAfter%time.Second != 0 {
		v.fail("retry_after", "must be whole seconds, at least 1s (the header counts seconds), got %s", formatDuration(c.RetryAfter))
	}
	v.hostPort("listen", c.Listen, false)
	return v.err()
}

// hostPort checks a host:port listen address; empty is allowed when optional.
func (c *checker) hostPort(field, addr string, optional bool) {
	if addr == "" && optional {
		return
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		c.fail(field, "%q is not a host:port address", addr)
	}
}

// MaxVersionLag is the run's staleness budget in versions: how far an
// engine may lag the newest acknowledged version and keep serving (the
// router keeps its sessions; the publisher keeps routing to it, so the
// hard minimum it announces is target − MaxVersionLag). It is
// router.max_version_lag, or trainer.max_staleness_steps when that is -1,
// and 0 under router.version_rule newest (the rule before issue 15: only
// the newest version is routed).
func (c Config) MaxVersionLag() int64 {
	switch {
	case c.Router.VersionRule == VersionNewest:
		return 0
	case c.Router.MaxVersionLag >= 0:
		return int64(c.Router.MaxVersionLag)
	}
	return int64(max(c.Trainer.MaxStalenessSteps, 0))
}
