package proxy

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/actors/router/front"
	"github.com/asyncrl/asyncrl/actors/router/policy"
	"github.com/asyncrl/asyncrl/internal/netx"
)

// Sentinel errors.
var (
	ErrInvalidConfig = errors.New("proxy: invalid config")
	ErrShuttingDown  = errors.New("proxy: shutting down")
)

// Config configures a Router. Build one with DefaultConfig.
type Config struct {
	// Policy configures the routing core (policy name, TTL, load factor…).
	Policy policy.Config
	// Replicas are the engines' base URLs (e.g. http://127.0.0.1:8001),
	// without a trailing path. More can be added through the admin API.
	Replicas []string
	// ListenAddr is the address the caller will serve Handler on. It only
	// decides whether the admin API needs a token: off loopback it does,
	// and New fails without AdminToken. Empty means loopback.
	ListenAddr string
	// AdminToken, when set, is required on every /admin/ request as
	// "Authorization: Bearer <token>" or "X-Admin-Token: <token>".
	AdminToken string
	// MaxBodyBytes caps a request body; larger bodies get 413. Default 32 MiB.
	MaxBodyBytes int64
	// HealthInterval is the period of active health checks
	// (engine/driver.ProbeHealth: GET /health, or SGLang's /get_model_info
	// when its generating /health does not answer in time); 0 turns
	// active checks (and passive marking down, which only they can undo) off.
	// Policy.FailThreshold and Policy.RecoverThreshold set the hysteresis.
	HealthInterval time.Duration
	// HealthTimeout bounds one health check.
	HealthTimeout time.Duration
	// MetricsInterval is the period of GET /metrics scrapes of every
	// replica (vllm:num_requests_waiting and vllm:kv_cache_usage_perc, or
	// SGLang's sglang:num_queue_reqs and sglang:token_usage, read by
	// engine/driver.ParseMetrics) feeding the bounded_sticky load; 0 turns
	// scraping off.
	MetricsInterval time.Duration
	// RetryRatio and RetryBurst form the retry budget: every request earns
	// RetryRatio retry tokens, up to RetryBurst; a retry spends one. So
	// retries stay ≤ RetryRatio of requests plus a burst, and a failing
	// fleet cannot be hit by a retry storm.
	RetryRatio float64
	RetryBurst int
	// MaxRetries caps retries of one request.
	MaxRetries int
	// RetryAfter is the Retry-After sent with the router's own temporary
	// 503s: a gated (held session) request, and a request that came while
	// the router shuts down.
	RetryAfter time.Duration
	// DefaultDecodeTokens is the expected decode length charged when a
	// request names no max_tokens.
	DefaultDecodeTokens int
	// PrefixBytes is how many leading bytes of the prompt (or messages)
	// JSON are hashed into the request's prefix hash.
	PrefixBytes int
	// Transport sends upstream requests; nil builds one that ignores
	// proxy environment variables and keeps connections alive.
	Transport http.RoundTripper
	// Registerer receives the router's Prometheus metrics; nil registers
	// nowhere.
	Registerer prometheus.Registerer
	// Logger logs health transitions and upstream failures.
	Logger zerolog.Logger
	// Front is the HTTP front end Serve runs: FrontLoop (default, "" too:
	// plain requests served from event loops, one per P, everything else
	// as FrontFast does; FrontFast off Linux), FrontFast (the router's
	// own HTTP/1.1 server on the proxied path, a goroutine per
	// connection, net/http for the rest) or FrontNetHTTP (net/http's
	// server for everything).
	Front string
	// IdleTimeout is how long the fast front lets a connection wait for,
	// or trickle in, the head of its next request before closing it (0:
	// DefaultIdleTimeout). A request being served is never cut: a
	// generation may take minutes. (The net_http front gives a started
	// head 10 s and an idle connection no limit.)
	IdleTimeout time.Duration
	// LoopMaxAnswer is the largest answer body (by its Content-Length)
	// the loop front buffers whole and writes in one go; larger answers
	// are relayed by a goroutine, as FrontFast relays them (0:
	// front.DefaultLoopMaxAnswer, 1 MiB).
	LoopMaxAnswer int64
}

// DefaultIdleTimeout is the fast front's IdleTimeout: longer than the
// idle timeouts clients keep their own pooled connections for (Go's
// http.Transport: 90 s), so a client, not the router, normally closes
// an idle keep-alive connection.
const DefaultIdleTimeout = front.DefaultIdleTimeout

// DefaultConfig returns a loopback router with the default policy
// (bounded_sticky), 32 MiB bodies, health checks every 2 s (unhealthy
// after 3 failures, healthy after 2 successes), metrics scrapes every
// 500 ms, and a retry budget of 10 % + 10.
func DefaultConfig() Config {
	return Config{
		Policy:              policy.DefaultConfig(),
		ListenAddr:          "127.0.0.1:8080",
		MaxBodyBytes:        32 << 20,
		HealthInterval:      2 * time.Second,
		HealthTimeout:       time.Second,
		MetricsInterval:     500 * time.Millisecond,
		RetryRatio:          0.1,
		RetryBurst:          10,
		MaxRetries:          2,
		RetryAfter:          time.Second,
		DefaultDecodeTokens: 256,
		PrefixBytes:         2048,
		Logger:              zerolog.Nop(),
		Front:               FrontLoop,
	}
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	if err := c.Policy.Validate(); err != nil {
		return fmt.Errorf("%w: Policy: %w", ErrInvalidConfig, err)
	}
	switch {
	case c.MaxBodyBytes <= 0:
		return fmt.Errorf("%w: MaxBodyBytes %d: want > 0", ErrInvalidConfig, c.MaxBodyBytes)
	case c.HealthInterval < 0:
		return fmt.Errorf("%w: HealthInterval %v: want ≥ 0 (0 = no active checks)", ErrInvalidConfig, c.HealthInterval)
	case c.MetricsInterval < 0:
		return fmt.Errorf("%w: MetricsInterval %v: want ≥ 0 (0 = no scrapes)", ErrInvalidConfig, c.MetricsInterval)
	case c.HealthInterval > 0 && c.HealthTimeout <= 0:
		return fmt.Errorf("%w: HealthTimeout %v: want > 0", ErrInvalidConfig, c.HealthTimeout)
	case !(c.RetryRatio >= 0):
		return fmt.Errorf("%w: RetryRatio %v: want ≥ 0", ErrInvalidConfig, c.RetryRatio)
	case c.RetryBurst < 0:
		return fmt.Errorf("%w: RetryBurst %d: want ≥ 0", ErrInvalidConfig, c.RetryBurst)
	case c.MaxRetries < 0:
		return fmt.Errorf("%w: MaxRetries %d: want ≥ 0", ErrInvalidConfig, c.MaxRetries)
	case c.DefaultDecodeTokens < 0:
		return fmt.Errorf("%w: DefaultDecodeTokens %d: want ≥ 0", ErrInvalidConfig, c.DefaultDecodeTokens)
	case c.PrefixBytes < 0:
		return fmt.Errorf("%w: PrefixBytes %d: want ≥ 0", ErrInvalidConfig, c.PrefixBytes)
	case c.IdleTimeout < 0:
		return fmt.Errorf("%w: IdleTimeout %v: want ≥ 0", ErrInvalidConfig, c.IdleTimeout)
	case c.LoopMaxAnswer < 0:
		return fmt.Errorf("%w: LoopMaxAnswer %d: want ≥ 0 (0 = 1 MiB)", ErrInvalidConfig, c.LoopMaxAnswer)
	case c.Front != "" && c.Front != FrontFast && c.Front != FrontNetHTTP && c.Front != FrontLoop:
		return fmt.Errorf("%w: Front %q: want %q, %q or %q", ErrInvalidConfig, c.Front, FrontFast, FrontLoop, FrontNetHTTP)
	}
	if !isLoopback(c.ListenAddr) && c.AdminToken == "" {
		return fmt.Errorf("%w: AdminToken: required when ListenAddr %q is not loopback", ErrInvalidConfig, c.ListenAddr)
	}
	return nil
}

// isLoopback reports whether addr (host:port or host) binds loopback only
// (internal/netx: the one check every asyncrl listener uses).
func isLoopback(addr string) bool { return netx.IsLoopback(addr) }
