package weightsync

import (
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/engine/driver"
)

// NeedsOf is what a run with config c asks of the external engine e: the
// input of driver.Check for the run's preflight and for `asyncrl engines
// check --config`, so both grade the engine against the same needs.
//
//   - Model: engines.served_model_name;
//   - PauseMode: trainer.pause_mode (the mode every weight swap pauses with);
//   - WeightLoad: e's weight_load (its kind's default when left out);
//     LoRA when that is lora or publisher.mode is lora;
//   - Routes: rollout.routed_experts.enabled; MultiTurn unless
//     rollout.max_turns is 1 (0 leaves it to the task, which may take
//     several);
//   - SupportTopK: rollout.support_from_logprobs.
func NeedsOf(c config.Config, e config.ExternalEngine) driver.Needs {
	load := e.EffectiveLoad()
	return driver.Needs{
		Model:       c.Engines.ServedModelName,
		PauseMode:   driver.PauseMode(c.Trainer.PauseMode),
		WeightLoad:  string(load),
		LoRA:        load == config.LoadLoRA || c.Publisher.Mode == config.PublishLoRA,
		Routes:      c.Rollout.RoutedExperts.Enabled,
		MultiTurn:   c.Rollout.MaxTurns != 1,
		SupportTopK: c.Rollout.SupportFromLogprobs,
	}
}
