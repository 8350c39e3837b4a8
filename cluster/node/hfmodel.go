package node

import (
	"fmt"

	"github.com/asyncrl/asyncrl/cluster/weightsync"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/engine"
	"github.com/asyncrl/asyncrl/model/transformer"
	"github.com/asyncrl/asyncrl/wiring"
)

// A run on a Hugging Face model (config model section, docs/models.md):
// the checkpoint directory is version 0, the trainer child (the PyTorch
// worker, trainer.backend exec) trains it as model kind hf and writes
// each version as a complete HF directory, the built-in engines serve it
// with model/transformer, the rollouts tokenise with its tokenizer.

// resolveModel finds or creates the run's Hugging Face checkpoint
// (wiring.ModelDir) and, with R3 on and its shape left to the model,
// fills rollout.routed_experts from its config.json.
func (n *Node) resolveModel() error {
	dir, created, err := wiring.ModelDir(n.cfg)
	if err != nil || dir == "" {
		if err != nil {
			return fmt.Errorf("%w: %w", ErrConfig, err)
		}
		return nil
	}
	if created {
		// the directory wiring.ModelDir wrote, whatever init_checkpoint
		// the run trains from below
		n.opts.Logger.Info().Str("dir", dir).Str("preset", string(n.cfg.Model.Preset)).Int64("seed", n.cfg.Run.Seed).Msg("model: random-initialised checkpoint written")
	}
	n.tok = wiring.TokenizerIn(dir)
	if ic := n.cfg.Trainer.InitCheckpoint; ic != "" {
		// an SFT run's serving checkpoint (or any other of the same
		// architecture): what the child trains and the engines serve
		mt, err := transformer.ModelType(ic)
		if err != nil {
			return fmt.Errorf("%w: trainer.init_checkpoint: %w", ErrConfig, err)
		}
		if want, _ := transformer.ModelType(dir); mt != want {
			return fmt.Errorf("%w: trainer.init_checkpoint %s is a %s checkpoint but the model is %s", ErrConfig, ic, mt, want)
		}
		dir = ic
		if t := wiring.TokenizerIn(ic); t != "" {
			n.tok = t
		}
	}
	n.hf = dir
	c, err := transformer.ReadConfig(dir)
	if err != nil {
		return fmt.Errorf("%w: model.path: %w", ErrConfig, err)
	}
	n.opts.Logger.Debug().Str("dir", dir).Str("arch", string(c.Arch)).Msg("model: serving and training from")
	if err := n.modelRoutes(c); err != nil {
		return err
	}
	if err := n.checkHFResume(); err != nil {
		return err
	}
	if n.cfg.Publisher.Transport == config.TransportDataPlane {
		return fmt.Errorf("%w: publisher.transport dataplane ships the built-in policy only; a Hugging Face model publishes through publisher.store (the default transport)", ErrConfig)
	}
	return nil
}

// modelRoutes is R3's shape for the run's model: every decoder layer
// (the engine's layout), top-k and experts from config.json; a shape the
// config gives must equal it.
func (n *Node) modelRoutes(c *transformer.Config) error {
	r := &n.cfg.Rollout.RoutedExperts
	if !r.Enabled {
		return nil
	}
	m, err := transformer.Load(n.hf)
	if err != nil {
		return fmt.Errorf("%w: model.path: %w", ErrConfig, err)
	}
	layers, topK, experts := m.RouteShape()
	if layers == 0 {
		return fmt.Errorf("%w: rollout.routed_experts: %s is a dense %s model, which routes nothing: turn routed_experts off or use a mixture-of-experts model (qwen3_moe, deepseek_v3)", ErrConfig, n.hf, c.Arch)
	}
	want := config.RoutedExpertsConfig{Enabled: true, Layers: layers, TopK: topK, NumExperts: experts}
	if *r == (config.RoutedExpertsConfig{Enabled: true}) {
		*r = want
		return nil
	}
	if *r != want {
		return fmt.Errorf("%w: rollout.routed_experts: layers %d, top_k %d, num_experts %d but %s routes over %d layers, top-%d of %d experts: drop the three fields to take the model's", ErrConfig, r.Layers, r.TopK, r.NumExperts, n.hf, layers, topK, experts)
	}
	return nil
}

// hfWeights is the directory version 0's weights of a Hugging Face model
// come from: on a resumed cluster term the trainer child's durable state
// (Options.ExecCheckpoint — rank 0 writes config.json and the F32
// model.safetensors in HF layout beside the optimiser shards), else the
// checkpoint itself. The tokenizer is always the checkpoint's (n.hf,
// model.tokenizer's copy), never the state's.
func (n *Node) hfWeights() string {
	if n.opts.ExecCheckpoint != "" {
		return n.opts.ExecCheckpoint
	}
	return n.hf
}

// checkHFResume refuses a resume state of another architecture than the
// run's model before anything starts (the engines would serve it and the
// child train it as the wrong model).
func (n *Node) checkHFResume() error {
	if n.hf == "" || n.opts.ExecCheckpoint == "" {
		return nil
	}
	got, err := transformer.ModelType(n.opts.ExecCheckpoint)
	if err != nil {
		return fmt.Errorf("%w: the trainer child's resume state %s has no Hugging Face config.json (was it written by a run on the built-in policy?): %w", ErrConfig, n.opts.ExecCheckpoint, err)
	}
	if want, _ := transformer.ModelType(n.hf); got != want {
		return fmt.Errorf("%w: the trainer child's resume state %s holds a %s model but this run's model (%s) is %s: resume it with the model section it was trained with", ErrConfig, n.opts.ExecCheckpoint, got, n.hf, want)
	}
	return nil
}

// hfInitialWeights is version 0 of a Hugging Face model: with delta sync
// the publisher's base (the checkpoint itself, or its quantised copy with
// publisher.quantize), and the model the built-in engines start with —
// loaded once, shared by every engine of the process.
func (n *Node) hfInitialWeights() (baseDir string, initial engine.Model, err error) {
	src := n.hfWeights()
	if n.cfg.Publisher.Mode == config.PublishDelta {
		if baseDir, err = weightsync.SaveBaseDir(n.cfg, src); err != nil {
			return "", nil, err
		}
		src = baseDir
	}
	if n.cfg.Engines.Count == 0 {
		return baseDir, nil, nil
	}
	if initial, err = wiring.LoadPolicy(src); err != nil {
		return "", nil, fmt.Errorf("node: initial weights %s: %w", src, err)
	}
	return baseDir, initial, nil
}
