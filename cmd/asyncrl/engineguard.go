package main

import (
	"net"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/engine/guard"
	"github.com/asyncrl/asyncrl/internal/logx"
	"github.com/asyncrl/asyncrl/internal/netx"
	"github.com/asyncrl/asyncrl/wiring"
)

// engineGuardFlags are asyncrl engine-guard's flags.
type engineGuardFlags struct {
	engine, listen, keyFile, engineKeyFile, metricsListen string
	openHealth                                            bool
}

// newEngineGuardCmd: asyncrl engine-guard — a keyed reverse proxy in front
// of one engine (engine/guard), until SIGINT/SIGTERM.
func newEngineGuardCmd(g *globals) *cobra.Command {
	var f engineGuardFlags
	cmd := &cobra.Command{
		Use:   "engine-guard",
		Short: "Require an API key on every route of one engine (vLLM, SGLang, built-in)",
		Long: "Serve a reverse proxy in front of one inference engine that requires\n" +
			"Authorization: Bearer <key> on every route. vLLM's --api-key covers only /v1 (and\n" +
			"/v2, /inference, /cohere): /collective_rpc, /pause, /sleep, /update_weights and the\n" +
			"other control routes answer anyone who reaches its port. Bind the engine to\n" +
			"127.0.0.1 (or a private interface), run one guard per engine on the reachable\n" +
			"address, and point engines.external[].url at the guard (docs/security.md).",
		Example: "  asyncrl engine-guard --engine http://127.0.0.1:8001 --listen 10.0.0.5:8000 --key-file /etc/asyncrl/engine.key",
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return runEngineGuard(cmd, g, f) },
	}
	fs := cmd.Flags()
	fs.StringVar(&f.engine, "engine", "", "the engine's base `URL`, e.g. http://127.0.0.1:8001 (required)")
	fs.StringVar(&f.listen, "listen", "127.0.0.1:8091", "`host:port` to serve on (the address callers reach the engine by; off loopback only by this explicit flag)")
	fs.StringVar(&f.keyFile, "key-file", "", "`FILE` holding the key every request must carry as Authorization: Bearer (required, on loopback too)")
	fs.StringVar(&f.engineKeyFile, "engine-key-file", "", "`FILE` holding the engine's own --api-key, sent in place of the caller's (default: the caller's header, i.e. --key-file's key, goes on)")
	fs.BoolVar(&f.openHealth, "open-health", false, "let GET/HEAD /health through without the key (probes that cannot send one); asyncrl's router and drivers send the key")
	fs.StringVar(&f.metricsListen, "metrics-listen", "", "`host:port` for the guard's own Prometheus /metrics (asyncrl_engine_guard_*); empty: none")
	return cmd
}

func runEngineGuard(cmd *cobra.Command, g *globals, f engineGuardFlags) error {
	if f.engine == "" {
		return fail("asyncrl engine-guard: --engine URL is required (the engine's base URL, e.g. http://127.0.0.1:8001)")
	}
	if _, _, err := net.SplitHostPort(f.listen); err != nil {
		return fail("asyncrl engine-guard: --listen %q is not a host:port address", f.listen)
	}
	if f.keyFile == "" {
		return fail("asyncrl engine-guard: --key-file is required: a guard without a key guards nothing (make one: head -c 32 /dev/urandom | base64 > engine.key)")
	}
	key, err := wiring.ReadSecret("--key-file", f.keyFile)
	if err != nil {
		return fail("asyncrl engine-guard: %v", err)
	}
	engineKey, err := wiring.ReadSecret("--engine-key-file", f.engineKeyFile)
	if err != nil {
		return fail("asyncrl engine-guard: %v", err)
	}
	log, err := g.logger(cmd, config.LogConfig{})
	if err != nil {
		return fail("asyncrl engine-guard: %v", err)
	}
	log = logx.For(log, "engine-guard")
	reg := prometheus.NewRegistry()
	gd, err := guard.New(guard.Config{Upstream: f.engine, Key: key, UpstreamKey: engineKey, OpenHealth: f.openHealth, Registerer: reg, Logger: log})
	if err != nil {
		return fail("asyncrl engine-guard: %v", err)
	}
	if u, err := url.Parse(f.engine); err == nil && !netx.IsLoopback(u.Host) {
		// The guard protects only the path through it.
		log.Warn().Str("engine", u.Redacted()).Msg("engine-guard: the engine is not on loopback: anyone who reaches it directly bypasses the guard; bind it to 127.0.0.1 or a private interface only the guard reaches")
	}
	ctx, stop := signalContext(cmd.Context())
	defer stop()
	mdone, err := serveMetrics(ctx, g.stderr, f.metricsListen, reg)
	if err != nil {
		return fail("asyncrl engine-guard: --metrics-listen: %v", err)
	}
	ln, err := listen(g.stderr, "engine-guard", f.listen)
	if err != nil {
		stop()
		<-mdone
		return fail("asyncrl engine-guard: %v", err)
	}
	log.Info().Str("listen", ln.Addr().String()).Str("engine", f.engine).Bool("open_health", f.openHealth).
		Bool("engine_key", engineKey != "").Msg("engine-guard: serving")
	err = serveHTTP(ctx, ln, gd, 10*time.Second)
	stop()
	<-mdone
	if err != nil {
		return fail("asyncrl engine-guard: %v", err)
	}
	return nil
}
