package workload

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// ErrInvalidConfig wraps every config validation error.
var ErrInvalidConfig = errors.New("workload: invalid config")

// Session is one planned conversation (agentic) or episode (RL sample):
// what the client appends before each turn and how much each turn asks
// the engine to generate.
type Session struct {
	// ID is the session id, sent as X-Session-ID and to /finish_session.
	ID string
	// Group is the index of the session's group (RL workload) or its own
	// index (agentic: every conversation is its own group).
	Group int
	// Segments[t] is appended to the history before turn t: for turn 0
	// the first user message (common prefix, context, first user turn;
	// or a group's prompt), later the next user message or tool
	// observation.
	Segments [][]int32
	// Generate[t] is max_tokens of turn t, requested with ignore_eos so
	// the reply has exactly that length.
	Generate []int
	// Pause[t] is the modelled think/tool time before turn t (0 for the
	// agentic workload; tool latency for RL episodes). A driver sleeps
	// it times its time scale.
	Pause []time.Duration
}

// Turns is the number of requests the session makes.
func (s *Session) Turns() int { return len(s.Segments) }

// PlannedTokens is the session's final history length if every reply has
// its planned length (it does, with ignore_eos): the longest prompt plus
// the last reply.
func (s *Session) PlannedTokens() int {
	n := 0
	for t := range s.Segments {
		n += len(s.Segments[t]) + s.Generate[t]
	}
	return n
}

// GeneratedTokens is the sum of Generate.
func (s *Session) GeneratedTokens() int {
	n := 0
	for _, g := range s.Generate {
		n += g
	}
	return n
}

// Transcript builds a session's prompts while it is driven.
type Transcript struct {
	s       *Session
	history []int32
	turn    int
	waiting bool // a prompt was handed out and its reply not yet taken
}

// Start returns a transcript at turn 0 with an empty history.
func (s *Session) Start() *Transcript {
	return &Transcript{s: s, history: make([]int32, 0, s.PlannedTokens())}
}

// Next appends turn t's planned tokens and returns the prompt (the whole
// history; the caller must not modify it), max_tokens, the pause before
// the turn, and false once every turn is done. It panics if the previous
// prompt's reply was not given to Reply: that is a driver bug.
func (tr *Transcript) Next() (prompt []int32, maxTokens int, pause time.Duration, ok bool) {
	if tr.waiting {
		panic("workload: Transcript.Next before Reply")
	}
	if tr.turn >= len(tr.s.Segments) {
		return nil, 0, 0, false
	}
	t := tr.turn
	tr.history = append(tr.history, tr.s.Segments[t]...)
	tr.waiting = true
	return tr.history[:len(tr.history):len(tr.history)], tr.s.Generate[t], tr.s.Pause[t], true
}

// Reply appends the engine's real reply to the history and advances to the
// next turn.
func (tr *Transcript) Reply(tokens []int32) {
	if !tr.waiting {
		panic("workload: Transcript.Reply without a prompt")
	}
	tr.history = append(tr.history, tokens...)
	tr.waiting = false
	tr.turn++
}

// Turn is the index of the next turn Next will hand out.
func (tr *Transcript) Turn() int { return tr.turn }

// Tokens is the history length so far.
func (tr *Transcript) Tokens() int { return len(tr.history) }

// Vocabulary is the token-id range prompts are drawn from.
type Vocabulary struct {
	// Vocab is the model's vocabulary size (the built-in engine's
	// character tokenizer: 98). Ids are < Vocab.
	Vocab int
	// MinTokenID is the smallest id drawn, to stay clear of special ids
	// (pad 0, BOS 1, EOS 2 in the built-in tokenizer).
	MinTokenID int
}

func (v Vocabulary) validate() error {
	if v.MinTokenID < 0 || v.Vocab <= v.MinTokenID {
		return fmt.Errorf("%w: Vocab %d / MinTokenID %d: want 0 ≤ MinTokenID < Vocab", ErrInvalidConfig, v.Vocab, v.MinTokenID)
	}
	return nil
}

func (v Vocabulary) tokens(rng *rand.Rand, n int) []int32 {
	out := make([]int32, n)
	span := v.Vocab - v.MinTokenID
	for i := range out {
		out[i] = int32(v.MinTokenID + rng.IntN(span))
	}
	return out
}

// Uniform is an inclusive integer range.
type Uniform struct{ Min, Max int }

func (u Uniform) validate(name string) error {
	if u.Min < 0 || u.Max < u.Min {
		return fmt.Errorf("%w: %s [%d, %d]: want 0 ≤ Min ≤ Max", ErrInvalidConfig, name, u.Min, u.Max)
	}
	return nil
}

func (u Uniform) draw(rng *rand.Rand) int { return u.Min + rng.IntN(u.Max-u.Min+1) }

// Lognormal is a lognormal length or duration given by its mean (or its
// median) and the ratio median/mean, as vLLM's multi-turn benchmark
// configures it, with an optional cap.
type Lognormal struct {
	// Mean is E[X] (used when Median is 0).
	Mean float64
	// Median is the median; takes precedence over Mean when > 0.
	Median float64
	// MedianRatio is median/mean, in (0, 1]: 1 is a constant, smaller is
	// more skewed. σ = sqrt(2·ln(1/MedianRatio)).
	MedianRatio float64
	// Max caps a draw (0 = no cap).
	Max float64
}

func (l Lognormal) validate(name string) error {
	switch {
	case !(l.MedianRatio > 0 && l.MedianRatio <= 1):
		return fmt.Errorf("%w: %s.MedianRatio %v: want (0, 1]", ErrInvalidConfig, name, l.MedianRatio)
	// Written as !(x ≥ 0) so that NaN, which passes every `< 0`, is refused.
	case !(l.Median >= 0) || !(l.Mean >= 0) || (l.Median == 0 && l.Mean == 0):
		return fmt.Errorf("%w: %s.Mean %v / %s.Median %v: want Mean > 0 or Median > 0, neither negative", ErrInvalidConfig, name, l.Mean, name, l.Median)
	case !(l.Max >= 0):
		return fmt.Errorf("%w: %s.Max %v: want ≥ 0 (0 = no cap)", ErrInvalidConfig, name, l.Max)
	}
	return nil
}

// Params returns μ and σ of the underlying normal.
func (l Lognormal) Params() (mu, sigma float64) {
	sigma = math.Sqrt(2 * math.Log(1/l.MedianRatio))
	median := l.Median
	if median == 0 {
		median = l.Mean * l.MedianRatio
	}
	return math.Log(median), sigma
}

// Draw samples one value.
func (l Lognormal) Draw(rng *rand.Rand) float64 {
	mu, sigma := l.Params()
	x := math.Exp(mu + sigma*rng.NormFloat64())
	if l.Max > 0 && x > l.Max {
		x = l.Max
	}
	return x
}
