package tasks

import (
	"fmt"
	"math/rand/v2"
)

// RandomAction is the text of a uniformly random policy: 1..maxLen
// characters (uniform length), each uniform over printable ASCII.
func RandomAction(rng *rand.Rand, maxLen int) string {
	b := make([]byte, 1+rng.IntN(maxLen))
	for i := range b {
		b[i] = byte(0x20 + rng.IntN(0x7F-0x20))
	}
	return string(b)
}

// Policy produces the model's text for one turn given the conversation so
// far (the prompt, then each action followed by the env's reply).
type Policy func(conversation string) string

// Episode runs one episode of t on env with policy and returns the score
// (the sum of step rewards) and the number of turns taken.
func Episode(t Task, env Env, p Prompt, policy Policy) (score float64, turns int, err error) {
	conv, err := env.Reset(p)
	if err != nil {
		return 0, 0, err
	}
	for turns < t.MaxTurns() {
		action := policy(conv)
		obs, r, done, err := env.Step(action)
		if err != nil {
			return score, turns, fmt.Errorf("tasks: %s turn %d: %w", t.Name(), turns+1, err)
		}
		turns++
		score += r
		conv += action + obs
		if done {
			return score, turns, nil
		}
	}
	return score, turns, fmt.Errorf("tasks: %s: episode not done after MaxTurns=%d", t.Name(), t.MaxTurns())
}

// GroupStats summarises episodes run in GRPO-style groups (one prompt, many
// samples).
type GroupStats struct {
	Episodes int
	Groups   int
	// MeanReward is the mean episode score.
	MeanReward float64
	// NonZero is the fraction of episodes with a score > 0.
	NonZero float64
	// GroupsWithVariance is the fraction of groups whose scores are not all
	// equal: the groups a dynamic-sampling filter keeps.
	GroupsWithVariance float64
	// MaxReward is the best episode score seen.
	MaxReward float64
}

// MeasureGroups runs groups × groupSize episodes of t, each group on one
// sampled prompt, with the policy that newPolicy makes per episode. All
// randomness comes from rng, so the result is reproducible.
func MeasureGroups(t Task, groups, groupSize int, rng *rand.Rand, newPolicy func(rng *rand.Rand) Policy) (GroupStats, error) {
	st := GroupStats{Groups: groups}
	var sum float64
	var nonZero, varied int
	scores := make([]float64, groupSize)
	for g := 0; g < groups; g++ {
		p := t.Sample(rng)
		for i := range scores {
			s, _, err := Episode(t, t.NewEnv(), p, newPolicy(rng))
			if err != nil {
				return st, err
			}
			scores[i] = s
			sum += s
			st.MaxReward = max(st.MaxReward, s)
			if s > 0 {
				nonZero++
			}
		}
		for _, s := range scores[1:] {
			if s != scores[0] {
				varied++
				break
			}
		}
	}
	st.Episodes = groups * groupSize
	if st.Episodes > 0 {
		st.MeanReward = sum / float64(st.Episodes)
		st.NonZero = float64(nonZero) / float64(st.Episodes)
		st.GroupsWithVariance = float64(varied) / float64(groups)
	}
	return st, nil
}

// MeasureRandomPolicy is MeasureGroups with the uniformly random policy
// (RandomAction with t.MaxTokensPerTurn()): how much learning signal a
// randomly initialised model would get from t.
func MeasureRandomPolicy(t Task, groups, groupSize int, rng *rand.Rand) (GroupStats, error) {
	return MeasureGroups(t, groups, groupSize, rng, func(rng *rand.Rand) Policy {
		n := t.MaxTokensPerTurn()
		return func(string) string { return RandomAction(rng, n) }
	})
}
