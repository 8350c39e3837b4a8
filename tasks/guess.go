package tasks

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

// GuessConfig configures the number-guessing task.
type GuessConfig struct {
	// Name is the registry name. Required.
	Name string
	// Max is the top of the range: the hidden number is in [1, Max]
	// (2..9999). 20 needs at most 5 guesses with bisection, which leaves a
	// 10-turn episode room to be bad at it and still win.
	Max int
	// MaxTurns ends the episode unsolved after this many guesses (>= 1).
	MaxTurns int
	// Chat words the prompt and the replies as a chat model's user
	// messages ("I'm thinking of a number from 1 to 20. …", "Higher.")
	// instead of the built-in policy's compact "guess 1-20:" and
	// " higher:"; the rules and rewards are the same.
	Chat bool
}

// DefaultGuessConfig is the "guess" task: a number in [1, 20], 10 turns.
func DefaultGuessConfig() GuessConfig { return GuessConfig{Name: "guess", Max: 20, MaxTurns: 10} }

// DefaultGuessChatConfig is "guess_chat": the guess task in a chat
// model's words (docs/models.md: the real-model examples), a number in
// [1, 20], 8 turns.
func DefaultGuessChatConfig() GuessConfig {
	return GuessConfig{Name: "guess_chat", Max: 20, MaxTurns: 8, Chat: true}
}

// Validate names the first invalid field.
func (c GuessConfig) Validate() error {
	switch {
	case c.Name == "":
		return fmt.Errorf("%w: GuessConfig.Name must be set", ErrInvalidTask)
	case c.Max < 2 || c.Max > 9999:
		return fmt.Errorf("%w: GuessConfig.Max %d: want 2..9999", ErrInvalidTask, c.Max)
	case c.MaxTurns < 1:
		return fmt.Errorf("%w: GuessConfig.MaxTurns %d: want >= 1", ErrInvalidTask, c.MaxTurns)
	}
	return nil
}

// Observations of the guess task. They are short and start with a space so
// that the conversation reads "guess 1-20:10 lower:4 higher:7 correct" with
// the model's guesses in between, within the tiny model's context.
const (
	GuessHigher  = " higher:"  // the number is above the guess
	GuessLower   = " lower:"   // the number is below the guess
	GuessCorrect = " correct"  // solved; the episode is over
	GuessInvalid = " invalid:" // no number in [1, Max] at the start of the turn
)

// GuessTask is multi-turn number guessing. Prompt: "guess 1-<N>:"; the hidden
// number comes from Prompt.Seed. Each turn the model's text should start with
// a number (after optional whitespace; anything after the digits is ignored)
// and the reply is higher/lower/correct/invalid.
//
// Rewards, with T = MaxTurns and t the 1-based turn:
//
//	every valid guess in [1, N]:                   +0.1/T
//	every guess consistent with all feedback so far
//	(inside the interval still possible):          +0.1/T
//	the correct guess, on turn t:                  +0.5 + 0.3·(T−t)/(T−1)
//
// Shaping adds up to at most 0.2 and the win to at most 0.8, so an episode's
// score is in [0, 1]; winning sooner is worth more. The episode ends when the
// number is guessed or after T turns.
type GuessTask struct{ cfg GuessConfig }

var _ Task = (*GuessTask)(nil)

// NewGuessTask validates cfg and returns the task.
func NewGuessTask(cfg GuessConfig) (*GuessTask, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &GuessTask{cfg: cfg}, nil
}

func (t *GuessTask) Name() string  { return t.cfg.Name }
func (t *GuessTask) MaxTurns() int { return t.cfg.MaxTurns }

// MaxTokensPerTurn is the digits of Max plus one spare character (the
// built-in policy's EOS; a chat model's end-of-turn token, with one more
// for a leading space or newline).
func (t *GuessTask) MaxTokensPerTurn() int {
	if t.cfg.Chat {
		return len(strconv.Itoa(t.cfg.Max)) + 2
	}
	return len(strconv.Itoa(t.cfg.Max)) + 1
}
func (t *GuessTask) NewEnv() Env { return &guessEnv{task: t} }

// Sample draws a seed; the prompt text depends only on Max, the hidden
// number only on the seed.
func (t *GuessTask) Sample(rng *rand.Rand) Prompt {
	seed := rng.Int64()
	return Prompt{ID: promptID(t.cfg.Name, seed), Text: t.text(t.cfg.Max), Seed: seed}
}

func (t *GuessTask) text(n int) string {
	if t.cfg.Chat {
		return chatGuessPrefix + strconv.Itoa(n) + chatGuessSuffix
	}
	return "guess 1-" + strconv.Itoa(n) + ":"
}

// The chat wording of the guess task's prompt and replies.
const (
	chatGuessPrefix = "I'm thinking of a whole number from 1 to "
	chatGuessSuffix = ". Guess it: answer with the number only."
)

// words are the replies: higher, lower, correct, invalid.
func (t *GuessTask) words() (higher, lower, correct, invalid string) {
	if t.cfg.Chat {
		return "Higher.", "Lower.", "Correct!", "Invalid: answer with a number from 1 to " + strconv.Itoa(t.cfg.Max) + "."
	}
	return GuessHigher, GuessLower, GuessCorrect, GuessInvalid
}

// parseText is the range N of a prompt text, in either wording.
func (t *GuessTask) parseText(text string) (int, bool) {
	prefix, suffix := "guess 1-", ":"
	if t.cfg.Chat {
		prefix, suffix = chatGuessPrefix, chatGuessSuffix
	}
	s, found := strings.CutPrefix(text, prefix)
	if !found {
		return 0, false
	}
	if s, found = strings.CutSuffix(s, suffix); !found {
		return 0, false
	}
	n, err := parseOperand(s, t.cfg.Max)
	return n, err == nil && n >= 2
}

type guessEnv struct {
	task      *GuessTask
	n, secret int
	lo, hi    int // the interval still consistent with the feedback
	episode
}

func (e *guessEnv) Reset(p Prompt) (string, error) {
	cfg := e.task.cfg
	text := p.Text
	if text == "" {
		text = e.task.text(cfg.Max)
	}
	n, ok := e.task.parseText(text)
	if !ok {
		e.started = false
		return "", badPrompt(cfg.Name, text, fmt.Sprintf("%q with N in 2..%d", e.task.text(0), cfg.Max))
	}
	*e = guessEnv{task: e.task, n: n, secret: 1 + seedRand(p.Seed).IntN(n), lo: 1, hi: n, episode: episode{started: true}}
	return text, nil
}

func (e *guessEnv) Step(action string) (string, float64, bool, error) {
	if done, err := e.next(); err != nil {
		return "", 0, done, err
	}
	T := e.task.cfg.MaxTurns
	shaping := shapingReward(T)
	higher, lower, correct, invalid := e.task.words()
	reward, obs := 0.0, invalid
	if g, ok := leadingNumber(action); ok && g >= 1 && g <= e.n {
		reward += shaping
		if g >= e.lo && g <= e.hi {
			reward += shaping
		}
		switch {
		case g == e.secret:
			obs, e.done = correct, true
			reward += winReward(e.turn, T)
		case g < e.secret:
			obs, e.lo = higher, max(e.lo, g+1)
		default:
			obs, e.hi = lower, min(e.hi, g-1)
		}
	}
	e.endIfOut(T)
	return obs, reward, e.done, nil
}

// leadingNumber parses the digits at the start of s (after whitespace).
// More than 6 digits is not a guess of any range this task allows.
func leadingNumber(s string) (int, bool) {
	i := 0
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	j := i
	for j < len(s) && s[j] >= '0' && s[j] <= '9' {
		j++
	}
	if j == i || j-i > 6 {
		return 0, false
	}
	n, err := strconv.Atoi(s[i:j])
	return n, err == nil
}

// DemoAction implements Demonstrator: a well-formed guess, not a good one —
// half the time any number in [1, N], else one still consistent with the
// replies — so a model warmed up on such episodes (asyncrl data generate
// --task) answers in the task's format and RL has the strategy left to
// learn.
func (t *GuessTask) DemoAction(env Env, rng *rand.Rand) string {
	e, ok := env.(*guessEnv)
	if !ok || !e.started {
		return "1"
	}
	if rng.IntN(2) == 0 || e.lo > e.hi {
		return strconv.Itoa(1 + rng.IntN(e.n))
	}
	return strconv.Itoa(e.lo + rng.IntN(e.hi-e.lo+1))
}
