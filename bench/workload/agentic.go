package workload

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// AgenticConfig is the multi-turn agentic workload of workloads.md.
type AgenticConfig struct {
	// Conversations is C, the number of conversations (all run
	// concurrently when driven without a request rate).
	Conversations int
	// Turns is T, user turns per conversation (40 for the agentic
	// benchmark; vLLM's default is 6–9).
	Turns int
	// PrefixTokens is the common prefix every first user message starts
	// with (2,000 agentic; 500 in vLLM's config).
	PrefixTokens int
	// Context is the per-conversation context after the prefix: lognormal,
	// mean 1,000, capped at 5,000.
	Context Lognormal
	// User is the length of each user turn (uniform 120–160).
	User Uniform
	// Assistant is the length requested for each assistant turn (uniform
	// 80–120, exact with ignore_eos).
	Assistant Uniform
	// Vocabulary is the token-id range of prompts.
	Vocabulary
	// IDPrefix starts every conversation id ("conv-" → conv-0007).
	IDPrefix string
}

// DefaultAgentic returns the 40-turn agentic workload with C conversations:
// 2,000-token common prefix, lognormal context (mean 1,000, median/mean
// 0.85, cap 5,000), user turns 120–160, assistant turns 80–120, ids in
// [3, 98) (the built-in engine's vocabulary without its special ids).
func DefaultAgentic(conversations int) AgenticConfig {
	return AgenticConfig{
		Conversations: conversations,
		Turns:         40,
		PrefixTokens:  2000,
		Context:       Lognormal{Mean: 1000, MedianRatio: 0.85, Max: 5000},
		User:          Uniform{Min: 120, Max: 160},
		Assistant:     Uniform{Min: 80, Max: 120},
		Vocabulary:    Vocabulary{Vocab: 98, MinTokenID: 3},
		IDPrefix:      "conv-",
	}
}

// Validate names the first invalid field.
func (c AgenticConfig) Validate() error {
	switch {
	case c.Conversations < 1:
		return fmt.Errorf("%w: Conversations %d: want ≥ 1", ErrInvalidConfig, c.Conversations)
	case c.Turns < 1:
		return fmt.Errorf("%w: Turns %d: want ≥ 1", ErrInvalidConfig, c.Turns)
	case c.PrefixTokens < 0:
		return fmt.Errorf("%w: PrefixTokens %d: want ≥ 0", ErrInvalidConfig, c.PrefixTokens)
	case c.Assistant.Min < 1:
		return fmt.Errorf("%w: Assistant.Min %d: want ≥ 1 (a request generates at least one token)", ErrInvalidConfig, c.Assistant.Min)
	}
	if err := c.Context.validate("Context"); err != nil {
		return err
	}
	if err := c.User.validate("User"); err != nil {
		return err
	}
	if err := c.Assistant.validate("Assistant"); err != nil {
		return err
	}
	return c.Vocabulary.validate()
}

// Agentic generates the conversations. The first user message of every
// conversation starts with the same PrefixTokens ids, then the
// conversation's context, then its first user turn; later segments are
// single user turns. Draw order is fixed (prefix, then per conversation:
// context length, context, then per turn: user length, user tokens,
// assistant length), so a seed names the workload.
func Agentic(cfg AgenticConfig, rng *rand.Rand) ([]Session, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	prefix := cfg.tokens(rng, cfg.PrefixTokens)
	width := len(fmt.Sprint(cfg.Conversations - 1))
	out := make([]Session, cfg.Conversations)
	for i := range out {
		ctx := cfg.tokens(rng, int(cfg.Context.Draw(rng)+0.5))
		s := Session{
			ID:       fmt.Sprintf("%s%0*d", cfg.IDPrefix, width, i),
			Group:    i,
			Segments: make([][]int32, cfg.Turns),
			Generate: make([]int, cfg.Turns),
			Pause:    make([]time.Duration, cfg.Turns),
		}
		for t := range cfg.Turns {
			user := cfg.tokens(rng, cfg.User.draw(rng))
			if t == 0 {
				first := make([]int32, 0, len(prefix)+len(ctx)+len(user))
				first = append(append(append(first, prefix...), ctx...), user...)
				user = first
			}
			s.Segments[t] = user
			s.Generate[t] = cfg.Assistant.draw(rng)
		}
		out[i] = s
	}
	return out, nil
}

// WorkingSet is the number of distinct tokens a set of sessions puts in a
// prefix cache when every session runs to the end: the prefix of length
// sharedPrefix common to all sessions once, the first segment's common
// prefix within each Group (the samples of a GRPO group share their
// prompt) once per group, plus everything else. It sizes KV capacity
// relative to the sessions routed to a replica.
func WorkingSet(sessions []Session, sharedPrefix int) int {
	if len(sessions) == 0 {
		return 0
	}
	n := sharedPrefix
	first := map[int][]int32{} // group → common prefix of its first segments
	members := map[int]int{}
	for i := range sessions {
		s := &sessions[i]
		n += s.PlannedTokens() - sharedPrefix
		seg := s.Segments[0]
		if p, ok := first[s.Group]; ok {
			k := 0
			for k < len(p) && k < len(seg) && p[k] == seg[k] {
				k++
			}
			first[s.Group] = p[:k]
		} else {
			first[s.Group] = seg
		}
		members[s.Group]++
	}
	for g, p := range first {
		if shared := len(p) - sharedPrefix; shared > 0 {
			n -= (members[g] - 1) * shared
		}
	}
	return n
}
