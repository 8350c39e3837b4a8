package tasks

import (
	"fmt"
	"math/rand/v2"
	"strconv"
)

// GridConfig configures the grid-walking task.
type GridConfig struct {
	// Name is the registry name. Required.
	Name string
	// Size is the side of the square grid (2..10); cells are 0..Size-1.
	Size int
	// MaxTurns ends the episode unsolved after this many moves; it must be
	// at least the longest shortest path, 2·(Size−1).
	MaxTurns int
}

// DefaultGridConfig is the "gridwalk" task: a 4×4 grid, 12 moves.
func DefaultGridConfig() GridConfig { return GridConfig{Name: "gridwalk", Size: 4, MaxTurns: 12} }

// Validate names the first invalid field.
func (c GridConfig) Validate() error {
	switch {
	case c.Name == "":
		return fmt.Errorf("%w: GridConfig.Name must be set", ErrInvalidTask)
	case c.Size < 2 || c.Size > 10:
		return fmt.Errorf("%w: GridConfig.Size %d: want 2..10", ErrInvalidTask, c.Size)
	case c.MaxTurns < 2*(c.Size-1):
		return fmt.Errorf("%w: GridConfig.MaxTurns %d: want >= 2·(Size−1) = %d", ErrInvalidTask, c.MaxTurns, 2*(c.Size-1))
	}
	return nil
}

// GridGoal is the observation when the walker reaches the goal.
const GridGoal = " goal"

// GridTask is multi-turn navigation. Prompt: "walk 0,3>2,1:" (from column 0
// row 3 to column 2 row 1). Each turn the first non-space character of the
// model's text is the move: u (row−1), d (row+1), l (column−1), r
// (column+1), case-insensitive. The reply is the new position, " 1,3:", or
// GridGoal; a move off the grid or any other character leaves the walker in
// place and the reply repeats the position.
//
// Rewards, with T = MaxTurns and t the 1-based turn:
//
//	every move that stays on the grid:        +0.1/T
//	every move that gets closer to the goal:  +0.1/T
//	reaching the goal on turn t:              +0.5 + 0.3·(T−t)/(T−1)
//
// so an episode's score is in [0, 1]; the episode ends at the goal or after
// T turns.
type GridTask struct{ cfg GridConfig }

var _ Task = (*GridTask)(nil)

// NewGridTask validates cfg and returns the task.
func NewGridTask(cfg GridConfig) (*GridTask, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &GridTask{cfg: cfg}, nil
}

func (t *GridTask) Name() string  { return t.cfg.Name }
func (t *GridTask) MaxTurns() int { return t.cfg.MaxTurns }

// MaxTokensPerTurn is the move plus one spare character.
func (t *GridTask) MaxTokensPerTurn() int { return 2 }
func (t *GridTask) NewEnv() Env           { return &gridEnv{task: t} }

// Sample draws a seed and generates the prompt from it.
func (t *GridTask) Sample(rng *rand.Rand) Prompt {
	seed := rng.Int64()
	return Prompt{ID: promptID(t.cfg.Name, seed), Text: t.generate(seed), Seed: seed}
}

func (t *GridTask) generate(seed int64) string {
	r := seedRand(seed)
	n := t.cfg.Size
	s := r.IntN(n * n)
	g := r.IntN(n*n - 1)
	if g >= s { // any cell but the start
		g++
	}
	return "walk " + cell(s%n, s/n) + ">" + cell(g%n, g/n) + ":"
}

func cell(x, y int) string { return strconv.Itoa(x) + "," + strconv.Itoa(y) }

type gridEnv struct {
	task         *GridTask
	x, y, gx, gy int
	episode
}

func (e *gridEnv) Reset(p Prompt) (string, error) {
	cfg := e.task.cfg
	text := p.Text
	if text == "" {
		text = e.task.generate(p.Seed)
	}
	var x, y, gx, gy int
	var tail string
	n, err := fmt.Sscanf(text, "walk %d,%d>%d,%d%s", &x, &y, &gx, &gy, &tail)
	in := func(v int) bool { return v >= 0 && v < cfg.Size }
	if err != nil || n != 5 || tail != ":" || text != "walk "+cell(x, y)+">"+cell(gx, gy)+":" ||
		!in(x) || !in(y) || !in(gx) || !in(gy) || (x == gx && y == gy) {
		e.started = false
		return "", badPrompt(cfg.Name, text, fmt.Sprintf("\"walk x,y>gx,gy:\" with distinct cells in 0..%d", cfg.Size-1))
	}
	*e = gridEnv{task: e.task, x: x, y: y, gx: gx, gy: gy, episode: episode{started: true}}
	return text, nil
}

func (e *gridEnv) Step(action string) (string, float64, bool, error) {
	if done, err := e.next(); err != nil {
		return "", 0, done, err
	}
	T := e.task.cfg.MaxTurns
	shaping := shapingReward(T)
	reward := 0.0
	nx, ny := e.x, e.y
	if m := firstWord(action); m != "" {
		switch m[0] {
		case 'u', 'U':
			ny--
		case 'd', 'D':
			ny++
		case 'l', 'L':
			nx--
		case 'r', 'R':
			nx++
		}
	}
	moved := (nx != e.x || ny != e.y) && nx >= 0 && ny >= 0 && nx < e.task.cfg.Size && ny < e.task.cfg.Size
	if moved {
		reward += shaping
		if dist(nx, ny, e.gx, e.gy) < dist(e.x, e.y, e.gx, e.gy) {
			reward += shaping
		}
		e.x, e.y = nx, ny
	}
	obs := " " + cell(e.x, e.y) + ":"
	if e.x == e.gx && e.y == e.gy {
		obs, e.done = GridGoal, true
		reward += winReward(e.turn, T)
	}
	e.endIfOut(T)
	return obs, reward, e.done, nil
}

func dist(x, y, gx, gy int) int { return abs(x-gx) + abs(y-gy) }

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}
