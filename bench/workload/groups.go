package workload

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// GroupConfig is the RL group workload of workloads.md: G prompts, each
// sampled n times (a GRPO group); each sample is a multi-turn episode
// whose turns alternate an assistant action and a tool observation.
type GroupConfig struct {
	// Groups is G, the number of prompts.
	Groups int
	// Samples is n, episodes per prompt (default 8). The n episodes of a
	// group share the prompt exactly, so they share its prefix cache.
	Samples int
	// Prompt is the prompt length per group.
	Prompt Uniform
	// Turns is the number of turns (requests) per episode (10–40), drawn
	// per episode: samples of one prompt diverge.
	Turns Uniform
	// Observation is the length of each tool observation appended before
	// turns after the first.
	Observation Uniform
	// Action is max_tokens of each turn (requested exactly).
	Action Uniform
	// ToolLatency is the modelled tool-call time before turns after the
	// first: lognormal, median 200 ms. A driver scales it by its time
	// scale like every other modelled duration.
	ToolLatency Lognormal
	// Vocabulary is the token-id range of prompts and observations.
	Vocabulary
	// IDPrefix starts every episode id ("grp-" → grp-03-s5).
	IDPrefix string
}

// DefaultGroups returns G groups × 8 samples of 10–40 turns: prompts of
// 1,000–2,000 tokens, observations of 50–200, actions of 80–120, tool
// latency lognormal with median 200 ms (median/mean 0.8), capped at 5 s.
func DefaultGroups(groups int) GroupConfig {
	return GroupConfig{
		Groups:      groups,
		Samples:     8,
		Prompt:      Uniform{Min: 1000, Max: 2000},
		Turns:       Uniform{Min: 10, Max: 40},
		Observation: Uniform{Min: 50, Max: 200},
		Action:      Uniform{Min: 80, Max: 120},
		ToolLatency: Lognormal{Median: float64(200 * time.Millisecond), MedianRatio: 0.8, Max: float64(5 * time.Second)},
		Vocabulary:  Vocabulary{Vocab: 98, MinTokenID: 3},
		IDPrefix:    "grp-",
	}
}

// Validate names the first invalid field.
func (c GroupConfig) Validate() error {
	switch {
	case c.Groups < 1:
		return fmt.Errorf("%w: Groups %d: want ≥ 1", ErrInvalidConfig, c.Groups)
	case c.Samples < 1:
		return fmt.Errorf("%w: Samples %d: want ≥ 1", ErrInvalidConfig, c.Samples)
	case c.Prompt.Min < 1:
		return fmt.Errorf("%w: Prompt.Min %d: want ≥ 1", ErrInvalidConfig, c.Prompt.Min)
	case c.Turns.Min < 1:
		return fmt.Errorf("%w: Turns.Min %d: want ≥ 1", ErrInvalidConfig, c.Turns.Min)
	case c.Action.Min < 1:
		return fmt.Errorf("%w: Action.Min %d: want ≥ 1", ErrInvalidConfig, c.Action.Min)
	}
	for _, u := range []struct {
		n string
		u Uniform
	}{{"Prompt", c.Prompt}, {"Turns", c.Turns}, {"Observation", c.Observation}, {"Action", c.Action}} {
		if err := u.u.validate(u.n); err != nil {
			return err
		}
	}
	if err := c.ToolLatency.validate("ToolLatency"); err != nil {
		return err
	}
	return c.Vocabulary.validate()
}

// Groups generates G·n episodes, group-major (the n samples of group 0
// first). Every sample of a group starts with the same prompt slice
// contents; turn counts, observations, actions and tool latencies are
// drawn per episode.
func Groups(cfg GroupConfig, rng *rand.Rand) ([]Session, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	gw, sw := len(fmt.Sprint(cfg.Groups-1)), len(fmt.Sprint(cfg.Samples-1))
	out := make([]Session, 0, cfg.Groups*cfg.Samples)
	for g := range cfg.Groups {
		prompt := cfg.tokens(rng, cfg.Prompt.draw(rng))
		for k := range cfg.Samples {
			turns := cfg.Turns.draw(rng)
			s := Session{
				ID:       fmt.Sprintf("%s%0*d-s%0*d", cfg.IDPrefix, gw, g, sw, k),
				Group:    g,
				Segments: make([][]int32, turns),
				Generate: make([]int, turns),
				Pause:    make([]time.Duration, turns),
			}
			for t := range turns {
				if t == 0 {
					s.Segments[0] = append([]int32(nil), prompt...)
				} else {
					s.Segments[t] = cfg.tokens(rng, cfg.Observation.draw(rng))
					s.Pause[t] = time.Duration(cfg.ToolLatency.Draw(rng))
				}
				s.Generate[t] = cfg.Action.draw(rng)
			}
			out = append(out, s)
		}
	}
	return out, nil
}
