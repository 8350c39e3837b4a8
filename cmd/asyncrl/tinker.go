package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/asyncrl/asyncrl/internal/logx"
	"github.com/asyncrl/asyncrl/tinker/server"
)

// newTinkerCmd: asyncrl tinker serve — the Tinker-compatible API server.
func newTinkerCmd(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "tinker",
		Short: "Tinker-compatible training and sampling API (docs/tinker.md)",
		Args:  cobra.NoArgs,
	}
	var cfgPath, listenAddr, apiKey string
	serve := &cobra.Command{
		Use:   "serve",
		Short: "Serve the Tinker API over the built-in trainer and the engines",
		Long: "Serve the Tinker REST API (routes under /api/v1/, JSON bodies as the tinker SDK ≤ 0.24.1\n" +
			"sends them) over the built-in Go trainer and vLLM-compatible engines: built-in engines\n" +
			"started in this process (engines section) or tinker.engine_urls. Point the SDK at it with\n" +
			"TINKER_BASE_URL=http://127.0.0.1:8100. Training futures persist in JetStream under\n" +
			"tinker.data_dir. A non-loopback --listen needs --api-key (or ASYNCRL_TINKER_API_KEY).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cfgPath, nil)
			if err != nil {
				return fail("asyncrl tinker serve: %v", err)
			}
			log, err := g.logger(cmd, cfg.Log)
			if err != nil {
				return fail("asyncrl tinker serve: %v", err)
			}
			if apiKey == "" {
				apiKey = os.Getenv("ASYNCRL_TINKER_API_KEY")
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			r, err := server.Start(ctx, cfg, server.Options{Listen: listenAddr, APIKey: apiKey, Log: logx.For(log, "tinker")})
			if err != nil {
				return fail("asyncrl tinker serve: %v", err)
			}
			defer r.Close()
			fmt.Fprintf(g.stderr, "asyncrl tinker: listening on %s (TINKER_BASE_URL=%s)\n", r.URL, r.URL)
			select {
			case <-ctx.Done():
				return nil
			case err := <-r.Done():
				return fail("asyncrl tinker serve: %v", err)
			}
		},
	}
	serve.Flags().StringVar(&cfgPath, "config", "", "run configuration `FILE` (tinker, engines, bus, run sections)")
	serve.Flags().StringVar(&listenAddr, "listen", "", "API address host:port (default tinker.listen, 127.0.0.1:8100)")
	serve.Flags().StringVar(&apiKey, "api-key", "", "require this X-API-Key on every route but healthz (mandatory off loopback; env ASYNCRL_TINKER_API_KEY)")
	root.AddCommand(serve)
	return root
}
