package config

import "errors"

// Config describes a whole asyncrl run; one YAML file holds it.
type Config struct {
	// Run identifies the run and sets its length, seed and directories.
	Run RunConfig `yaml:"run" doc:"run identity, length and directories"`
	// Bus is the NATS control plane.
	Bus BusConfig `yaml:"bus" doc:"NATS message bus"`
	// Engines are the inference engines.
	Engines EnginesConfig `yaml:"engines" doc:"inference engines (built-in and external)"`
	// Router spreads requests over the engines.
	Router RouterConfig `yaml:"router" doc:"session-aware router in front of the engines"`
	// Rollout turns prompts into groups of trajectories.
	Rollout RolloutConfig `yaml:"rollout" doc:"rollout actors: task, group size, sampling"`
	// Filter is dynamic sampling.
	Filter FilterConfig `yaml:"filter" doc:"dynamic sampling of groups"`
	// Trainer is the fully async trainer.
	Trainer TrainerConfig `yaml:"trainer" doc:"fully async trainer: staleness, loss, microbatching"`
	// Staleness says how a group's staleness is measured.
	Staleness StalenessConfig `yaml:"staleness" doc:"how the staleness bound trainer.max_staleness_steps is measured"`
	// Publisher ships new weights to the engines.
	Publisher PublisherConfig `yaml:"publisher" doc:"weight publisher"`
	// Cluster places this node in a cluster.
	Cluster ClusterConfig `yaml:"cluster" doc:"multi-node membership"`
	// Log configures logging.
	Log LogConfig `yaml:"log" doc:"logging"`
	// Metrics configures the Prometheus endpoint.
	Metrics MetricsConfig `yaml:"metrics" doc:"Prometheus metrics endpoint"`
	// Tinker configures the Tinker-compatible API server.
	Tinker TinkerConfig `yaml:"tinker" doc:"Tinker-compatible API server (asyncrl tinker serve)"`
	// SFT is supervised fine-tuning (`asyncrl sft`).
	SFT SFTConfig `yaml:"sft" doc:"supervised fine-tuning (asyncrl sft): data, step size, packing, optimiser, checkpoints"`
	// Policy is the built-in policy's shape (mixture of experts).
	Policy PolicyConfig `yaml:"policy" doc:"built-in policy shape: mixture of experts (experts, top_k)"`
	// Model is the model the run trains: the built-in policy or a Hugging
	// Face checkpoint (docs/models.md).
	Model ModelConfig `yaml:"model" doc:"the model the run trains and serves: the built-in policy (default) or a Hugging Face checkpoint (qwen3, qwen3_moe, llama, deepseek_v3; docs/models.md)"`
}

// Default returns the shipped defaults: a short single-node run of the tiny
// built-in policy that `make run` finishes on 2 CPU cores (see each
// Default… constructor for why its values were chosen).
func Default() Config {
	return Config{
		Run:       DefaultRun(),
		Bus:       DefaultBus(),
		Engines:   DefaultEngines(),
		Router:    DefaultRouter(),
		Rollout:   DefaultRollout(),
		Filter:    DefaultFilter(),
		Trainer:   DefaultTrainer(),
		Staleness: DefaultStaleness(),
		Publisher: DefaultPublisher(),
		Cluster:   DefaultCluster(),
		Log:       DefaultLog(),
		Metrics:   DefaultMetrics(),
		Tinker:    DefaultTinker(),
		SFT:       DefaultSFT(),
		Policy:    DefaultPolicy(),
		Model:     DefaultModel(),
	}
}

// Validate checks every section and returns all problems at once (joined,
// one per line); each is an *Error naming the field and what is allowed.
func (c Config) Validate() error {
	var errs []*Error
	for _, err := range []error{
		c.Run.Validate(), c.Bus.Validate(), c.Engines.Validate(), c.Router.Validate(),
		c.Rollout.Validate(), c.Filter.Validate(), c.Trainer.Validate(), c.Staleness.Validate(),
		c.Publisher.Validate(), c.Cluster.Validate(), c.Log.Validate(), c.Metrics.Validate(),
		c.Tinker.Validate(),
		c.SFT.Validate(),
		c.Policy.Validate(), c.validatePolicyRoutes(), c.validateQuantizeOnce(), c.validateChat(),
		c.Model.Validate(), c.validateModel(), c.validateRankBatch(),
	} {
		errs = append(errs, flatten(err)...)
	}
	return joinErrors(errs)
}

// flatten lists the *Error values inside err (a single *Error or a join of
// them); any other error is kept as an ErrInvalid with its message.
func flatten(err error) []*Error {
	if err == nil {
		return nil
	}
	if multi, ok := err.(interface{ Unwrap() []error }); ok {
		var out []*Error
		for _, e := range multi.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	var e *Error
	if errors.As(err, &e) {
		return []*Error{e}
	}
	return []*Error{{Msg: err.Error(), Kind: ErrInvalid}}
}
