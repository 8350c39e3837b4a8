package node

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/asyncrl/asyncrl/actors/rollout"
	"github.com/asyncrl/asyncrl/actors/trainer"
)

// progress is the live view: one updating line on a terminal, one plain
// line per step otherwise.
type progress struct {
	n     *Node
	shown int
	width int
}

func newProgress(n *Node) *progress { return &progress{n: n} }

// rolloutTotals sums the rollout actors' counters.
func (n *Node) rolloutTotals() rollout.Stats {
	var t rollout.Stats
	for _, r := range n.rollouts {
		t.Add(r.Stats())
	}
	return t
}

func (p *progress) line(last trainer.StepRecord) string {
	n := p.n
	kept, dropped, _, stale := n.ledger.counts()
	el := time.Since(n.start).Seconds()
	tot := n.rolloutTotals()
	vs := make([]string, len(n.engines))
	for i, e := range n.engines {
		vs[i] = strconv.FormatInt(e.E.Version(), 10)
	}
	return fmt.Sprintf("step %d/%d  v%d  reward %.3f  groups kept %d dropped %d  staleness max %d/%d  %.0f tok/s  engines v[%s]  %.0fs",
		last.Step, n.cfg.Run.Steps, last.Version, last.RewardMean, kept, dropped, stale, n.cfg.Trainer.MaxStalenessSteps,
		float64(tot.Tokens)/max(el, 1e-9), strings.Join(vs, ","), el)
}

// update shows the steps trained since the last call (only those are
// read: a run of days must not copy every step record each poll).
func (p *progress) update() {
	w := p.n.opts.Progress
	if w == nil || p.n.stepCount() == p.shown {
		return
	}
	steps, next := p.n.Steps(p.shown)
	if len(steps) == 0 {
		return
	}
	if p.n.opts.Terminal {
		l := p.line(steps[len(steps)-1])
		pad := ""
		if len(l) < p.width {
			pad = strings.Repeat(" ", p.width-len(l))
		}
		p.width = len(l)
		fmt.Fprint(w, "\r"+l+pad)
		p.shown = next
		return
	}
	for _, s := range steps {
		fmt.Fprintln(w, p.line(s))
	}
	p.shown = next
}

// finish ends the updating line.
func (p *progress) finish() {
	if p != nil && p.n.opts.Progress != nil && p.n.opts.Terminal && p.shown > 0 {
		fmt.Fprintln(p.n.opts.Progress)
	}
}
