package tasks

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
)

// Sentinel errors. Callers match them with errors.Is; the returned errors
// wrap them with the task name and details.
var (
	// ErrUnknownTask: Get was asked for a name that is not registered.
	ErrUnknownTask = errors.New("tasks: unknown task")
	// ErrDuplicateTask: Register was given a name that is already taken.
	ErrDuplicateTask = errors.New("tasks: task already registered")
	// ErrInvalidTask: Register was given a nil task, an empty name or
	// non-positive limits.
	ErrInvalidTask = errors.New("tasks: invalid task")
	// ErrNotReset: Step was called before Reset.
	ErrNotReset = errors.New("tasks: step before reset")
	// ErrEpisodeDone: Step was called after the episode ended.
	ErrEpisodeDone = errors.New("tasks: episode already done")
	// ErrBadPrompt: Reset was given a prompt text the task cannot parse.
	ErrBadPrompt = errors.New("tasks: bad prompt")
)

// Prompt is one problem instance. Text is what the model is shown; Seed
// determines everything the text does not say (for example the hidden number
// of the guess task). A Prompt with an empty Text is generated from Seed
// alone, so a seed is enough to reproduce an episode anywhere.
type Prompt struct {
	ID   string `json:"id"`
	Text string `json:"text"`
	Seed int64  `json:"seed"`
}

// Env is one episode of a task. It is not safe for concurrent use: one
// rollout owns one Env.
type Env interface {
	// Reset starts an episode and returns the first observation: the text
	// the model is prompted with.
	Reset(p Prompt) (obs string, err error)
	// Step consumes the model's text for this turn and returns the
	// environment's reply (which the caller appends to the conversation),
	// the reward for this step, and whether the episode is over. The
	// episode score is the sum of the step rewards.
	Step(action string) (obs string, reward float64, done bool, err error)
}

// Task is a kind of environment with programmatic rewards.
type Task interface {
	// Name is the registry key, e.g. "reverse".
	Name() string
	// MaxTurns is the most Steps an episode can take (1 for single-turn).
	MaxTurns() int
	// MaxTokensPerTurn bounds the model's text per turn (one token per
	// character with the built-in tokenizer).
	MaxTokensPerTurn() int
	// Sample draws a prompt. It uses only rng, so the same rng state gives
	// the same prompt.
	Sample(rng *rand.Rand) Prompt
	// NewEnv returns a fresh environment; call Reset before Step.
	NewEnv() Env
}

// registry is the process-wide name → Task table. It is the one piece of
// global state in this package: Register is how users plug their own tasks
// into the CLI and config files, which name tasks by string.
var registry = struct {
	sync.RWMutex
	m map[string]Task
}{m: map[string]Task{}}

// Register adds a task under t.Name(). Names are unique; registering a name
// twice is an error rather than a silent replacement, so two packages cannot
// shadow each other by init order.
func Register(t Task) error {
	if t == nil {
		return fmt.Errorf("%w: nil task", ErrInvalidTask)
	}
	name := t.Name()
	if name == "" || strings.TrimSpace(name) != name {
		return fmt.Errorf("%w: name %q must be non-empty without surrounding spaces", ErrInvalidTask, name)
	}
	if t.MaxTurns() < 1 || t.MaxTokensPerTurn() < 1 {
		return fmt.Errorf("%w: %q: MaxTurns (%d) and MaxTokensPerTurn (%d) must be >= 1",
			ErrInvalidTask, name, t.MaxTurns(), t.MaxTokensPerTurn())
	}
	registry.Lock()
	defer registry.Unlock()
	if _, ok := registry.m[name]; ok {
		return fmt.Errorf("%w: %q", ErrDuplicateTask, name)
	}
	registry.m[name] = t
	return nil
}

// Get returns the task registered under name. An unknown name gives an error
// listing the known names.
func Get(name string) (Task, error) {
	registry.RLock()
	t, ok := registry.m[name]
	registry.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w %q (known: %s)", ErrUnknownTask, name, strings.Join(Names(), ", "))
	}
	return t, nil
}

// Names returns the registered task names, sorted.
func Names() []string {
	registry.RLock()
	defer registry.RUnlock()
	out := make([]string, 0, len(registry.m))
	for n := range registry.m {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// mustRegister is for the built-in tasks, whose names cannot collide.
func mustRegister(t Task) {
	if err := Register(t); err != nil {
		panic(err)
	}
}
