package node

import (
	"context"
	"fmt"
	"time"

	"github.com/asyncrl/asyncrl/cluster/weightsync"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/wiring"
)

// checkExternal refuses engines.external where the run cannot drive them:
// they take versions on the delta publisher's acknowledged path (through
// the object store, not the in-memory data plane), and the built-in
// policy has no LoRA adapters to publish.
func checkExternal(cfg config.Config, remote bool) error {
	if len(cfg.Engines.External) == 0 {
		return nil
	}
	switch {
	case remote:
		return fmt.Errorf("%w: engines.external: a cluster node's engines are its own (engine role); list external engines on a single-node run", ErrConfig)
	case cfg.Publisher.Mode != config.PublishDelta:
		return fmt.Errorf("%w: engines.external need publisher.mode delta (mode %s swaps built-in engines in memory)", ErrConfig, cfg.Publisher.Mode)
	case cfg.Publisher.Transport == config.TransportDataPlane:
		return fmt.Errorf("%w: engines.external need publisher.transport store (the data plane swaps built-in engines in memory)", ErrConfig)
	}
	if tok := cfg.Engines.External[0].Tokenizer; tok != "" && cfg.Trainer.Backend == config.BackendBuiltin {
		return fmt.Errorf("%w: engines.external[0].tokenizer: the built-in trainer trains the built-in policy (its character vocabulary); a model with %s needs trainer.backend exec or remote", ErrConfig, tok)
	}
	for i, e := range cfg.Engines.External {
		if e.Kind == config.EngineSGLang && cfg.Trainer.PauseMode == config.PauseWait {
			return fmt.Errorf("%w: engines.external[%d]: SGLang's /pause_generation has no wait mode (abort or in_place); set trainer.pause_mode keep or abort", ErrConfig, i)
		}
		if e.EffectiveLoad() == config.LoadLoRA {
			return fmt.Errorf("%w: engines.external[%d].weight_load: lora needs a LoRA publisher; the built-in policy has no adapters (use delta or full)", ErrConfig, i)
		}
	}
	return nil
}

// driveEngines wraps the node's engines and engines.external in drivers,
// checks each external engine's routes before anything depends on them,
// and loads the run's version 0 into them (they start with weights of
// their own).
func (n *Node) driveEngines(ctx context.Context) error {
	key, err := wiring.ReadSecret("engines.api_key_file", n.cfg.Engines.APIKeyFile)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	for _, le := range n.engines {
		d, err := weightsync.DriveLocal(le, n.cfg.Engines.ServedModelName, key)
		if err != nil {
			return err
		}
		n.driven = append(n.driven, d)
	}
	for i, e := range n.cfg.Engines.External {
		d, err := weightsync.DriveExternal(i, e, n.cfg.Engines.ServedModelName)
		if err != nil {
			return fmt.Errorf("%w: engines.external[%d]: %w", ErrConfig, i, err)
		}
		// Two minutes: the checks run a one-token generation and a logprobs
		// probe, which a cold engine (first request after start) may take a
		// while to answer.
		pctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err = d.Preflight(pctx, weightsync.NeedsOf(n.cfg, e))
		cancel()
		if err != nil {
			return fmt.Errorf("%w: engines.external[%d]: %w", ErrConfig, i, err)
		}
		n.driven = append(n.driven, d)
	}
	return nil
}
