package term

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/asyncrl/asyncrl/cluster/termwatch"
)

// ErrBadConfig wraps invalid configurations.
var ErrBadConfig = errors.New("term: bad config")

// LedgerWrites names the durable ledger's writes as a dependency of the
// term's watch.
const LedgerWrites = "durable ledger writes"

// Config configures a node's core.
type Config struct {
	// Node is this node's name (the progress's Holder).
	Node string
	// Run is the run's base id; term Token runs as "<Run>-t<Token>".
	Run string
	// Steps is run.steps: the run is complete at that durable step.
	Steps int64
	// Checkpoints: the trainer is checkpointed with every step (not a
	// remote trainer backend); a step is saved with its checkpoint's
	// location, and progress past version 0 without one is refused.
	Checkpoints bool
	// Watch bounds a term's stall (termwatch).
	Watch termwatch.Config
	// AnnounceEvery is how often the term is announced (default 1s);
	// ResendEvery how often an engine that has not acked its target is
	// sent it again (default 2s).
	AnnounceEvery, ResendEvery time.Duration
	// Recontend is how long a node that gave the lease up waits before it
	// contends again (StepDown.Wait; default DefaultRecontend, or
	// RecontendMax if that is smaller). After a term that failed
	// (ReasonFailed, ReasonStalled), the wait doubles with each of this
	// node's failed terms since its last durable step after the first, up
	// to RecontendMax (default DefaultRecontendMax, or Recontend if that is
	// larger): a node whose terms cannot start — a trainer it cannot run,
	// a state it cannot load — stops taking the lease every second from a
	// standby that could train. Other step-downs wait Recontend.
	Recontend, RecontendMax time.Duration
	// FailedInARow seeds that count: this node's terms that failed since
	// its last durable step, before this core (a shell that makes a core
	// per contention carries StepDown.FailedInARow over).
	FailedInARow int
	// Plant plants bugs for the simulator (sim's failover scenario);
	// production leaves it zero, the correct core.
	Plant Plant
}

// Plant holds planted bugs: switches that break the core on purpose, so
// the simulator can prove its invariants find them (like
// controller.Config.Plant). The zero value plants nothing.
type Plant struct {
	// ForgetDeadNodeGroups: a rollout node that left is forgotten without
	// reporting its groups aborted (no AbortGroups).
	ForgetDeadNodeGroups bool
	// ForgetPrevHolder: a claim does not requeue what the previous holder
	// had in flight (no RequeueStale).
	ForgetPrevHolder bool
	// RequeuePrevHolderOnly: a claim requeues only what the progress's
	// Holder had in flight (RequeueNode), not what the holders before it
	// left when a claimer died between its claim and its requeue.
	RequeuePrevHolderOnly bool
	// MarkBeforeDurable: a step's prompts are marked trained with its
	// SaveProgress, before the save is acknowledged.
	MarkBeforeDurable bool
	// IgnoreFencedSave: a save refused by the fence (SaveFailed Fenced) is
	// taken as acknowledged; the deposed term goes on.
	IgnoreFencedSave bool
	// TwoSavesOutstanding: the next step's SaveProgress goes out without
	// waiting for the outstanding one's answer.
	TwoSavesOutstanding bool
	// NeverResend: an engine that has not acked its target is never sent
	// it again.
	NeverResend bool
	// MarksUnordered: the next step is saved while the last durable
	// step's trained marks are still being written (the core before issue
	// 37): a holder killed then loses those marks for good, since a claim
	// marks only the last durable step's prompts.
	MarksUnordered bool
	// NoStartBound: the term's watch has no start bound of its own
	// (Watch.StartAfter ignored: the core before issue 37), so a term
	// whose start hangs sits on the lease until StallAfter.
	NoStartBound bool
	// SaveBeforeRecorded: a step is saved once its prompts' consumed
	// events were seen (PromptConsumed), before the durable ledger
	// recorded them (LedgerWrite.Consumed) — the core before issue 37,
	// whose trained marks could reach the ledger before the consumed
	// transitions they settle.
	SaveBeforeRecorded bool
	// IgnoreQuorumLoss: a holder whose side lost quorum notes it and runs
	// on (no StopPipeline, no StepDown). Only issue 37's quorum-loss
	// input reaches it.
	IgnoreQuorumLoss bool
}

// Validate names the field at fault.
func (c Config) Validate() error {
	switch {
	case c.Node == "":
		return fmt.Errorf("%w: Node is empty", ErrBadConfig)
	case c.Run == "":
		return fmt.Errorf("%w: Run is empty", ErrBadConfig)
	case c.Steps <= 0:
		return fmt.Errorf("%w: Steps %d (want > 0)", ErrBadConfig, c.Steps)
	case c.AnnounceEvery < 0 || c.ResendEvery < 0:
		return fmt.Errorf("%w: AnnounceEvery %s, ResendEvery %s (want >= 0; 0 is the default)", ErrBadConfig, c.AnnounceEvery, c.ResendEvery)
	case c.Recontend < 0:
		return fmt.Errorf("%w: Recontend %s (want >= 0; 0 is the default)", ErrBadConfig, c.Recontend)
	case c.RecontendMax < 0:
		return fmt.Errorf("%w: RecontendMax %s (want >= 0; 0 is the default)", ErrBadConfig, c.RecontendMax)
	case c.RecontendMax > 0 && c.RecontendMax < c.Recontend:
		return fmt.Errorf("%w: RecontendMax %s below Recontend %s", ErrBadConfig, c.RecontendMax, c.Recontend)
	case c.FailedInARow < 0:
		return fmt.Errorf("%w: FailedInARow %d (want >= 0)", ErrBadConfig, c.FailedInARow)
	}
	if err := c.Watch.Validate(); err != nil {
		return fmt.Errorf("%w: Watch: %w", ErrBadConfig, err)
	}
	return nil
}

// TermName is the run id of term token.
func TermName(run string, token uint64) string { return fmt.Sprintf("%s-t%d", run, token) }

// PromptID qualifies a term's prompt id in the durable ledger: each term
// draws its prompts afresh, so two terms' ids must not collide.
func PromptID(token uint64, id string) string { return fmt.Sprintf("t%d/%s", token, id) }

// PromptTokenOf is the token a qualified prompt id (PromptID) names; ok
// false for an id PromptID did not make.
func PromptTokenOf(qualified string) (token uint64, ok bool) {
	rest, found := strings.CutPrefix(qualified, "t")
	if !found {
		return 0, false
	}
	num, _, found := strings.Cut(rest, "/")
	if !found || num == "" {
		return 0, false
	}
	tok, err := strconv.ParseUint(num, 10, 64)
	return tok, err == nil
}

// phase is where a node stands with the trainer lease.
type phase int

const (
	standby  phase = iota // not holding the lease
	claiming              // holding; the progress claim is outstanding
	running               // holding; the pipeline was started
	stopping              // holding; Stop: saving what is left, then resign
	finished              // holding; the run is complete
)

// Core is a node's trainer-lease agent, decisions only. It is not safe
// for concurrent use: one goroutine steps it and applies its Ready.
type Core struct {
	cfg     Config
	quorate bool
	phase   phase
	token   uint64 // the lease's token while holding
	done    bool
	live    map[string]Member // the latest membership
	t       *termState        // the running term (nil in standby and claiming)
	// failed counts this node's terms that failed (ReasonFailed,
	// ReasonStalled) since its last durable step (Config.FailedInARow).
	failed int
	ready  Ready
}

// New returns a standby core; this node's side starts quorate (it knows
// only itself).
func New(cfg Config) (*Core, error) {
	if cfg.AnnounceEvery == 0 {
		cfg.AnnounceEvery = time.Second
	}
	if cfg.ResendEvery == 0 {
		cfg.ResendEvery = 2 * time.Second
	}
	if err := cfg.Validate(); err != nil { // the values as given
		return nil, err
	}
	switch {
	case cfg.Recontend == 0 && cfg.RecontendMax == 0:
		cfg.Recontend, cfg.RecontendMax = DefaultRecontend, DefaultRecontendMax
	case cfg.Recontend == 0:
		cfg.Recontend = min(DefaultRecontend, cfg.RecontendMax)
	case cfg.RecontendMax == 0:
		cfg.RecontendMax = max(DefaultRecontendMax, cfg.Recontend)
	}
	if cfg.Plant.NoStartBound {
		cfg.Watch.StartAfter = 0
	}
	return &Core{cfg: cfg, quorate: true, live: map[string]Member{}, failed: cfg.FailedInARow}, nil
}

// The waits before a node that gave the lease up contends again
// (Config.Recontend, Config.RecontendMax).
const (
	DefaultRecontend    = time.Second
	DefaultRecontendMax = 30 * time.Second
)

// recontendWait is the wait after a step-down for r: Recontend, and
// after a failed or stalled term Recontend doubled for each of this
// node's failed terms in a row after the first (1s, 1s, 2s, 4s … with the
// default), at most RecontendMax. A step-down that is no failure of this
// node's (quorum, fenced, stopping) keeps the count and waits Recontend:
// a node that regains quorum contends again at once.
func (c *Core) recontendWait(r Reason) time.Duration {
	w := c.cfg.Recontend
	if r != ReasonFailed && r != ReasonStalled {
		return w
	}
	for i := 1; i < c.failed; i++ {
		if w > c.cfg.RecontendMax/2 {
			return c.cfg.RecontendMax // doubling would pass it (or overflow)
		}
		w *= 2
	}
	return w
}

// Ready returns the effects to apply, in order, and the events since the
// last Advance. Calling it again before Advance returns the same.
func (c *Core) Ready() Ready { return c.ready }

// Advance tells the core the last Ready was applied.
func (c *Core) Advance() { c.ready = Ready{} }

// Holding reports whether this node holds the trainer lease, and its token.
func (c *Core) Holding() (uint64, bool) { return c.token, c.phase != standby }

// Quorate reports whether this node's side may train (contend).
func (c *Core) Quorate() bool { return c.quorate }

// Running reports whether the term's pipeline started (its streams exist).
func (c *Core) Running() bool { return c.t != nil && c.t.started }

// Remote reports whether engine is a remote engine of the running term.
func (c *Core) Remote(engine string) bool {
	if c.t == nil {
		return false
	}
	_, ok := c.t.engines[engine]
	return ok
}

// Durable is the durable progress the running term last saved (its
// claimed progress before the first save); ok false without a term.
func (c *Core) Durable() (Progress, bool) {
	if c.t == nil {
		return Progress{}, false
	}
	return c.t.durable, true
}

// Failing lists the dependencies of the running term that failed their
// last probe (for a gauge); nil without a term.
func (c *Core) Failing() []string {
	if c.t == nil {
		return nil
	}
	return c.t.watch.Failing()
}

func (c *Core) effect(e Effect) { c.ready.Effects = append(c.ready.Effects, e) }
func (c *Core) event(e Event)   { c.ready.Events = append(c.ready.Events, e) }

func (c *Core) ignore(format string, args ...any) {
	c.event(Event{Kind: Ignored, Err: fmt.Sprintf(format, args...)})
}

// Step feeds one input that happened at now.
func (c *Core) Step(now time.Time, in Input) {
	if tok, scoped := tokenOf(in); scoped {
		if c.phase == standby || tok != c.token {
			c.ignore("%T of token %d (holding token %d: %v)", in, tok, c.token, c.phase != standby)
			return
		}
	}
	switch v := in.(type) {
	case LeaseChanged:
		c.leaseChanged(now, v)
	case QuorumChanged:
		c.quorumChanged(v.Train)
	case MembersChanged:
		c.membersChanged(v.Members)
	case ProgressObserved:
		c.progressObserved(v.Progress)
	case Stop:
		c.stop()
	case ProgressClaimed:
		c.claimed(now, v)
	case NodeRequeued:
		c.event(Event{Kind: PromptsRequeued, Token: v.Token, Node: v.Node, Count: v.Count})
	case StaleRequeued:
		c.event(Event{Kind: PromptsRequeued, Token: v.Token, Count: v.Count})
	case Failed:
		c.fail(v.Err, ReasonFailed)
	default:
		if c.t == nil {
			c.ignore("%T before the term's pipeline was started", in)
			return
		}
		c.termInput(now, in)
	}
}

// termInput handles the inputs of a running term.
func (c *Core) termInput(now time.Time, in Input) {
	t := c.t
	switch v := in.(type) {
	case RouterListening:
		t.router = v.URL
		c.announce(now)
	case PipelineStarted:
		t.started = true
		t.watch.Started(now)
	case StartPhase:
		t.phase, t.phaseAt = v.Phase, now
	case StepTrained:
		c.stepTrained(v)
	case CheckpointSaved:
		c.checkpointSaved(v)
	case ProgressSaved:
		c.progressSaved(now, v)
	case SaveFailed:
		if v.Fenced && c.cfg.Plant.IgnoreFencedSave && t.saving != nil {
			c.progressSaved(now, ProgressSaved{Token: v.Token, Step: t.saving.p.Step})
			return
		}
		reason := ReasonFailed
		if v.Fenced {
			reason = ReasonFenced
		}
		c.fail(fmt.Sprintf("save progress of step %d: %s", v.Step, v.Err), reason)
	case PromptConsumed:
		t.groups[v.Attempt.Group] = v.Attempt
		c.trySave()
	case LedgerWrite:
		c.ledgerWrite(now, v)
	case Probe:
		c.probe(now, v.Dep, v.Err)
		for _, m := range v.Moved {
			c.event(Event{Kind: LeaderMoved, Dep: v.Dep, Consumer: m, Node: c.cfg.Node})
		}
	case RolloutStatus:
		c.rolloutStatus(v)
	case EngineTarget:
		c.engineTarget(v)
	case EngineServing:
		c.engineServing(v)
	case Marked:
		c.marked(v)
	}
}

func (c *Core) probe(now time.Time, dep, err string) {
	var e error
	if err != "" {
		e = errors.New(err)
	}
	c.t.watch.Probe(now, dep, e)
	c.watchEvents()
}

func (c *Core) watchEvents() {
	for _, e := range c.t.watch.Ready() {
		c.event(Event{Kind: Watch, Token: c.token, Watch: e})
	}
}

// Tick advances time: the term's watch, its announcements and the
// resends to engines that have not acked their target.
func (c *Core) Tick(now time.Time) {
	t := c.t
	if t == nil || (c.phase != running && c.phase != stopping) {
		return
	}
	t.watch.Tick(now)
	c.watchEvents()
	if e, down := t.watch.Down(); down {
		why := fmt.Sprintf("term stalled (%s)", e.Reason)
		if !t.started { // a stalled start, whichever bound caught it
			why = fmt.Sprintf("term stalled (%s): not started: %s", e.Reason, c.startState(now))
		}
		c.fail(why, ReasonStalled)
		return
	}
	if c.phase != running {
		return
	}
	if now.Sub(t.lastAnnounce) >= c.cfg.AnnounceEvery {
		c.announce(now)
	}
	if now.Sub(t.lastResend) >= c.cfg.ResendEvery {
		t.lastResend = now
		c.resend()
	}
}

func (c *Core) announce(now time.Time) {
	if t := c.t; t.router != "" {
		t.lastAnnounce = now
		c.effect(Announce{Term: t.name, Token: c.token, Router: t.router})
	}
}

// leaseChanged: acquired → claim the progress (unless this side is a
// minority, which must not sit on the lease); lost → stop the pipeline
// and forget the term: nothing else is done for it.
func (c *Core) leaseChanged(now time.Time, v LeaseChanged) {
	if !v.Leader {
		if c.phase == standby {
			return
		}
		if c.phase == running || c.phase == stopping {
			c.event(Event{Kind: LeaseLost, Token: c.token})
			c.effect(StopPipeline{Token: c.token})
		}
		c.toStandby()
		return
	}
	if c.phase != standby {
		if v.Token == c.token {
			return // a repeated status
		}
		// A new token without a loss in between: the old term is over.
		if c.phase == running || c.phase == stopping {
			c.effect(StopPipeline{Token: c.token})
		}
		c.toStandby()
	}
	if !c.quorate {
		c.phase, c.token = claiming, v.Token // held until the StepDown is applied
		c.stepDown(ReasonQuorum)
		return
	}
	c.phase, c.token = claiming, v.Token
	c.event(Event{Kind: LeaseAcquired, Token: v.Token})
	c.effect(ClaimProgress{Token: v.Token})
}

func (c *Core) toStandby() { c.phase, c.token, c.t = standby, 0, nil }

// stepDown gives the lease up (after StopPipeline, where one runs).
// A failed or stalled term counts toward the wait before this node
// contends again (recontendWait); the count is carried in the StepDown.
func (c *Core) stepDown(r Reason) {
	if r == ReasonFailed || r == ReasonStalled {
		c.failed++
	}
	wait := c.recontendWait(r)
	c.effect(StepDown{Reason: r, Wait: wait, FailedInARow: c.failed})
	c.event(Event{Kind: Resigned, Token: c.token, Reason: r, Count: c.failed, Wait: wait})
	c.toStandby()
}

func (c *Core) quorumChanged(train bool) {
	c.quorate = train
	if train || c.phase == standby || c.cfg.Plant.IgnoreQuorumLoss {
		return
	}
	c.event(Event{Kind: QuorumLost, Token: c.token})
	if c.phase == running || c.phase == stopping {
		c.effect(StopPipeline{Token: c.token})
	}
	c.stepDown(ReasonQuorum)
}

// fail ends the term: stop its pipeline, give the lease up so a standby
// (or this node, later) starts a clean term from the durable step.
func (c *Core) fail(err string, r Reason) {
	if c.phase == standby {
		return
	}
	if c.phase == stopping && r == ReasonFailed {
		r = ReasonStopping
	}
	c.event(Event{Kind: TermFailed, Token: c.token, Err: err, Reason: r})
	if c.phase == running || c.phase == stopping {
		c.effect(StopPipeline{Token: c.token})
	}
	c.stepDown(r)
}

// claimed: the previous holder's last durable step is trained (its
// durable weights hold it) even if it died before it said so; the rest of
// what older terms hold in flight is requeued (before the pipeline
// starts, so nothing of this term is in flight yet); then the term starts
// from the claimed step.
func (c *Core) claimed(now time.Time, v ProgressClaimed) {
	if c.phase != claiming {
		c.ignore("ProgressClaimed while not claiming")
		return
	}
	p, prev := v.Claimed, v.Prev
	if prev.Holder != "" {
		if len(prev.Prompts) > 0 {
			c.effect(MarkTrained{Step: prev.Step, Prompts: prev.Prompts})
		}
		switch {
		case c.cfg.Plant.ForgetPrevHolder:
		case c.cfg.Plant.RequeuePrevHolderOnly:
			c.effect(RequeueNode{Node: prev.Holder})
		default:
			// Every older term's prompts, not just prev.Holder's: a claimer
			// that died before its requeue overwrote Holder with its own
			// name, and the holders before it left prompts in flight too.
			c.effect(RequeueStale{Token: c.token})
		}
		if prev.Token != 0 && prev.Token != c.token {
			c.effect(DeleteTermBucket{Term: TermName(c.cfg.Run, prev.Token)})
		}
	}
	remaining := c.cfg.Steps - p.Step
	c.event(Event{Kind: Resumed, Token: c.token, Step: p.Step, Version: p.Version, Count: int(max(remaining, 0))})
	if remaining <= 0 {
		c.phase = finished
		c.event(Event{Kind: RunComplete, Token: c.token, Step: p.Step})
		c.markDone()
		return
	}
	if c.cfg.Checkpoints && p.Checkpoint == "" && p.Version > 0 {
		c.fail(fmt.Sprintf("the durable progress (step %d version %d) records no checkpoint; refusing to restart the policy from the seed's weights", p.Step, p.Version), ReasonFailed)
		return
	}
	w, err := termwatch.New(c.cfg.Watch, now)
	if err != nil { // validated in New
		panic(err)
	}
	c.phase = running
	c.t = newTermState(TermName(c.cfg.Run, c.token), p, remaining, w, now, c.live)
	if prev.Holder != "" && len(prev.Prompts) > 0 {
		c.t.marking[prev.Step] = true // the claim's marks, first
	}
	c.effect(StartPipeline{Term: c.t.name, Token: c.token, From: p, Steps: remaining})
	c.startEngines()
}

func (c *Core) markDone() {
	if !c.done {
		c.done = true
		c.effect(Done{})
	}
}

// progressObserved: a node that does not hold the lease learns the run
// is complete from the durable progress.
func (c *Core) progressObserved(p Progress) {
	if c.done || p.Step < c.cfg.Steps || p.Holder == c.cfg.Node {
		return
	}
	c.event(Event{Kind: RunComplete, Step: p.Step, Node: p.Holder})
	c.markDone()
}

// stop: a clean stop. A running term saves the steps it finished (the
// lease is still held: the saves are fenced as always), then resigns.
func (c *Core) stop() {
	switch c.phase {
	case standby:
		return
	case running:
		c.phase = stopping
		c.effect(StopPipeline{Token: c.token})
		c.trySave()
		c.stoppedSaving()
	case stopping:
	default:
		c.stepDown(ReasonStopping)
	}
}
