package rollout

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/asyncrl/asyncrl/model/tokenizer"
	"github.com/asyncrl/asyncrl/tasks"
	"github.com/asyncrl/asyncrl/tasks/chatenv"
)

// ErrAborted wraps the reason an episode was given up.
var ErrAborted = errors.New("rollout: episode aborted")

// EpisodeConfig configures one episode.
type EpisodeConfig struct {
	// MaxTurns caps the turns; 0 uses the task's MaxTurns.
	MaxTurns int
	// MaxTokens caps the tokens generated per turn; 0 uses the task's
	// MaxTokensPerTurn.
	MaxTokens int
	// MaxSeqLen is the model's context (prompt + all turns); the episode
	// ends when it is full.
	MaxSeqLen int
	// Sampling parameters sent with every call.
	Temperature, TopP float64
	TopK              int
	// TurnTimeout bounds one generation call.
	TurnTimeout time.Duration
	// TurnAttempts is how many calls of one turn may fail (error, timeout,
	// or an abort that produced nothing) before the episode is aborted.
	TurnAttempts int
	// RetryBackoff is the pause before the k-th retry is k·RetryBackoff.
	RetryBackoff time.Duration
	// SupportLogprobs makes the support-normalised logprobs
	// (Episode.SupportLogprobs, the engine's output_support_logprobs) the
	// trajectory's logprobs when packed: set it when the trainer has
	// normalize_over_support, so both sides of its ratio are normalised
	// over the same candidates. An answer with support sets but without
	// support logprobs (an engine that does not compute them) then fails
	// like a malformed answer — retried, and the episode aborted if it
	// persists — instead of yielding logprobs the trainer cannot compare.
	SupportLogprobs bool
	// Routes, when set, asks every call for the routed experts (R3) of the
	// positions the trajectory does not hold yet (routed_experts_prompt_start
	// = rows held) and appends the answer's rows: the episode's routes are
	// the concatenation of its turns' rows (Episode.Routes).
	Routes RouteSpec
	// Vocab turns text into the model's tokens and back; nil is the
	// built-in policy's character vocabulary (BuiltinVocab).
	Vocab Vocabulary
	// Chat, when set (rollout.chat_template), makes every episode a chat
	// conversation: the first observation becomes the templated prompt and
	// every later one the tokens the template puts after the model's turn
	// (see Chat). Vocab.Prefix and Vocab.Encode are then not used for
	// context; Vocab still decodes the model's text for the environment.
	Chat ChatFormat
	// ToolFormat is how the model writes tool calls in chat environments
	// (chatenv.ParseToolCalls); "" parses none.
	ToolFormat chatenv.ToolFormat
	// EnvTimeout bounds each Reset and Step of a chat environment (0 = no
	// bound but the run's); past it the episode is aborted (ErrEnvTimeout).
	EnvTimeout time.Duration
}

// ChatFormat starts one chat conversation per episode
// (model/chattemplate.Tokenizer.NewConversation behind it).
type ChatFormat interface {
	NewChat() (Chat, error)
}

// Chat is one episode's conversation, built token-in/token-out: the
// history is never re-tokenised; each call returns only the context tokens
// to append (loss mask 0), and the model's generated tokens stay exactly as
// sampled (loss mask 1).
type Chat interface {
	// Open returns the prompt: the templated [system?, user(observation)]
	// with the generation prompt.
	Open(observation string) ([]int32, error)
	// Continue returns what follows the model's turn (its generated ids):
	// the end of the assistant turn the model did not generate itself (the
	// "\n" after <|im_end|>), the observation as a user message and the
	// generation prompt.
	Continue(generated []int32, observation string) ([]int32, error)
}

// Vocabulary is the model's tokenizer as the episode runner needs it:
// observations are encoded and appended to the token history (the history
// itself is never re-tokenised, as SkyRL's multi-turn generator does), and
// each turn's generated tokens are decoded for the environment.
type Vocabulary interface {
	// Encode turns text into token ids (no special tokens added).
	Encode(text string) []int32
	// Decode turns generated ids into the text the environment reads.
	Decode(ids []int32) string
	// Prefix is what every episode starts with before the first
	// observation (the built-in policy's BOS; empty for a chat model
	// whose template carries its own markers).
	Prefix() []int32
	// IsEOS reports whether id ends generation (the turn then stops).
	IsEOS(id int32) bool
	// Size bounds token ids: every id is in [0, Size).
	Size() int32
}

// BuiltinVocab is the built-in policy's character vocabulary.
type BuiltinVocab struct{}

var _ Vocabulary = BuiltinVocab{}

// Encode implements Vocabulary.
func (BuiltinVocab) Encode(text string) []int32 { return tokenizer.Encode(text) }

// Decode implements Vocabulary.
func (BuiltinVocab) Decode(ids []int32) string { return tokenizer.Decode(ids) }

// Prefix implements Vocabulary: BOS.
func (BuiltinVocab) Prefix() []int32 { return []int32{tokenizer.BOS} }

// IsEOS implements Vocabulary.
func (BuiltinVocab) IsEOS(id int32) bool { return id == tokenizer.EOS }

// Size implements Vocabulary.
func (BuiltinVocab) Size() int32 { return tokenizer.VocabSize }

// vocab is cfg.Vocab or the built-in one.
func (c EpisodeConfig) vocab() Vocabulary {
	if c.Vocab == nil {
		return BuiltinVocab{}
	}
	return c.Vocab
}

// DefaultEpisodeConfig: task limits, a 256-token context, temperature 1,
// 60 s per call, 4 attempts 100 ms apart (one engine dying mid-turn costs
// a retry; the router sends the retry elsewhere).
func DefaultEpisodeConfig() EpisodeConfig {
	return EpisodeConfig{MaxSeqLen: 256, Temperature: 1, TopP: 1, TopK: -1,
		TurnTimeout: 60 * time.Second, TurnAttempts: 4, RetryBackoff: 100 * time.Millisecond}
}

// Episode is one finished trajectory in training layout: context tokens
// (prompt, environment observations) have loss mask 0 and logprob 0; the
// model's tokens have loss mask 1, the engine's logprob and the version of
// the weights that produced them.
type Episode struct {
	ID       string
	Tokens   []int32
	Logprobs []float32
	LossMask []uint8
	Versions []int32
	Support  [][]int32
	// SupportLogprobs holds each model token's logprob renormalised over
	// its support set (0 for context tokens). With no filter active the
	// support is the whole vocabulary and it equals Logprobs; NaN marks a
	// token whose engine reported a support set without this value.
	SupportLogprobs []float32
	// Routes (with EpisodeConfig.Routes) holds C-order [len(Tokens),
	// layers, top_k] expert ids: the engines' rows, then padding rows
	// (0, 1, …, top_k−1 per layer) for the positions no engine routed
	// (the last token, which is never forwarded, and any tail the last call
	// did not cover). RoutesPadded counts those padded positions.
	Routes       []int32
	RoutesPadded int
	PromptLen    int
	Reward       float64
	Turns        int
	// Generated counts model tokens; Resubmits counts calls that continued
	// a turn after an engine failure or an abort-mode pause.
	Generated, Resubmits int
	// ToolCalls counts the tool calls the model wrote in a chat
	// environment, MalformedCalls those of them that could not be parsed,
	// ToolTimeouts those the environment cut off at a time limit (its
	// results' chatenv.MetaToolTimeouts).
	ToolCalls, MalformedCalls, ToolTimeouts int
}

// OldestVersion is the minimum version over the model's tokens (-1 when
// it generated none).
func (e *Episode) OldestVersion() int64 {
	oldest := int64(-1)
	for i, m := range e.LossMask {
		if m == 1 && (oldest < 0 || int64(e.Versions[i]) < oldest) {
			oldest = int64(e.Versions[i])
		}
	}
	return oldest
}

func (e *Episode) addContext(ids []int32) {
	for _, id := range ids {
		e.Tokens = append(e.Tokens, id)
		e.Logprobs = append(e.Logprobs, 0)
		e.LossMask = append(e.LossMask, 0)
		e.Versions = append(e.Versions, -1)
		e.Support = append(e.Support, nil)
		e.SupportLogprobs = append(e.SupportLogprobs, 0)
	}
}

func (e *Episode) addGenerated(out TurnOutput) {
	for i, id := range out.Tokens {
		e.Tokens = append(e.Tokens, id)
		e.Logprobs = append(e.Logprobs, out.Logprobs[i])
		e.LossMask = append(e.LossMask, 1)
		e.Versions = append(e.Versions, int32(out.Versions[i]))
		var sup []int32
		if out.Support != nil {
			sup = out.Support[i]
		}
		e.Support = append(e.Support, sup)
		slp := out.Logprobs[i] // no support set: the full vocabulary
		switch {
		case out.SupportLogprobs != nil:
			slp = out.SupportLogprobs[i]
		case sup != nil:
			slp = float32(math.NaN()) // a support set, but its normaliser is unknown
		}
		e.SupportLogprobs = append(e.SupportLogprobs, slp)
	}
	e.Generated += len(out.Tokens)
}

// fillVersions gives context tokens the version of the model token before
// them (the leading prompt: the first model token's), so the per-token
// version column has no holes.
func (e *Episode) fillVersions() {
	first := int32(0)
	for i, m := range e.LossMask {
		if m == 1 {
			first = e.Versions[i]
			break
		}
	}
	last := first
	for i := range e.Versions {
		if e.LossMask[i] == 1 {
			last = e.Versions[i]
		} else {
			e.Versions[i] = last
		}
	}
}

// RunEpisode plays one episode of task on prompt p: every turn asks gen to
// continue the whole conversation (prompt, earlier turns, observations),
// feeds the new text to the environment and appends its observation. A
// failed call (or an abort that produced nothing) is retried with the
// accumulated tokens up to cfg.TurnAttempts times per turn; a call that
// was aborted after producing tokens is continued from them. It returns an
// error wrapping ErrAborted when a turn cannot complete, and ctx's error
// when ctx ends.
//
// A chatenv.Task plays a chat episode instead (runChatEpisode: messages,
// tool calls, ErrEnvFailed/ErrEnvTimeout on an environment's failure).
func RunEpisode(ctx context.Context, gen Generator, task tasks.Task, p tasks.Prompt, id string, cfg EpisodeConfig) (Episode, error) {
	if ct, ok := task.(chatenv.Task); ok {
		return runChatEpisode(ctx, gen, ct, p, id, cfg)
	}
	env := task.NewEnv()
	obs, err := env.Reset(p)
	if err != nil {
		return Episode{}, fmt.Errorf("%w: reset %s: %w", ErrAborted, p.ID, err)
	}
	maxTurns, maxTok := task.MaxTurns(), task.MaxTokensPerTurn()
	if cfg.MaxTurns > 0 {
		maxTurns = cfg.MaxTurns
	}
	if cfg.MaxTokens > 0 {
		maxTok = cfg.MaxTokens
	}
	vocab := cfg.vocab()
	ep := Episode{ID: id}
	ctxTokens, err := newContext(cfg, vocab)
	if err != nil {
		return Episode{}, fmt.Errorf("%w: %s: %w", ErrAborted, p.ID, err)
	}
	first, err := ctxTokens.open(obs)
	if err != nil {
		return Episode{}, fmt.Errorf("%w: %s: chat template: %w", ErrAborted, p.ID, err)
	}
	ep.addContext(first)
	ep.PromptLen = len(ep.Tokens)
	for turn := 0; turn < maxTurns && len(ep.Tokens) < cfg.MaxSeqLen; turn++ {
		start := len(ep.Tokens)
		if err := generateTurn(ctx, gen, &ep, min(maxTok, cfg.MaxSeqLen-len(ep.Tokens)), cfg); err != nil {
			return Episode{}, err
		}
		ep.Turns++
		o, r, done, err := env.Step(vocab.Decode(ep.Tokens[start:]))
		if err != nil {
			return Episode{}, fmt.Errorf("%w: env step %s: %w", ErrAborted, p.ID, err)
		}
		ep.Reward += r
		if done {
			break
		}
		next, err := ctxTokens.next(ep.Tokens[start:], o)
		if err != nil {
			return Episode{}, fmt.Errorf("%w: %s: chat template: %w", ErrAborted, p.ID, err)
		}
		ep.addContext(next)
	}
	ep.finish(cfg)
	return ep, nil
}

// finish cuts an observation that overflowed the context and fills the
// version and route columns.
func (e *Episode) finish(cfg EpisodeConfig) {
	if len(e.Tokens) > cfg.MaxSeqLen {
		n := cfg.MaxSeqLen
		e.Tokens, e.Logprobs, e.LossMask, e.Versions, e.Support = e.Tokens[:n], e.Logprobs[:n], e.LossMask[:n], e.Versions[:n], e.Support[:n]
		e.SupportLogprobs = e.SupportLogprobs[:n]
	}
	e.fillVersions()
	e.padRoutes(cfg.Routes)
}

// contextBuilder turns observations into context tokens: the vocabulary's
// prefix and encoding, or a chat conversation.
type contextBuilder struct {
	vocab Vocabulary
	chat  Chat
}

func newContext(cfg EpisodeConfig, vocab Vocabulary) (contextBuilder, error) {
	b := contextBuilder{vocab: vocab}
	if cfg.Chat != nil {
		c, err := cfg.Chat.NewChat()
		if err != nil {
			return b, err
		}
		b.chat = c
	}
	return b, nil
}

func (b contextBuilder) open(obs string) ([]int32, error) {
	if b.chat != nil {
		return b.chat.Open(obs)
	}
	return append(append([]int32(nil), b.vocab.Prefix()...), b.vocab.Encode(obs)...), nil
}

func (b contextBuilder) next(generated []int32, obs string) ([]int32, error) {
	if b.chat != nil {
		return b.chat.Continue(generated, obs)
	}
	return b.vocab.Encode(obs), nil
}

// turnAction is what the episode runner does after one generation call.
type turnAction int

const (
	turnDone     turnAction = iota + 1 // the turn is complete
	turnContinue                       // continue the turn from the tokens so far (no failure)
	turnRetry                          // call again after a backoff (a failure was counted)
	turnAbort                          // give the episode up
)

// callResult is what one generation call gave, as decideTurn sees it.
type callResult struct {
	Failed  bool   // transport error, non-200, timeout
	Tokens  int    // tokens generated by this call
	EOS     bool   // the last token is EOS
	Finish  string // finish_reason
	Left    int    // turn budget left after this call's tokens
	Failed0 int    // failures of this turn before this call
}

// decideTurn is the runner's only decision, kept pure so its table test
// pins it down: failures (errors, and aborts that produced nothing) are
// retried until attempts are used up; an abort that produced tokens is
// continued (the engine was paused in abort mode or went away mid-turn);
// a stop, a length cut, EOS or a spent budget ends the turn. It returns
// the action and the turn's failure count after this call.
func decideTurn(r callResult, attempts int) (turnAction, int) {
	attempts = max(attempts, 1)
	failures := r.Failed0
	switch {
	case r.Failed || (r.Finish == "abort" && r.Tokens == 0 && !r.EOS):
		failures++
		if failures >= attempts {
			return turnAbort, failures
		}
		return turnRetry, failures
	case r.EOS || r.Finish != "abort" || r.Left <= 0:
		return turnDone, failures
	default:
		return turnContinue, failures
	}
}

// generateTurn generates up to budget tokens for one turn, carrying out
// decideTurn's verdicts.
func generateTurn(ctx context.Context, gen Generator, ep *Episode, budget int, cfg EpisodeConfig) error {
	failures := 0
	var last error
	for calls := 0; ; calls++ {
		if calls > 0 {
			ep.Resubmits++
		}
		cctx, cancel := context.WithTimeout(ctx, cfg.TurnTimeout)
		start := ep.routeRows(cfg.Routes)
		out, err := gen.Generate(cctx, TurnRequest{SessionID: ep.ID, Tokens: ep.Tokens, MaxTokens: budget,
			Temperature: cfg.Temperature, TopP: cfg.TopP, TopK: cfg.TopK, Routes: cfg.Routes, RoutesStart: start})
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err == nil && cfg.SupportLogprobs && out.Support != nil && out.SupportLogprobs == nil {
			err = fmt.Errorf("%w: the answer has sample_support but no output_support_logprobs, which normalize_over_support needs", ErrEngine)
		}
		res := callResult{Failed: err != nil, Failed0: failures}
		if err == nil {
			if len(out.Tokens) > budget {
				out.Tokens, out.Logprobs, out.Versions = out.Tokens[:budget], out.Logprobs[:budget], out.Versions[:budget]
				if out.Support != nil {
					out.Support = out.Support[:budget]
				}
				if out.SupportLogprobs != nil {
					out.SupportLogprobs = out.SupportLogprobs[:budget]
				}
			}
			ep.addGenerated(out)
			ep.addRoutes(cfg.Routes, out.Routes)
			budget -= len(out.Tokens)
			res.Tokens, res.Finish, res.Left = len(out.Tokens), out.Finish, budget
			res.EOS = len(out.Tokens) > 0 && cfg.vocab().IsEOS(out.Tokens[len(out.Tokens)-1])
		} else {
			last = err
		}
		var act turnAction
		act, failures = decideTurn(res, cfg.TurnAttempts)
		switch act {
		case turnDone:
			return nil
		case turnAbort:
			if last == nil {
				last = errors.New("engine aborted the call before any token")
			}
			return fmt.Errorf("%w: turn %d of %s failed %d times: %w", ErrAborted, ep.Turns, ep.ID, failures, last)
		case turnRetry:
			if err == nil {
				last = errors.New("engine aborted the call before any token")
			}
			if err := sleep(ctx, time.Duration(failures)*cfg.RetryBackoff); err != nil {
				return err
			}
		case turnContinue:
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
