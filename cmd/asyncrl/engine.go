package main

import (
	"net"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// engineFlags are asyncrl engine's flags.
type engineFlags struct {
	Listen  string // --listen host:port
	Weights string // --weights DIR: serving checkpoint (safetensors); "" = fresh model from --seed
	Seed    int64  // --seed: initial weights when --weights is empty, and sampling
	Config  string // --config FILE: engines section (limits, latency model)
}

// addEngineFlags defines the engine flags on fs; the engine wiring (and any
// command that starts engines the same way) reuses it.
func addEngineFlags(fs *pflag.FlagSet) *engineFlags {
	f := &engineFlags{}
	fs.StringVar(&f.Listen, "listen", "127.0.0.1:8001", "HTTP address to serve the vLLM-compatible API on")
	fs.StringVar(&f.Weights, "weights", "", "serving checkpoint `DIR` (safetensors); empty = a fresh model from --seed")
	fs.Int64Var(&f.Seed, "seed", 1, "seed for fresh weights and sampling")
	fs.StringVar(&f.Config, "config", "", "run configuration `FILE`; its engines section sets limits and the latency model")
	return f
}

// newEngineCmd: asyncrl engine. Flags are parsed and checked, the config
// loaded; serving is not built yet (issue 3).
func newEngineCmd(g *globals) *cobra.Command {
	var f *engineFlags
	cmd := &cobra.Command{
		Use:   "engine",
		Short: "Serve the built-in inference engine (vLLM-compatible HTTP API) (not built yet)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, _, err := net.SplitHostPort(f.Listen); err != nil {
				return fail("asyncrl engine: --listen %q is not a host:port address", f.Listen)
			}
			cfg, err := loadConfig(f.Config, nil)
			if err != nil {
				return fail("asyncrl engine: %v", err)
			}
			if _, err := g.logger(cmd, cfg.Log); err != nil {
				return fail("asyncrl engine: %v", err)
			}
			return notBuilt("engine", 3)
		},
	}
	f = addEngineFlags(cmd.Flags())
	return cmd
}
