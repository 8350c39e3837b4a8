package tasks

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

// ArithConfig configures the arithmetic task.
type ArithConfig struct {
	// Name is the registry name. Required.
	Name string
	// MaxOperand bounds both operands: they are drawn from [0, MaxOperand]
	// (1..9999). Small operands keep prompts short and answers 1–3 digits.
	MaxOperand int
	// Ops holds the operators drawn from: any of "+-" (non-empty).
	Ops string
}

// DefaultArithConfig is the "arith" task: a±b with a, b in [0, 9].
func DefaultArithConfig() ArithConfig {
	return ArithConfig{Name: "arith", MaxOperand: 9, Ops: "+-"}
}

// Validate names the first invalid field.
func (c ArithConfig) Validate() error {
	switch {
	case c.Name == "":
		return fmt.Errorf("%w: ArithConfig.Name must be set", ErrInvalidTask)
	case c.MaxOperand < 1 || c.MaxOperand > 9999:
		return fmt.Errorf("%w: ArithConfig.MaxOperand %d: want 1..9999", ErrInvalidTask, c.MaxOperand)
	case c.Ops == "" || !allIn(c.Ops, "+-"):
		return fmt.Errorf("%w: ArithConfig.Ops %q: want a non-empty subset of \"+-\"", ErrInvalidTask, c.Ops)
	}
	return nil
}

// ArithTask asks for a sum or difference. Prompt: "7+5=", answer "12";
// differences may be negative ("3-8=" → "-5").
//
// Reward (in [0,1]) for answer a (see firstWord) against target t:
//
//	0.5 · (characters equal to t's when both are aligned on the right) / len(t)
//	0.1 · (numeric characters of a: digits, and '-' first) / max(len(a), len(t))
//	0.1 · length credit (1 if len(a) == len(t), 1/2 if off by one)
//	0.3 · [a == t]
//
// Right alignment gives credit by digit value: "13" for "12" earns the tens
// digit, "2" for "12" the units digit.
type ArithTask struct{ cfg ArithConfig }

var _ Task = (*ArithTask)(nil)

// NewArithTask validates cfg and returns the task.
func NewArithTask(cfg ArithConfig) (*ArithTask, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &ArithTask{cfg: cfg}, nil
}

func (t *ArithTask) Name() string  { return t.cfg.Name }
func (t *ArithTask) MaxTurns() int { return 1 }

// MaxTokensPerTurn leaves room for a sign and one overshooting character.
func (t *ArithTask) MaxTokensPerTurn() int { return len(strconv.Itoa(2*t.cfg.MaxOperand)) + 2 }
func (t *ArithTask) NewEnv() Env           { return &singleEnv{parse: t.parse} }

// Sample draws a seed and generates the prompt from it.
func (t *ArithTask) Sample(rng *rand.Rand) Prompt {
	seed := rng.Int64()
	return Prompt{ID: promptID(t.cfg.Name, seed), Text: t.generate(seed), Seed: seed}
}

func (t *ArithTask) generate(seed int64) string {
	r := seedRand(seed)
	a, b := r.IntN(t.cfg.MaxOperand+1), r.IntN(t.cfg.MaxOperand+1)
	op := t.cfg.Ops[r.IntN(len(t.cfg.Ops))]
	return strconv.Itoa(a) + string(op) + strconv.Itoa(b) + "="
}

func (t *ArithTask) parse(p Prompt) (string, func(string) float64, error) {
	text := p.Text
	if text == "" {
		text = t.generate(p.Seed)
	}
	bad := func() error {
		return badPrompt(t.cfg.Name, text, fmt.Sprintf("\"<a><op><b>=\" with a, b in 0..%d and op in %q", t.cfg.MaxOperand, t.cfg.Ops))
	}
	expr, ok := strings.CutSuffix(text, "=")
	i := strings.IndexAny(expr, t.cfg.Ops)
	if !ok || i < 1 {
		return "", nil, bad()
	}
	a, errA := parseOperand(expr[:i], t.cfg.MaxOperand)
	b, errB := parseOperand(expr[i+1:], t.cfg.MaxOperand)
	if errA != nil || errB != nil {
		return "", nil, bad()
	}
	res := a + b
	if expr[i] == '-' {
		res = a - b
	}
	target := strconv.Itoa(res)
	return text, func(action string) float64 { return NumberReward(firstWord(action), target) }, nil
}

// parseOperand accepts only plain digits (no sign, no spaces) up to max.
func parseOperand(s string, max int) (int, error) {
	if s == "" || !allIn(s, "0123456789") || len(s) > 4 {
		return 0, strconv.ErrSyntax
	}
	n, err := strconv.Atoi(s)
	if err != nil || n > max {
		return 0, strconv.ErrRange
	}
	return n, nil
}

// NumberReward scores a numeric answer against target (see ArithTask).
func NumberReward(answer, target string) float64 {
	switch answer {
	case "":
		return 0
	case target:
		return 1
	}
	match, numeric := 0, 0
	for k := 0; k < len(answer); k++ {
		c := answer[k]
		if (c >= '0' && c <= '9') || (k == 0 && c == '-') {
			numeric++
		}
		// k-th character from the right.
		if k < len(target) && answer[len(answer)-1-k] == target[len(target)-1-k] {
			match++
		}
	}
	return 0.5*float64(match)/float64(len(target)) +
		0.1*float64(numeric)/float64(max(len(answer), len(target))) +
		0.1*lengthCredit(len(answer), len(target))
}
