package tasks

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
)

// LetterOp is what a letter task asks the model to do with the letters.
type LetterOp string

// The letter operations. The op is also the prompt's first word.
const (
	OpReverse LetterOp = "rev"  // "rev abc=" → "cba"
	OpSort    LetterOp = "sort" // "sort cab=" → "abc"
	OpCopy    LetterOp = "copy" // "copy abc=" → "abc"
)

// LetterConfig configures a letter task (reverse, sort, copy).
type LetterConfig struct {
	// Name is the registry name, e.g. "reverse". Required.
	Name string
	// Op is the operation: OpReverse, OpSort or OpCopy.
	Op LetterOp
	// Alphabet holds the letters problems are drawn from: distinct,
	// printable, no whitespace or '='. Small alphabets make a random policy
	// hit correct characters often enough to learn from.
	Alphabet string
	// MinLen and MaxLen bound the number of letters in a generated problem
	// (1 <= MinLen <= MaxLen <= MaxTokensPerTurn).
	MinLen, MaxLen int
	// MaxTokensPerTurn bounds the answer's length; room for a few characters
	// past MaxLen lets the model overshoot and be scored for it.
	MaxTokensPerTurn int
}

// DefaultReverseConfig is the "reverse" task: 2–4 letters from a–e.
func DefaultReverseConfig() LetterConfig {
	return LetterConfig{Name: "reverse", Op: OpReverse, Alphabet: "abcde", MinLen: 2, MaxLen: 4, MaxTokensPerTurn: 6}
}

// DefaultSortConfig is the "sort" task: 2–4 letters from a–e, sorted.
func DefaultSortConfig() LetterConfig {
	return LetterConfig{Name: "sort", Op: OpSort, Alphabet: "abcde", MinLen: 2, MaxLen: 4, MaxTokensPerTurn: 6}
}

// DefaultCopyConfig is the "copy" task: 2–4 letters from a–e, repeated.
func DefaultCopyConfig() LetterConfig {
	return LetterConfig{Name: "copy", Op: OpCopy, Alphabet: "abcde", MinLen: 2, MaxLen: 4, MaxTokensPerTurn: 6}
}

// Validate names the first invalid field.
func (c LetterConfig) Validate() error {
	switch {
	case c.Name == "":
		return fmt.Errorf("%w: LetterConfig.Name must be set", ErrInvalidTask)
	case c.Op != OpReverse && c.Op != OpSort && c.Op != OpCopy:
		return fmt.Errorf("%w: LetterConfig.Op %q: want %q, %q or %q", ErrInvalidTask, c.Op, OpReverse, OpSort, OpCopy)
	case c.Alphabet == "":
		return fmt.Errorf("%w: LetterConfig.Alphabet must not be empty", ErrInvalidTask)
	case c.MinLen < 1 || c.MaxLen < c.MinLen:
		return fmt.Errorf("%w: LetterConfig.MinLen %d / MaxLen %d: want 1 <= MinLen <= MaxLen", ErrInvalidTask, c.MinLen, c.MaxLen)
	case c.MaxTokensPerTurn < c.MaxLen:
		return fmt.Errorf("%w: LetterConfig.MaxTokensPerTurn %d: want >= MaxLen (%d)", ErrInvalidTask, c.MaxTokensPerTurn, c.MaxLen)
	}
	for i := 0; i < len(c.Alphabet); i++ {
		ch := c.Alphabet[i]
		if ch <= ' ' || ch > '~' || ch == '=' || strings.IndexByte(c.Alphabet[i+1:], ch) >= 0 {
			return fmt.Errorf("%w: LetterConfig.Alphabet %q: want distinct printable non-space characters other than '='", ErrInvalidTask, c.Alphabet)
		}
	}
	return nil
}

// LetterTask transforms a short string of letters. Prompt: "<op> <letters>=".
//
// Reward (in [0,1]) for answer a (see firstWord) against target t:
//
//	0.5 · (positions i with a[i] == t[i]) / len(t)
//	0.2 · (characters of a in the alphabet) / max(len(a), len(t))
//	0.1 · length credit (1 if len(a) == len(t), 1/2 if off by one)
//	0.2 · [a == t]
//
// The first three terms are there so a randomly initialised model earns some
// reward and a group of samples has variance; the exact-match bonus makes the
// correct answer clearly best.
type LetterTask struct{ cfg LetterConfig }

var _ Task = (*LetterTask)(nil)

// NewLetterTask validates cfg and returns the task.
func NewLetterTask(cfg LetterConfig) (*LetterTask, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &LetterTask{cfg: cfg}, nil
}

func (t *LetterTask) Name() string          { return t.cfg.Name }
func (t *LetterTask) MaxTurns() int         { return 1 }
func (t *LetterTask) MaxTokensPerTurn() int { return t.cfg.MaxTokensPerTurn }
func (t *LetterTask) NewEnv() Env           { return &singleEnv{parse: t.parse} }

// Sample draws a seed and generates the prompt from it.
func (t *LetterTask) Sample(rng *rand.Rand) Prompt {
	seed := rng.Int64()
	return Prompt{ID: promptID(t.cfg.Name, seed), Text: t.generate(seed), Seed: seed}
}

func (t *LetterTask) generate(seed int64) string {
	r := seedRand(seed)
	n := t.cfg.MinLen + r.IntN(t.cfg.MaxLen-t.cfg.MinLen+1)
	b := make([]byte, n)
	for i := range b {
		b[i] = t.cfg.Alphabet[r.IntN(len(t.cfg.Alphabet))]
	}
	return string(t.cfg.Op) + " " + string(b) + "="
}

func (t *LetterTask) parse(p Prompt) (string, func(string) float64, error) {
	text := p.Text
	if text == "" {
		text = t.generate(p.Seed)
	}
	prefix := string(t.cfg.Op) + " "
	letters, ok := strings.CutPrefix(text, prefix)
	if ok {
		letters, ok = strings.CutSuffix(letters, "=")
	}
	if !ok || letters == "" || len(letters) > t.cfg.MaxTokensPerTurn || !allIn(letters, t.cfg.Alphabet) {
		return "", nil, badPrompt(t.cfg.Name, text, fmt.Sprintf("%q + 1..%d letters of %q + \"=\"", prefix, t.cfg.MaxTokensPerTurn, t.cfg.Alphabet))
	}
	target := t.target(letters)
	alphabet := t.cfg.Alphabet
	return text, func(action string) float64 { return LetterReward(firstWord(action), target, alphabet) }, nil
}

func (t *LetterTask) target(letters string) string {
	b := []byte(letters)
	switch t.cfg.Op {
	case OpReverse:
		slices.Reverse(b)
	case OpSort:
		slices.Sort(b)
	}
	return string(b)
}

// LetterReward scores answer against target (see LetterTask). It is exported
// so custom tasks can reuse the same partial-credit shape.
func LetterReward(answer, target, alphabet string) float64 {
	if target == "" {
		panic(errors.New("tasks: LetterReward with empty target"))
	}
	switch answer {
	case "":
		return 0
	case target:
		return 1 // every term is full; returned exactly, not as a float sum
	}
	pos, in := 0, 0
	for i := 0; i < len(answer); i++ {
		if i < len(target) && answer[i] == target[i] {
			pos++
		}
		if strings.IndexByte(alphabet, answer[i]) >= 0 {
			in++
		}
	}
	return 0.5*float64(pos)/float64(len(target)) +
		0.2*float64(in)/float64(max(len(answer), len(target))) +
		0.1*lengthCredit(len(answer), len(target))
}
