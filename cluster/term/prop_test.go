package term

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// world is what the property test fed the core, to judge its effects.
type world struct {
	t       *rapid.T
	r       *rand.Rand // the inputs' choices, seeded by rapid
	now     time.Time
	tok     uint64 // the largest token handed out
	holding bool   // the lease is held (acquired, not lost, not resigned)
	held    uint64 // its token
	// saves: (token, step) → prompts of every SaveProgress emitted;
	// outstanding: the token's unacknowledged save (step), 0 none.
	saves       map[[2]uint64][]PromptAttempt
	outstanding map[uint64]int64
	lastSaved   map[uint64]int64
	// trained: (token, local step) fed as StepTrained.
	trained map[[2]uint64]bool
	// aborted: (token, group) reported aborted.
	aborted map[string]bool
	base    map[uint64]int64 // the claimed step a term started from
	done    int
	// fed: the last local step fed per token; groups: groups fed in steps.
	fed    map[uint64]int64
	groups []string            // every group fed
	unseen map[uint64][]string // groups fed whose consumed event was not fed yet
	// seen: groups whose consumed event was fed, per token; recorded:
	// (token, group) whose consumed transition was reported durable.
	seen     map[uint64][]string
	recorded map[string]bool
	// marking: per token, the steps whose MarkTrained is not answered.
	marking  map[uint64][]int64
	ckptNext map[uint64]int64 // the next version the trainer checkpoints
	stats    map[string]int
}

func pick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

// weighted lists the input kinds of draw, each as often as it should come.
var weighted = []int{0, 0, 1, 2, 3, 3, 4, 4, 5, 5, 5, 5, 5, 5, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 10, 10, 10, 10, 11, 12, 12, 12, 13, 13, 14, 14, 15, 16, 16, 17}

var (
	groupPool = []string{"g0", "g1", "g2", "g3", "g4", "g5"}
	nodePool  = []string{"n1", "n2", "n3", "n4"}
)

// check judges one Ready, produced by input in.
func (w *world) check(in Input, r Ready) {
	for _, e := range r.Effects {
		if !w.holding {
			switch e.(type) {
			case StopPipeline, Done:
			default:
				w.t.Fatalf("%T %+v while not holding the lease (input %T %+v)", e, e, in, in)
			}
		}
		w.stats[fmt.Sprintf("%T", e)]++
		switch v := e.(type) {
		case SaveProgress:
			w.checkSave(v.Progress)
		case MarkTrained:
			w.checkMark(in, v)
			w.marking[w.held] = append(w.marking[w.held], v.Step)
		case AbortGroups:
			for _, g := range v.Groups {
				k := fmt.Sprintf("%d/%s", w.held, g.Group)
				if w.aborted[k] {
					w.t.Fatalf("group %s of term %d reported aborted twice", g.Group, w.held)
				}
				w.aborted[k] = true
			}
		case StartPipeline:
			if _, ok := in.(ProgressClaimed); !ok {
				w.t.Fatalf("StartPipeline on %T", in)
			}
			w.base[v.Token] = v.From.Step
		case Done:
			if w.done++; w.done > 1 {
				w.t.Fatal("Done twice")
			}
		case StepDown:
			w.holding = false
		}
	}
}

// checkSave: with the lease's token, one at a time, in order, and only a
// step the trainer completed.
func (w *world) checkSave(p Progress) {
	if p.Token != w.held {
		w.t.Fatalf("SaveProgress with token %d; the lease's is %d", p.Token, w.held)
	}
	if s, ok := w.outstanding[p.Token]; ok && s != 0 {
		w.t.Fatalf("SaveProgress of step %d while step %d's is outstanding", p.Step, s)
	}
	if p.Step <= w.lastSaved[p.Token] {
		w.t.Fatalf("SaveProgress of step %d after step %d", p.Step, w.lastSaved[p.Token])
	}
	if !w.trained[[2]uint64{p.Token, uint64(p.Step - w.base[p.Token])}] {
		w.t.Fatalf("SaveProgress of step %d, which the trainer never completed", p.Step)
	}
	if m := w.marking[p.Token]; len(m) > 0 {
		w.t.Fatalf("SaveProgress of step %d while the marks of step %d are being written", p.Step, m[0])
	}
	for _, pa := range p.Prompts {
		if !w.recorded[fmt.Sprintf("%d/%s", p.Token, pa.Group)] {
			w.t.Fatalf("SaveProgress of step %d names group %s, whose consumed transition the ledger never recorded", p.Step, pa.Group)
		}
	}
	w.saves[[2]uint64{p.Token, uint64(p.Step)}] = p.Prompts
	w.outstanding[p.Token] = p.Step
	w.lastSaved[p.Token] = p.Step
}

// checkMark: trained only for a durable step: the acknowledged save of
// this term, or the previous holder's step found at the claim.
func (w *world) checkMark(in Input, v MarkTrained) {
	switch x := in.(type) {
	case ProgressSaved:
		prompts, ok := w.saves[[2]uint64{x.Token, uint64(v.Step)}]
		if !ok || x.Step != v.Step || fmt.Sprint(prompts) != fmt.Sprint(v.Prompts) {
			w.t.Fatalf("MarkTrained %+v on the acknowledgement of step %d (saved: %v %v)", v, x.Step, ok, prompts)
		}
	case ProgressClaimed:
		if v.Step != x.Prev.Step {
			w.t.Fatalf("MarkTrained of step %d at a claim of the previous holder's step %d", v.Step, x.Prev.Step)
		}
	default:
		w.t.Fatalf("MarkTrained %+v on %T", v, in)
	}
}

// draw picks the next input.
func (w *world) draw(c *Core) Input {
	tok := pick(w.r, []uint64{w.held, w.held, w.held, w.tok, w.held - 1})
	// Disruptions (a lost lease, lost quorum, a failure, a fenced save, a
	// stop) are rare enough for terms to make progress between them.
	kind := pick(w.r, weighted)
	// Keep the run moving: a node without the lease soon wins it, a claim
	// is soon answered.
	switch _, claiming := c.Holding(); {
	case !c.Quorate() && w.r.IntN(2) == 0:
		return QuorumChanged{Train: true}
	case !w.holding && w.r.IntN(2) == 0:
		kind = 0
	case claiming && c.t == nil && w.r.IntN(2) == 0:
		kind, tok = 4, w.held
	}
	switch {
	case kind <= 3:
		return w.drawNode(kind)
	case kind <= 8:
		return w.drawSteps(kind, tok)
	}
	return w.drawOther(kind, tok)
}

// drawNode draws a node-scoped input.
func (w *world) drawNode(kind int) Input {
	switch kind {
	case 0:
		if !w.holding || w.r.IntN(4) == 0 { // each acquisition has a new token
			w.tok += uint64(1 + w.r.IntN(3))
		}
		return LeaseChanged{Leader: true, Token: w.tok}
	case 1:
		return LeaseChanged{Leader: false}
	case 2:
		return QuorumChanged{Train: w.r.IntN(3) > 0}
	case 3:
		var ms []Member
		for i, n := range nodePool {
			if i == 0 || w.r.IntN(2) == 0 {
				m := Member{Name: n}
				if i%2 == 1 {
					m.Engines = map[string]string{n + "-engine-0": fmt.Sprintf("http://%s/%d", n, w.r.IntN(2))}
				}
				ms = append(ms, m)
			}
		}
		return MembersChanged{Members: ms}
	}
	return nil
}

// drawSteps draws a claim, a step, a consumed event or a checkpoint.
func (w *world) drawSteps(kind int, tok uint64) Input {
	switch kind {
	case 4:
		step := int64(w.r.IntN(12))
		var prompts []PromptAttempt
		if w.r.IntN(2) == 0 {
			prompts = []PromptAttempt{{Prompt: "p", Group: "gp"}}
		}
		prev := Progress{Step: step, Version: step, Checkpoint: "c", Token: w.held - 1, Holder: pick(w.r, []string{"", "n2", "n1"}), Prompts: prompts}
		cl := prev
		cl.Token, cl.Holder = tok, "n1"
		return ProgressClaimed{Token: tok, Prev: prev, Claimed: cl}
	case 5:
		s := w.fed[tok] + 1 // mostly the next step; sometimes a repeat or a gap
		s += int64(pick(w.r, []int{0, 0, 0, 0, -1, 1}))
		w.fed[tok] = max(w.fed[tok], s)
		w.trained[[2]uint64{tok, uint64(s)}] = true
		gs := []string{pick(w.r, groupPool)}
		if w.r.IntN(2) == 0 {
			gs = append(gs, pick(w.r, groupPool))
		}
		w.groups = append(w.groups, gs...)
		w.unseen[tok] = append(w.unseen[tok], gs...)
		return StepTrained{Token: tok, Step: s, Version: s, Groups: gs}
	case 7:
		g := pick(w.r, groupPool)
		switch u := w.unseen[tok]; {
		case len(u) > 0 && w.r.IntN(4) > 0:
			g, w.unseen[tok] = u[0], u[1:]
		case len(w.groups) > 0 && w.r.IntN(2) == 0:
			g = pick(w.r, w.groups)
		}
		w.seen[tok] = append(w.seen[tok], g)
		return PromptConsumed{Token: tok, Attempt: PromptAttempt{Prompt: "p-" + g, Group: g}}
	case 6:
		// The durable write of a consumed event seen (rarely one that
		// failed, or of a group never seen: the inputs are adversarial).
		g := pick(w.r, groupPool)
		if s := w.seen[tok]; len(s) > 0 && w.r.IntN(5) > 0 {
			g = s[0]
			w.seen[tok] = s[1:]
		}
		if w.r.IntN(20) == 0 {
			return LedgerWrite{Token: tok, Consumed: g, Err: "timeout", Refused: w.r.IntN(2) == 0}
		}
		if tok == w.held && w.holding {
			w.recorded[fmt.Sprintf("%d/%s", tok, g)] = true
		}
		return LedgerWrite{Token: tok, Consumed: g}
	case 8:
		v := int64(1 + w.r.IntN(12))
		if n := w.ckptNext[tok] + 1; n <= w.fed[tok] && w.r.IntN(4) > 0 {
			v, w.ckptNext[tok] = n, n
		}
		return CheckpointSaved{Token: tok, Version: v, Location: fmt.Sprintf("L%d", v)}
	}
	return nil
}

// drawOther draws an acknowledgement, a failure, a report of rollouts or
// engines, a probe or an observed progress.
func (w *world) drawOther(kind int, tok uint64) Input {
	switch kind {
	case 9:
		if s := w.outstanding[w.held]; s != 0 && w.r.IntN(4) > 0 {
			return ProgressSaved{Token: w.held, Step: s}
		}
		return ProgressSaved{Token: tok, Step: int64(w.r.IntN(15))}
	case 10:
		// The marks of the oldest durable step being marked are written
		// (rarely: they failed, or an answer for no marks at all).
		if m := w.marking[tok]; len(m) > 0 && w.r.IntN(8) > 0 {
			in := Marked{Token: tok, Step: m[0]}
			if w.r.IntN(25) == 0 {
				in.Err = "timeout"
			}
			if tok == w.held {
				w.marking[tok] = m[1:]
			}
			return in
		}
		s := int64(w.r.IntN(15))
		if i := slices.Index(w.marking[tok], s); i >= 0 && tok == w.held {
			// Drawn at random, it is the very answer the core waits for
			// (it completes any step whose marks are outstanding): the
			// marks of s are written. Left in marking, the next save was
			// judged "while the marks of step s are being written" (rapid
			// seed 0x534, checkpoints false).
			w.marking[tok] = slices.Delete(slices.Clone(w.marking[tok]), i, i+1)
		}
		return Marked{Token: tok, Step: s}
	case 11:
		return SaveFailed{Token: tok, Step: w.outstanding[tok], Fenced: w.r.IntN(2) == 0, Err: "refused"}
	case 12:
		var gs []GroupRef
		for _, g := range groupPool[:w.r.IntN(4)] {
			gs = append(gs, GroupRef{Group: g, Prompt: "p"})
		}
		return RolloutStatus{Token: tok, Node: pick(w.r, nodePool), Groups: gs}
	case 13:
		return EngineTarget{Token: tok, Engine: pick(w.r, []string{"n2-engine-0", "n4-engine-0"}), Version: int64(w.r.IntN(6))}
	case 14:
		return EngineServing{Token: tok, Engine: pick(w.r, []string{"n2-engine-0", "n4-engine-0"}), Version: int64(w.r.IntN(6))}
	case 15:
		if w.r.IntN(6) == 0 {
			return Stop{}
		}
		return Failed{Token: tok, Err: "x"}
	case 16:
		return Probe{Token: tok, Dep: "d", Err: pick(w.r, []string{"", "", "", "down"})}
	default:
		return ProgressObserved{Progress: Progress{Step: int64(w.r.IntN(13)), Holder: pick(w.r, nodePool)}}
	}
}

// Over random input sequences: no MarkTrained but for a durable step; no
// step saved (so none marked) that names a group whose consumed
// transition the ledger has not recorded, or while an earlier durable
// step's marks are being written; no
// lease-scoped effect while the lease is not held (a deposed holder only
// stops its pipeline); a step saved only once the trainer completed it,
// in order, one save at a time, with the lease's token; a dead node's
// group reported aborted at most once; Done at most once.
func TestPropertyDecisions(t *testing.T) {
	stats := map[string]int{}
	defer func() { t.Logf("effects over every run: %v", stats) }()
	rapid.Check(t, func(rt *rapid.T) {
		cfg := testConfig()
		cfg.Checkpoints = rapid.Bool().Draw(rt, "checkpoints")
		seed := rapid.Uint64().Draw(rt, "seed")
		c, err := New(cfg)
		if err != nil {
			rt.Fatal(err)
		}
		w := &world{t: rt, r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), now: t0, tok: 1, saves: map[[2]uint64][]PromptAttempt{}, outstanding: map[uint64]int64{},
			lastSaved: map[uint64]int64{}, trained: map[[2]uint64]bool{}, aborted: map[string]bool{}, base: map[uint64]int64{},
			fed: map[uint64]int64{}, unseen: map[uint64][]string{}, seen: map[uint64][]string{}, recorded: map[string]bool{}, marking: map[uint64][]int64{},
			ckptNext: map[uint64]int64{}, stats: stats}
		for range 1 + w.r.IntN(1000) {
			if w.r.IntN(5) == 0 {
				w.now = w.now.Add(time.Duration(w.r.IntN(5001)) * time.Millisecond)
				c.Tick(w.now)
				w.check(nil, c.Ready())
				c.Advance()
				continue
			}
			in := w.draw(c)
			switch v := in.(type) {
			case LeaseChanged:
				if v.Leader {
					if !w.holding || v.Token != w.held {
						w.outstanding[v.Token] = 0
					}
					w.holding, w.held = true, v.Token
				}
			case ProgressSaved:
				if v.Token == w.held && w.outstanding[v.Token] == v.Step {
					w.outstanding[v.Token] = 0
				}
			}
			c.Step(w.now, in)
			r := c.Ready()
			w.check(in, r)
			c.Advance()
			if v, ok := in.(LeaseChanged); ok && !v.Leader {
				w.holding = false
			}
			if _, ok := c.Holding(); ok != w.holding {
				rt.Fatalf("core holding %v; the lease says %v (%s)", ok, w.holding, c)
			}
		}
	})
}
