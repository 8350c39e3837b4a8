package main

import (
	"context"
	"net"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/asyncrl/asyncrl/engine"
	"github.com/asyncrl/asyncrl/internal/logx"
	"github.com/asyncrl/asyncrl/wiring"
)

// engineFlags are asyncrl engine's flags.
type engineFlags struct {
	Listen  string // --listen host:port
	Weights string // --weights DIR: serving checkpoint (safetensors); "" = fresh model from --seed
	Seed    int64  // --seed: initial weights when --weights is empty, and sampling
	Config  string // --config FILE: engines section (limits, latency model)
	// APIKeyFile: --api-key-file FILE, the key every route wants
	// (required off loopback); WeightRoots: --weight-roots DIR,...
	APIKeyFile  string
	WeightRoots string
	// Tokenizer: --tokenizer DIR, a Hugging Face tokenizer directory for
	// the text side (default: --weights when it holds tokenizer.json).
	Tokenizer string
}

// addEngineFlags defines the engine flags on fs; the engine wiring (and any
// command that starts engines the same way) reuses it.
func addEngineFlags(fs *pflag.FlagSet) *engineFlags {
	f := &engineFlags{}
	fs.StringVar(&f.Listen, "listen", "127.0.0.1:8001", "HTTP address to serve the vLLM-compatible API on")
	fs.StringVar(&f.Weights, "weights", "", "serving checkpoint `DIR` (safetensors): the built-in policy's, or a Hugging Face qwen3, qwen3_moe, llama or deepseek_v3 checkpoint (docs/models.md); empty = a fresh built-in policy from --seed")
	fs.Int64Var(&f.Seed, "seed", 1, "seed for fresh weights and sampling")
	fs.StringVar(&f.Config, "config", "", "run configuration `FILE`; its engines section sets limits and the latency model")
	fs.StringVar(&f.APIKeyFile, "api-key-file", "", "`FILE` holding the API key every route wants as Authorization: Bearer (vLLM --api-key); required when --listen is off loopback (default: engines.api_key_file)")
	fs.StringVar(&f.Tokenizer, "tokenizer", "", "Hugging Face tokenizer `DIR` (tokenizer.json, tokenizer_config.json) for text prompts, decoded text and chat templates (default: --weights when it holds tokenizer.json; none = the character tokenizer)")
	fs.StringVar(&f.WeightRoots, "weight-roots", "", "`DIRS` weights and LoRA adapters may be loaded from (comma-separated; a path outside is refused; default: engines.weight_roots, empty = any)")
	return f
}

// newEngineCmd: asyncrl engine — the built-in vLLM-compatible engine serving
// the built-in policy until SIGINT/SIGTERM.
func newEngineCmd(g *globals) *cobra.Command {
	var f *engineFlags
	cmd := &cobra.Command{
		Use:   "engine",
		Short: "Serve the built-in inference engine (vLLM-compatible HTTP API)",
		Long: "Serve the built-in policy, or a Hugging Face checkpoint of a supported architecture\n" +
			"(--weights, docs/models.md), over vLLM's HTTP API: /v1/completions, /v1/chat/completions,\n" +
			"/v1/models, /health, /metrics, pause/resume and the weight-update routes. The engine\n" +
			"models a GPU server's latency (the config's engines section) so routing matters.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, _, err := net.SplitHostPort(f.Listen); err != nil {
				return fail("asyncrl engine: --listen %q is not a host:port address", f.Listen)
			}
			cfg, err := loadConfig(f.Config, nil)
			if err != nil {
				return fail("asyncrl engine: %v", err)
			}
			log, err := g.logger(cmd, cfg.Log)
			if err != nil {
				return fail("asyncrl engine: %v", err)
			}
			model, err := wiring.InitialPolicy(f.Weights, uint64(f.Seed))
			if err != nil {
				return fail("asyncrl engine: %v", err)
			}
			keyFile, keyFlag := cfg.Engines.APIKeyFile, "engines.api_key_file"
			if f.APIKeyFile != "" {
				keyFile, keyFlag = f.APIKeyFile, "--api-key-file"
			}
			key, err := wiring.ReadSecret(keyFlag, keyFile)
			if err != nil {
				return fail("asyncrl engine: %v", err)
			}
			roots := cfg.Engines.WeightRoots
			if r := splitList(f.WeightRoots); len(r) > 0 {
				roots = r
			}
			opts := append([]engine.Option{engine.WithLoader(wiring.LoadPolicy), engine.WithAdapterLoader(wiring.LoadAdapter), engine.WithLogger(logx.For(log, "engine")),
				engine.WithAPIKey(key), engine.WithWeightRoots(roots...)}, wiring.EngineQuantize(cfg.Engines.Quantize)...)
			tokDir := f.Tokenizer
			if tokDir == "" {
				tokDir = wiring.TokenizerIn(f.Weights)
			}
			tokOpts, err := wiring.EngineTokenizer(tokDir, model)
			if err != nil {
				return fail("asyncrl engine: --tokenizer: %v", err)
			}
			opts = append(opts, tokOpts...)
			eng, err := engine.New(wiring.EngineConfig(cfg.Engines, cfg.Engines.ServedModelName, uint64(f.Seed)), model, opts...)
			if err != nil {
				return fail("asyncrl engine: %v", err)
			}
			if err := eng.CheckListen(f.Listen); err != nil {
				eng.Close()
				return fail("asyncrl engine: --listen %s: %v", f.Listen, err)
			}
			ln, err := listen(g.stderr, "engine", f.Listen)
			if err != nil {
				eng.Close()
				return fail("asyncrl engine: %v", err)
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			err = eng.Serve(ctx, ln)
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if serr := eng.Shutdown(sctx); err == nil {
				err = serr
			}
			if err != nil {
				return fail("asyncrl engine: %v", err)
			}
			return nil
		},
	}
	f = addEngineFlags(cmd.Flags())
	return cmd
}
