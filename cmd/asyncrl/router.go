package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/asyncrl/asyncrl/actors/router/proxy"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/internal/logx"
	"github.com/asyncrl/asyncrl/internal/netx"
	"github.com/asyncrl/asyncrl/wiring"
)

// newRouterCmd: asyncrl router — the session-aware router as a standalone
// proxy in front of any vLLM-compatible servers.
func newRouterCmd(g *globals) *cobra.Command {
	var (
		cfgPath, listen_, policyName, token, metricsAddr, front string
		engines                                                 []string
	)
	cmd := &cobra.Command{
		Use:   "router",
		Short: "Serve the session-aware router in front of vLLM-compatible engines",
		Long: "Proxy /v1/* to engines with session-sticky, load-aware routing (X-Session-ID),\n" +
			"health checks, bounded retries and version gating. POST /finish_session?session_id=…\n" +
			"releases a session; /admin/ lists and changes replicas (a token is required when\n" +
			"--listen is not a loopback address).",
		Example: "  asyncrl router --listen 127.0.0.1:8000 --engine http://127.0.0.1:8001 --engine http://127.0.0.1:8002 --policy sticky_least_loaded",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cfgPath, func(c *config.Config) {
				if cmd.Flags().Changed("policy") {
					c.Router.Policy = config.RouterPolicy(policyName)
				}
				if cmd.Flags().Changed("listen") {
					c.Router.Listen = listen_
				}
				if cmd.Flags().Changed("metrics-listen") {
					c.Metrics.Listen = metricsAddr
				}
				if cmd.Flags().Changed("front") {
					c.Router.Front = config.RouterFront(front)
				}
			})
			if err != nil {
				return fail("asyncrl router: %v", err)
			}
			if len(engines) == 0 {
				engines = cfg.Engines.ExternalURLs
			}
			if len(engines) == 0 {
				return fail("asyncrl router: no engines: give --engine URL (repeatable) or engines.external_urls in --config")
			}
			log, err := g.logger(cmd, cfg.Log)
			if err != nil {
				return fail("asyncrl router: %v", err)
			}
			reg := prometheus.NewRegistry()
			pc := wiring.RunRouterConfig(cfg)
			pc.Replicas = engines
			pc.AdminToken = token
			pc.Registerer = reg
			pc.Logger = logx.For(log, "router")
			// engines.api_key_file and engines.external[].api_key_file:
			// the router sends each engine its key.
			bkey, hkeys, err := wiring.EngineKeys(cfg.Engines)
			if err != nil {
				return fail("asyncrl router: %v", err)
			}
			if bkey != "" || len(hkeys) > 0 {
				pc.Transport = netx.KeyTransport(nil, bkey, hkeys)
			}
			r, err := proxy.New(pc)
			if err != nil {
				return fail("asyncrl router: %v", err)
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			mdone, err := serveMetrics(ctx, g.stderr, cfg.Metrics.Listen, reg)
			if err != nil {
				_ = r.Shutdown(context.Background())
				return fail("asyncrl router: %v", err)
			}
			ln, err := listen(g.stderr, "router", cfg.Router.Listen)
			if err != nil {
				stop()
				<-mdone
				_ = r.Shutdown(context.Background())
				return fail("asyncrl router: %v", err)
			}
			err = serveRouter(ctx, r, ln, 10*time.Second)
			stop()
			<-mdone
			if err != nil {
				return fail("asyncrl router: %v", err)
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&cfgPath, "config", "", "run configuration `FILE`; its router section sets the policy and limits")
	fs.StringVar(&listen_, "listen", "127.0.0.1:8000", "HTTP address to serve on (off loopback, --admin-token is required)")
	fs.StringArrayVar(&engines, "engine", nil, "engine base `URL` (repeatable); default: engines.external_urls from --config")
	fs.StringVar(&policyName, "policy", "bounded_sticky", "routing policy: bounded_sticky, sticky_least_loaded, consistent_hash, round_robin or least_request")
	fs.StringVar(&token, "admin-token", "", "bearer token for /admin/ (required when --listen is not loopback)")
	fs.StringVar(&metricsAddr, "metrics-listen", "", "serve the router's Prometheus /metrics on this address (empty = off)")
	fs.StringVar(&front, "front", "loop", "HTTP front end: loop (plain requests served from event loops, one per CPU; the rest as fast), fast (the router's own HTTP/1.1 server on the proxied path, a goroutine per connection) or net_http")
	return cmd
}

// serveRouter serves r on ln until ctx ends, then shuts it down within
// grace: new requests get 503 while in-flight ones finish, then Serve
// returns.
func serveRouter(ctx context.Context, r *proxy.Router, ln net.Listener, grace time.Duration) error {
	errc := make(chan error, 1)
	go func() { errc <- r.Serve(ln) }()
	var err error
	select {
	case err = <-errc: // Serve failed before any shutdown
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	serr := r.Shutdown(sctx)
	if err == nil {
		if err = <-errc; errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
	}
	if err == nil {
		err = serr
	}
	return err
}
