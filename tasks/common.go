package tasks

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// seedStream is the second PCG word for per-prompt generators. It is fixed so
// a Prompt.Seed means the same problem in every process and release.
const seedStream = 0x61737963726c7461 // "asycrlta"

// seedRand returns the generator that turns a Prompt.Seed into a problem.
// Each prompt gets its own generator, so problems never depend on what else
// was generated before them.
func seedRand(seed int64) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(seed), seedStream))
}

// promptID names a generated prompt after its task and seed.
func promptID(task string, seed int64) string {
	return fmt.Sprintf("%s-%016x", task, uint64(seed))
}

// isSpace reports the separators that end an answer. A model that has said
// its answer often keeps emitting blanks or newlines; those are not part of
// the answer.
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// firstWord returns the answer inside a model's turn: the text after any
// leading whitespace, up to the next whitespace. Garbage glued to the answer
// without a space stays part of it (and costs length/alphabet credit);
// garbage after a space is ignored, which is how a model "stops talking"
// without an EOS token.
func firstWord(s string) string {
	i := 0
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	j := i
	for j < len(s) && !isSpace(s[j]) {
		j++
	}
	return s[i:j]
}

// lengthCredit is 1 for the right length, 1/2 for off by one, else 0: a
// gradient toward the right length that a random policy hits often enough to
// give a group reward variance.
func lengthCredit(got, want int) float64 {
	switch d := got - want; {
	case d == 0:
		return 1
	case d == 1 || d == -1:
		return 0.5
	default:
		return 0
	}
}

// singleEnv runs a one-turn episode: Reset parses the prompt into a scorer,
// Step scores the answer and ends the episode.
type singleEnv struct {
	// parse turns a prompt into its observation and scorer.
	parse func(p Prompt) (obs string, score func(answer string) float64, err error)
	score func(string) float64
	done  bool
}

func (e *singleEnv) Reset(p Prompt) (string, error) {
	obs, score, err := e.parse(p)
	if err != nil {
		e.score = nil
		return "", err
	}
	e.score, e.done = score, false
	return obs, nil
}

func (e *singleEnv) Step(action string) (string, float64, bool, error) {
	if e.score == nil {
		return "", 0, false, ErrNotReset
	}
	if e.done {
		return "", 0, true, ErrEpisodeDone
	}
	e.done = true
	return "", e.score(action), true, nil
}

// episode is the turn bookkeeping of a multi-turn Env: Reset starts it,
// every Step counts a turn, and the episode ends when it is solved or after
// MaxTurns turns.
type episode struct {
	turn          int
	started, done bool
}

// next admits one Step and counts its turn. It fails with ErrNotReset
// before a successful Reset and with ErrEpisodeDone after the end; done is
// the value Step must return alongside the error.
func (e *episode) next() (done bool, err error) {
	switch {
	case !e.started:
		return false, ErrNotReset
	case e.done:
		return true, ErrEpisodeDone
	}
	e.turn++
	return false, nil
}

// endIfOut ends the episode once it has used all maxTurns turns.
func (e *episode) endIfOut(maxTurns int) {
	if e.turn >= maxTurns {
		e.done = true
	}
}

// shapingReward is the per-turn shaping unit of the multi-turn tasks, 0.1/T:
// at most two units a turn keep all shaping within 0.2.
func shapingReward(maxTurns int) float64 { return 0.1 / float64(maxTurns) }

// winReward is the multi-turn tasks' reward for solving on 1-based turn
// of maxTurns: 0.5 + 0.3·(T−t)/(T−1), so winning sooner is worth more; a
// one-turn episode (T = 1) wins the full 0.8.
func winReward(turn, maxTurns int) float64 {
	if maxTurns <= 1 {
		return 0.8
	}
	return 0.5 + 0.3*float64(maxTurns-turn)/float64(maxTurns-1)
}

// badPrompt wraps ErrBadPrompt with the task name, the text and the expected
// shape, so a bad dataset line is easy to fix.
func badPrompt(task, text, want string) error {
	return fmt.Errorf("%w: %s: %q is not of the form %s", ErrBadPrompt, task, text, want)
}

// allIn reports whether every byte of s is in set.
func allIn(s, set string) bool {
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(set, s[i]) < 0 {
			return false
		}
	}
	return true
}
