package term

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/asyncrl/asyncrl/cluster/termwatch"
)

// termState is one running term: what it trained, what is durable, and
// what it knows of the rollout nodes and engines that serve it.
type termState struct {
	name    string
	base    Progress // the claimed progress the term started from
	steps   int64    // steps to run in this term
	watch   *termwatch.Watch
	started bool
	router  string
	// phase: the last phase its start reached (StartPhase), at phaseAt.
	phase   string
	phaseAt time.Time

	lastAnnounce, lastResend time.Time

	// trained: steps the trainer completed, not durable yet, in order.
	trained []StepTrained
	// saving: the outstanding SaveProgress, nil when none.
	saving *pendingSave
	// sent: saves asked for and not answered (Plant.TwoSavesOutstanding
	// only; the correct core has at most saving).
	sent []*pendingSave
	// marking: durable steps whose trained marks (MarkTrained) are not
	// written yet; no step is saved while there is one.
	marking map[int64]bool
	// saved counts the term's durable steps.
	saved int64
	// durable is the last durable progress (base before the first save).
	durable Progress
	// groups: group → prompt attempt, from the consumed events;
	// recorded: the groups whose consumed transition the durable ledger
	// holds (LedgerWrite.Consumed). A step is saved only once every one
	// of its groups is in both.
	groups   map[string]PromptAttempt
	recorded map[string]bool
	// ckpts: local version → checkpoint location, until recorded.
	ckpts map[int64]string

	// rollouts: node → groups it last reported in flight; seen: nodes the
	// membership listed at some point (one that reports before the
	// holder's gossip heard of it has not left); aborted: groups already
	// reported aborted (never twice).
	rollouts map[string][]GroupRef
	seen     map[string]bool
	aborted  map[string]bool

	// engines: the remote engines registered, by name; nodes: node →
	// its engines (name → URL).
	engines map[string]*engineState
	nodes   map[string]map[string]string
}

type pendingSave struct {
	st StepTrained
	p  Progress
}

type engineState struct {
	node            string
	target, serving int64 // -1: none
}

func newTermState(name string, p Progress, steps int64, w *termwatch.Watch, now time.Time, live map[string]Member) *termState {
	t := &termState{name: name, base: p, steps: steps, watch: w, durable: p, lastAnnounce: now, lastResend: now, phase: "claimed", phaseAt: now,
		groups: map[string]PromptAttempt{}, recorded: map[string]bool{}, marking: map[int64]bool{}, ckpts: map[int64]string{}, rollouts: map[string][]GroupRef{},
		seen: map[string]bool{}, aborted: map[string]bool{}, engines: map[string]*engineState{}, nodes: map[string]map[string]string{}}
	for n := range live {
		t.seen[n] = true
	}
	return t
}

// stepTrained queues a completed step (in order; a repeat is ignored).
func (c *Core) stepTrained(v StepTrained) {
	t := c.t
	last := t.saved
	if n := len(t.trained); n > 0 {
		last = t.trained[n-1].Step
	}
	if v.Step <= last {
		c.ignore("StepTrained %d: already have step %d", v.Step, last)
		return
	}
	t.trained = append(t.trained, v)
	c.trySave()
}

// checkpointSaved notes where local version v's checkpoint lies and lets
// the store prune what the durable progress no longer needs.
func (c *Core) checkpointSaved(v CheckpointSaved) {
	t := c.t
	t.ckpts[v.Version] = v.Location
	c.effect(Prune{Version: t.base.Version + v.Version, Token: c.token, Durable: t.durable.Checkpoint})
	c.trySave()
}

// trySave asks for the next step's fenced progress write once nothing is
// outstanding and the step's prompts (and checkpoint) are known. Steps
// are saved one at a time, in order.
func (c *Core) trySave() {
	t := c.t
	if t == nil || len(t.trained) == 0 || (c.phase != running && c.phase != stopping) {
		return
	}
	if c.cfg.Plant.TwoSavesOutstanding {
		c.trySaveAll()
		return
	}
	if t.saving != nil || (len(t.marking) > 0 && !c.cfg.Plant.MarksUnordered) {
		return
	}
	if ps, ok := c.nextSave(t.trained[0]); ok {
		t.saving = ps
		c.saveEffects(ps)
	}
}

// saveEffects asks for one save (with a planted early MarkTrained).
func (c *Core) saveEffects(ps *pendingSave) {
	c.effect(SaveProgress{Progress: ps.p})
	if c.cfg.Plant.MarkBeforeDurable {
		c.effect(MarkTrained{Step: ps.p.Step, Prompts: ps.p.Prompts})
	}
}

// trySaveAll is the planted TwoSavesOutstanding: every trained step whose
// prompts are known is saved at once; saving is the oldest unanswered.
func (c *Core) trySaveAll() {
	t := c.t
	for i := len(t.sent); i < len(t.trained); i++ {
		ps, ok := c.nextSave(t.trained[i])
		if !ok {
			return
		}
		t.sent = append(t.sent, ps)
		c.saveEffects(ps)
	}
	if len(t.sent) > 0 {
		t.saving = t.sent[0]
	}
}

// nextSave is the save of trained step s, once its prompts (and
// checkpoint) are known.
func (c *Core) nextSave(s StepTrained) (*pendingSave, bool) {
	t := c.t
	prompts := make([]PromptAttempt, 0, len(s.Groups))
	for _, g := range s.Groups {
		pa, ok := t.groups[g]
		if !ok {
			return nil, false // its consumed event is still on its way
		}
		if !t.recorded[g] && !c.cfg.Plant.SaveBeforeRecorded {
			// Its consumed transition is not durable yet (the ledger's
			// stream may be electing a leader): the step's trained marks
			// would be refused as settling a prompt never consumed, and
			// the prompt would end neither trained nor in flight.
			return nil, false
		}
		prompts = append(prompts, pa)
	}
	p := Progress{Step: t.base.Step + s.Step, Version: t.base.Version + s.Version, Token: c.token, Holder: c.cfg.Node, Prompts: prompts}
	if c.cfg.Checkpoints {
		loc, ok := t.ckpts[s.Version]
		if !ok {
			return nil, false // the trainer's checkpoint is still on its way
		}
		p.Checkpoint = loc
	}
	return &pendingSave{st: s, p: p}, true
}

// ledgerWrite: a durable-ledger write's outcome. A failed write is ill
// health for the watch (a refusal is an answer, not ill health); the
// consumed transition of a group, once recorded, lets a step that trained
// the group be saved — one refused or failed for good can never be, so
// the term ends (a clean term resumes from the durable step) instead of
// waiting for its watch.
func (c *Core) ledgerWrite(now time.Time, v LedgerWrite) {
	if !v.Refused {
		c.probe(now, LedgerWrites, v.Err)
	}
	if v.Consumed == "" {
		return
	}
	if v.Err != "" {
		if c.t.recorded[v.Consumed] {
			return // a copy of an event already recorded
		}
		c.fail(fmt.Sprintf("the durable ledger did not record group %s consumed: %s", v.Consumed, v.Err), ReasonFailed)
		return
	}
	c.t.recorded[v.Consumed] = true
	c.trySave()
}

// progressSaved: the step is durable. Say so, mark its prompts trained
// (only now: a prompt counts as trained together with the durable step
// that trained it), and save the next one; after the last, the run is
// complete.
func (c *Core) progressSaved(now time.Time, v ProgressSaved) {
	t := c.t
	if t.saving == nil || t.saving.p.Step != v.Step {
		c.ignore("ProgressSaved of step %d: not the outstanding save", v.Step)
		return
	}
	s, p := t.saving.st, t.saving.p
	t.saving, t.trained = nil, t.trained[1:]
	if len(t.sent) > 0 {
		t.sent = t.sent[1:]
	}
	t.saved, t.durable = s.Step, p
	for ver := range t.ckpts {
		if ver <= s.Version {
			delete(t.ckpts, ver)
		}
	}
	t.watch.StepDone(now)
	c.failed = 0
	c.event(Event{Kind: StepDurable, Token: c.token, Step: p.Step, Version: p.Version, Reward: s.Reward, Mismatch: s.Mismatch,
		SameVersion: s.SameVersion, SameVersionTokens: s.SameVersionTokens})
	if !c.cfg.Plant.MarkBeforeDurable {
		c.effect(MarkTrained{Step: p.Step, Prompts: p.Prompts})
		t.marking[p.Step] = true
	}
	if t.saved >= t.steps {
		wasStopping := c.phase == stopping
		if !wasStopping {
			c.effect(StopPipeline{Token: c.token})
		}
		c.event(Event{Kind: RunComplete, Token: c.token, Step: p.Step})
		c.effect(Finish{Token: c.token})
		c.markDone()
		c.phase = finished
		if wasStopping {
			c.stepDown(ReasonStopping)
		}
		return
	}
	c.trySave()
	c.stoppedSaving()
}

// stoppedSaving: a stopping term gives the lease up once nothing it can
// save is left (no save, no marks outstanding, and the next step cannot
// be saved).
func (c *Core) stoppedSaving() {
	if t := c.t; c.phase == stopping && t.saving == nil && len(t.marking) == 0 {
		c.stepDown(ReasonStopping)
	}
}

// marked: a durable step's marks are written; the next step may be
// saved. Marks that could not be written end the term: the step is the
// last durable one, whose prompts the next claim marks.
func (c *Core) marked(v Marked) {
	t := c.t
	if !t.marking[v.Step] {
		c.ignore("Marked of step %d: no marks outstanding for it", v.Step)
		return
	}
	if v.Err != "" {
		c.fail(fmt.Sprintf("trained marks of step %d not written: %s", v.Step, v.Err), ReasonFailed)
		return
	}
	delete(t.marking, v.Step)
	c.trySave()
	c.stoppedSaving()
}

// rolloutStatus remembers what a rollout node holds in flight now.
func (c *Core) rolloutStatus(v RolloutStatus) {
	if v.Node == "" || v.Node == c.cfg.Node {
		return // this node's own rollouts stop with its pipeline
	}
	c.t.rollouts[v.Node] = slices.Clone(v.Groups)
	if _, live := c.live[v.Node]; !live && c.t.seen[v.Node] {
		c.reconcileRollouts() // it left before its last report landed
	}
}

// membersChanged: the membership the holder sees now. A rollout node that
// left takes its groups with it (reported aborted, once each); an engine
// node that left takes its engines out of routing; a node that came back
// with other engines has them replaced.
func (c *Core) membersChanged(ms []Member) {
	c.live = make(map[string]Member, len(ms))
	for _, m := range ms {
		c.live[m.Name] = m
	}
	if c.t == nil || c.phase != running {
		return
	}
	for n := range c.live {
		c.t.seen[n] = true
	}
	c.reconcileRollouts()
	c.reconcileEngines()
}

func (c *Core) reconcileRollouts() {
	t := c.t
	for _, node := range slices.Sorted(maps.Keys(t.rollouts)) {
		if _, live := c.live[node]; live || !t.seen[node] {
			continue
		}
		var lost []GroupRef
		for _, g := range t.rollouts[node] {
			if !t.aborted[g.Group] {
				t.aborted[g.Group] = true
				lost = append(lost, g)
			}
		}
		delete(t.rollouts, node)
		if len(lost) > 0 && !c.cfg.Plant.ForgetDeadNodeGroups {
			c.effect(AbortGroups{Node: node, Groups: lost})
			c.event(Event{Kind: GroupsRequeued, Token: c.token, Node: node, Count: len(lost)})
		}
	}
}

// startEngines registers the engines of the members at the term's start.
func (c *Core) startEngines() { c.reconcileEngines() }

func (c *Core) reconcileEngines() {
	t := c.t
	for _, node := range slices.Sorted(maps.Keys(t.nodes)) {
		if m, ok := c.live[node]; !ok || len(m.Engines) == 0 {
			names := slices.Sorted(maps.Keys(t.nodes[node]))
			for _, n := range names {
				delete(t.engines, n)
			}
			delete(t.nodes, node)
			c.effect(RemoveEngines{Node: node, Names: names})
		}
	}
	for _, node := range slices.Sorted(maps.Keys(c.live)) {
		eps := c.live[node].Engines
		cur, known := t.nodes[node]
		if len(eps) == 0 || (known && maps.Equal(cur, eps)) {
			continue
		}
		// A restarted node comes back with new URLs: the engines it no
		// longer advertises go; the others are replaced in place (its new
		// engines hold nothing yet).
		var gone []string
		for _, n := range slices.Sorted(maps.Keys(cur)) {
			if _, ok := eps[n]; !ok {
				gone = append(gone, n)
				delete(t.engines, n)
			}
		}
		if len(gone) > 0 {
			c.effect(RemoveEngines{Node: node, Names: gone})
		}
		t.nodes[node] = maps.Clone(eps)
		for n := range eps {
			t.engines[n] = &engineState{node: node, target: -1, serving: -1}
		}
		c.effect(AddEngines{Node: node, Engines: maps.Clone(eps)})
	}
}

// engineTarget sends a remote engine its target (the publisher's command).
func (c *Core) engineTarget(v EngineTarget) {
	e, ok := c.t.engines[v.Engine]
	if !ok {
		c.ignore("EngineTarget for %s: not a remote engine of term %s", v.Engine, c.t.name)
		return
	}
	e.target = max(e.target, v.Version)
	c.effect(SendLoadWeights{Node: e.node, Engine: v.Engine, Version: v.Version})
}

// engineServing records an engine's ack: the resends stop once it serves
// its target.
func (c *Core) engineServing(v EngineServing) {
	if e, ok := c.t.engines[v.Engine]; ok {
		e.serving = max(e.serving, v.Version)
	}
}

// resend repeats the target of every remote engine that does not serve it
// yet (a command lost in a reconnect, or sent while the host switched terms).
func (c *Core) resend() {
	if c.cfg.Plant.NeverResend {
		return
	}
	for _, n := range slices.Sorted(maps.Keys(c.t.engines)) {
		if e := c.t.engines[n]; e.target >= 0 && e.serving < e.target {
			c.effect(SendLoadWeights{Node: e.node, Engine: n, Version: e.target})
		}
	}
}

// String describes the core's state (debugging, failing tests).
func (c *Core) String() string {
	s := fmt.Sprintf("phase %d token %d quorate %v done %v", c.phase, c.token, c.quorate, c.done)
	if t := c.t; t != nil {
		s += fmt.Sprintf(" term %s saved %d/%d trained %d saving %v", t.name, t.saved, t.steps, len(t.trained), t.saving != nil)
	}
	return s
}

// startState says where a term that has not started stands: the last
// phase of its start, and its engines — none advertised, none serving
// the term's version 0 yet — for the step-down's reason.
func (c *Core) startState(now time.Time) string {
	t := c.t
	serving, sent := 0, 0
	for _, e := range t.engines {
		if e.serving >= 0 {
			serving++
		}
		if e.target >= 0 {
			sent++
		}
	}
	engines := fmt.Sprintf("engines: %d registered, %d sent LoadWeights, %d serving", len(t.engines), sent, serving)
	if len(t.engines) == 0 {
		engines = "no member advertises an engine"
	}
	router := "router not listening"
	if t.router != "" {
		router = "router at " + t.router
	}
	return fmt.Sprintf("last phase %q %s ago; %s; %s", t.phase, now.Sub(t.phaseAt), router, engines)
}
