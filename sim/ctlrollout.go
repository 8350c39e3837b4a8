package sim

import (
	"fmt"
	"math"
	"time"

	"github.com/asyncrl/asyncrl/actors/rollout/outcome"
	"github.com/asyncrl/asyncrl/actors/router/policy"
	"github.com/asyncrl/asyncrl/messages"
)

type rgroup struct {
	// id is the controller core's group id (promptID#seq, or
	// promptID#epoch.seq after a restart: never reused).
	id     string
	prompt string
	trajs  []*rtraj
	p      float64 // probability a trajectory is rewarded
	// fate is the group's outcome as the rollout actor decides it (the
	// real core, actors/rollout/outcome): complete once every
	// trajectory ended, aborted if one of them did.
	fate *outcome.Group
	// storeBegan: when its store in the trajectory buffer began (term.go).
	storeBegan time.Time
}

type rtraj struct {
	id       string
	g        *rgroup
	idx      int  // index in the group
	ended    bool // finished or aborted: no more turns
	turns    int
	turn     int
	ctx      []int32 // prompt, generated and environment tokens
	vers     []int32 // policy version per token (0 for prompt/env tokens)
	mask     []uint8 // loss mask: 1 for generated tokens
	promptN  int
	maxTok   []int
	inflight bool
	engine   string
	charged  int64
	seq      int
	timeouts int
	avoid    []string
	minV     int64
	reward   float64
	// masked: every token is out of the loss (an odd group, inputs.go).
	masked bool
}

func promptTokens(p string) []int32 {
	h := policy.Hash64(p)
	n := promptBase + int(h%32)
	toks := make([]int32, n)
	for i := range toks {
		toks[i] = int32(1 + (h>>(uint(i)%56))%60)
	}
	return toks
}

// launch starts the rollout of a group the controller core admitted: n
// trajectories of 1..MaxTurns turns, each routed one turn at a time.
func (c *ctlNode) launch(m messages.PromptAssigned) {
	w := c.w
	g := &rgroup{id: m.GroupID, prompt: m.PromptID}
	// Some prompts are too easy or too hard (every trajectory scores the
	// same, so the filter drops the group); the rest are mixed.
	switch w.rng.Intn(6) {
	case 0:
		g.p = 0
	case 1:
		g.p = 1
	default:
		g.p = 0.25 + 0.5*w.rng.Float64()
	}
	w.logf("ctl: admit %s (scheduled v%d, attempt %d)", g.id, m.Version, m.Attempt)
	c.groups[g.id] = g
	g.fate = outcome.New(int(m.NSamples))
	for i := 0; i < int(m.NSamples); i++ {
		t := &rtraj{id: fmt.Sprintf("%s.%d", g.id, i), g: g, idx: i, turns: 1 + w.rng.Intn(w.wl.MaxTurns),
			ctx: promptTokens(g.prompt), minV: math.MaxInt64}
		t.promptN = len(t.ctx)
		t.vers, t.mask = make([]int32, len(t.ctx)), make([]uint8, len(t.ctx))
		for j := 0; j < t.turns; j++ {
			t.maxTok = append(t.maxTok, 4+w.rng.Intn(13))
		}
		g.trajs = append(g.trajs, t)
		c.trajs[t.id] = t
	}
	for _, t := range g.trajs {
		c.routeTurn(t)
	}
}

func (c *ctlNode) routeTurn(t *rtraj) {
	w := c.w
	if t.ended || t.inflight {
		return
	}
	if c.recovering {
		c.after(routeBackoff, "", func() { c.routeTurn(t) })
		return
	}
	if len(t.avoid) >= w.wl.Engines {
		t.avoid = nil
	}
	d := c.rt.Route(c.t(), c.request(t))
	if !d.OK() {
		c.after(routeBackoff, "", func() { c.routeTurn(t) })
		return
	}
	c.checkRoute(t, d)
	t.inflight, t.engine, t.charged = true, d.Replica, d.Tokens
	t.seq++
	seq := t.seq
	w.logf("ctl: route %s/%d %s", t.id, t.turn, d)
	w.send(c.bus, turnSubject(d.Replica), messages.TurnRequest{
		Header:       messages.Header{RunID: runID, Sender: "ctl", Version: c.minVersion},
		TrajectoryID: t.id, GroupID: t.g.id, TurnIndex: int32(t.turn), Engine: d.Replica,
		Tokens: t.ctx, MaxTokens: int32(t.maxTok[t.turn])})
	c.after(turnTimeout, "", func() {
		if t.inflight && t.seq == seq && !t.ended {
			c.onTimeout(t)
		}
	})
}

// checkRoute is the routing invariant, against what the router shell was
// told (state and acked version from the engine, minimum from the
// publisher) and the core's own health view.
func (c *ctlNode) checkRoute(t *rtraj, d policy.Decision) {
	w := c.w
	w.orc.checks++
	k := c.know[d.Replica]
	rv, _ := c.rt.Replica(d.Replica)
	switch {
	case !rv.Healthy:
		w.fail(InvRouting, "%s/%d routed to unhealthy %s", t.id, t.turn, d.Replica)
	case k.state == policy.Paused || k.state == policy.Updating:
		w.fail(InvRouting, "%s/%d routed to %s which reported %s", t.id, t.turn, d.Replica, k.state)
	case k.version < c.minVersion:
		w.fail(InvRouting, "%s/%d routed to %s serving version %d below the minimum %d", t.id, t.turn, d.Replica, k.version, c.minVersion)
	}
}

func (c *ctlNode) onTimeout(t *rtraj) {
	w := c.w
	t.inflight = false
	c.rt.Done(c.t(), t.engine, t.charged)
	_, _ = c.rt.ObserveHealth(t.engine, false, false)
	t.timeouts++
	t.avoid = append(t.avoid, t.engine)
	w.logf("ctl: %s/%d timed out on %s (%d)", t.id, t.turn, t.engine, t.timeouts)
	if t.timeouts >= maxTimeouts {
		c.endTraj(t, "turn timed out "+itoa(int64(t.timeouts))+" times")
		return
	}
	c.routeTurn(t)
}

func versionSpan(r messages.TurnResult) (lo, hi int64) {
	if len(r.TokenVersions) == 0 {
		return r.ServingVersion, r.ServingVersion
	}
	lo, hi = math.MaxInt64, math.MinInt64
	for _, v := range r.TokenVersions {
		lo, hi = min(lo, int64(v)), max(hi, int64(v))
	}
	return lo, hi
}

func (c *ctlNode) onResult(r messages.TurnResult) {
	w := c.w
	t := c.trajs[r.TrajectoryID]
	if t == nil || !t.inflight || int(r.TurnIndex) != t.turn || r.Engine != t.engine {
		w.logf("ctl: stale result %s/%d from %s ignored", r.TrajectoryID, r.TurnIndex, r.Engine)
		return
	}
	t.inflight = false
	c.rt.Done(c.t(), t.engine, t.charged)
	_, _ = c.rt.ObserveHealth(t.engine, true, false)
	t.avoid = nil
	lo, _ := versionSpan(r)
	t.minV = min(t.minV, lo)
	w.orc.tokens(t.g.id, lo)
	t.ctx = append(t.ctx, r.Tokens...)
	for i := range r.Tokens {
		v := int32(r.ServingVersion)
		if i < len(r.TokenVersions) {
			v = r.TokenVersions[i]
		}
		t.vers, t.mask = append(t.vers, v), append(t.mask, 1)
	}
	t.turn++
	if t.turn < t.turns {
		if c.envFails(t) {
			return
		}
		for i := 0; i < envTokens; i++ {
			t.ctx, t.vers, t.mask = append(t.ctx, int32(61+i)), append(t.vers, 0), append(t.mask, 0)
		}
		c.after(envDelay, "", func() { c.routeTurn(t) })
		return
	}
	if w.rng.Float64() < t.g.p {
		t.reward = 1
	}
	c.endTraj(t, "")
}

// endTraj: trajectory t ended, finished (reason "") or aborted; its
// siblings run on (a real rollout waits for every episode of a group).
// The outcome core decides the group's fate once the last one ended.
func (c *ctlNode) endTraj(t *rtraj, reason string) {
	w := c.w
	if t.inflight {
		c.rt.Done(c.t(), t.engine, t.charged)
		t.inflight = false
	}
	t.ended = true
	c.rt.Finish(c.t(), t.id)
	delete(c.trajs, t.id)
	if reason != "" {
		w.logf("ctl: %s aborted: %s", t.id, reason)
	}
	g := t.g
	st, err := episodeEnded(g.fate, t.idx, reason)
	if err != nil {
		w.fail(InvProtocol, "rollout outcome of %s: %v", g.id, err)
		return
	}
	switch st {
	case outcome.Storing:
		c.groupReady(g)
	case outcome.Aborted:
		c.abortGroup(g)
	}
}

// stored steps the outcome core's Storing stage with the store's answer
// (errText "" stored): Ready, or Aborted with one report (the store gave
// up), which goes to the controller core. It says whether the group was
// stored.
func (c *ctlNode) stored(g *rgroup, errText string) bool {
	st, err := g.fate.Stored(errText)
	if err != nil {
		c.w.fail(InvProtocol, "rollout outcome of %s: %v", g.id, err)
		return false
	}
	if st == outcome.Aborted {
		c.abortGroup(g)
		return false
	}
	return true
}

// episodeEnded steps the outcome core with episode i's end (reason ""
// when it finished) and, once the last ended and none aborted, with its
// packing — which never fails in the simulator (the default world packs
// at judge time, encodeBatch, from the buffer) — into the trajectory
// buffer: Storing, Aborted, or Running while episodes are left. Both
// worlds' rollouts step the core through it.
func episodeEnded(fate *outcome.Group, i int, reason string) (outcome.Stage, error) {
	st, err := fate.Ended(i, reason)
	if err != nil || st != outcome.Packing {
		return st, err
	}
	return fate.Packed("", true)
}

// abortGroup sends the aborted group's EpisodeAborted reports, as the
// outcome core lists them (one per trajectory), to the controller core.
func (c *ctlNode) abortGroup(g *rgroup) {
	w := c.w
	delete(c.groups, g.id)
	aborts := g.fate.Aborts()
	w.logf("ctl: abort %s: %d reports", g.id, len(aborts))
	for _, ab := range aborts {
		m := messages.EpisodeAborted{Header: messages.Header{RunID: runID, Sender: "ctl"},
			PromptID: g.prompt, GroupID: g.id, Reason: ab.Reason}
		if ab.Index >= 0 {
			m.TrajectoryID = g.trajs[ab.Index].id
		}
		c.stepCore(m)
	}
}

// encodeBatch packs the groups' trajectories (tokens, loss mask, policy
// version per token) as an Arrow IPC token batch, as a rollout actor
// hands a finished group on.
func encodeBatch(tokenRewards bool, groups ...*rgroup) ([]byte, error) {
	tb, err := messages.NewTokenBatch(messages.BatchSpec{TokenRewards: tokenRewards})
	if err != nil {
		return nil, err
	}
	for _, g := range groups {
		for _, t := range g.trajs {
			tr := messages.Trajectory{ID: t.id, GroupID: g.id, Reward: float32(t.reward),
				PromptLen: int32(t.promptN), TokenIDs: t.ctx, Logprobs: make([]float32, len(t.ctx)),
				LossMask: t.mask, PolicyVersions: t.vers}
			if tokenRewards {
				// The reward on the last token, zeros before: the sum is
				// the trajectory's reward.
				tr.TokenRewards = make([]float32, len(t.ctx))
				tr.TokenRewards[len(t.ctx)-1] = float32(t.reward)
			}
			if err := tb.Append(tr); err != nil {
				return nil, err
			}
		}
	}
	return messages.EncodeTokenBatch(tb)
}
