package staleness

import (
	"fmt"
	"strconv"
	"time"
)

// UnknownVersion passed to Accept means "token versions not reported": the
// group's staleness is then measured from the version it was scheduled at.
const UnknownVersion int64 = -1

// GroupState is where an admitted group is in its life.
type GroupState int

const (
	// StateRunning: admitted, generating.
	StateRunning GroupState = iota + 1
	// StateAccepted: finished, waiting for the filter and the trainer.
	StateAccepted
)

func (s GroupState) String() string {
	switch s {
	case StateRunning:
		return "running"
	case StateAccepted:
		return "accepted"
	}
	return "state(" + strconv.Itoa(int(s)) + ")"
}

// Admission is what TryAcquire hands out: one group slot.
type Admission struct {
	GroupID  string
	PromptID string
	// ScheduledStep is current_global_step at admission (SkyRL's i).
	ScheduledStep int64
	// ScheduledVersion is the trainer's policy version at admission.
	ScheduledVersion int64
}

// RequeueReason says why a prompt goes back to the prompt source.
type RequeueReason string

const (
	// ReasonAborted: generation was aborted (engine lost, cancelled).
	ReasonAborted RequeueReason = "aborted"
	// ReasonStale: the group broke the staleness bound under PolicyRequeue.
	ReasonStale RequeueReason = "stale"
	// ReasonReleased: an accepted group was handed back untrained
	// (Release), e.g. when dynamic sampling gave up on a mini-batch.
	ReasonReleased RequeueReason = "released"
)

// Requeue is an effect: the shell must put PromptID back in the prompt
// source so it is generated again.
type Requeue struct {
	PromptID string
	GroupID  string
	Reason   RequeueReason
	// Staleness is set for ReasonStale.
	Staleness int64
}

func (r Requeue) String() string {
	return fmt.Sprintf("requeue prompt=%s group=%s reason=%s staleness=%d", r.PromptID, r.GroupID, r.Reason, r.Staleness)
}

// Verdict is CheckForTraining's answer.
type Verdict int

const (
	// Train: hand the group to the trainer.
	Train Verdict = iota + 1
	// Drop: do not train; the prompt was requeued (see Drain).
	Drop
)

func (v Verdict) String() string {
	switch v {
	case Train:
		return "train"
	case Drop:
		return "drop"
	}
	return "verdict(" + strconv.Itoa(int(v)) + ")"
}

// Decision is the typed result of CheckForTraining.
type Decision struct {
	Verdict  Verdict
	GroupID  string
	PromptID string
	// Staleness is the lag under the configured Measure, the one the bound
	// is enforced on: Scheduled or Token.
	Staleness int64
	// Scheduled = current_global_step − the step the group was scheduled
	// at (SkyRL's j − i).
	Scheduled int64
	// Token = trainer version − version of the group's oldest token,
	// clamped at 0.
	Token int64
	// Violation: Staleness > MaxStalenessSteps (trained anyway under
	// PolicyAccept, dropped under PolicyRequeue).
	Violation bool
	// Step is the trainer step the group is checked for.
	Step int64
}

func (d Decision) String() string {
	return fmt.Sprintf("%s group=%s prompt=%s staleness=%d (scheduled %d, token %d) violation=%t step=%d",
		d.Verdict, d.GroupID, d.PromptID, d.Staleness, d.Scheduled, d.Token, d.Violation, d.Step)
}

type group struct {
	adm           Admission
	state         GroupState
	oldestVersion int64
}

// Controller is the staleness controller core. Not safe for concurrent
// use; the shell serialises calls.
type Controller struct {
	cfg  Config
	step int64 // current_global_step, from 1

	submitted, running, accepted, filtered int64
	aborted, staleDropped, trained         int64
	released                               int64
	violations, futureVersions             int64
	trainedThisStep                        int64

	groups map[string]*group
	seq    int64
	epoch  int64 // 0 for a fresh controller; see Resume

	outbox []Requeue

	stale stalenessStats
	idle  idleClock
}

// New returns a controller at step 1 with zero counters. It returns an
// error wrapping ErrInvalidConfig if cfg is invalid.
func New(cfg Config) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Controller{cfg: cfg, step: 1, groups: map[string]*group{}}
	c.stale.hist = make([]int64, cfg.MaxStalenessSteps+2)
	return c, nil
}

// Resume returns a controller restarted at trainer step `step` (≥ 1) from
// a checkpoint, with nothing in flight: the (step−1)·B groups already
// trained count as submitted, accepted and trained. Without this a fresh
// controller at step j would see (S + j)·B of capacity and flood the
// engines with groups (AReaL fixes the same burst on recovery by setting
// accepted = version·batch).
//
// epoch (≥ 1) numbers this incarnation of the controller (a restart count
// or the lease's fencing token, kept durably by the caller): group ids
// become promptID#epoch.seq, so no id admitted before the restart is ever
// issued again and a late message for a pre-restart group is rejected as
// ErrUnknownGroup instead of being taken for a new one.
func Resume(cfg Config, step, epoch int64) (*Controller, error) {
	return resume(cfg, step, epoch, step-1)
}

// ResumeInFlight is Resume for a restart while the mini-batch of `step`
// is out (sent to the trainer, its StepDone not yet seen): the step·B
// groups up to and including that batch count as submitted, accepted and
// trained, and the current step stays `step`, so StepDone(step) advances it
// as usual. Resuming at step+1 instead would admit groups as if `step`
// were done: one step too fresh under MeasureScheduled (SkyRL's
// global_step is the step the trainer is working on).
func ResumeInFlight(cfg Config, step, epoch int64) (*Controller, error) {
	return resume(cfg, step, epoch, step)
}

// resume is a controller at `step` in `epoch` with the doneSteps·B groups
// of the first doneSteps steps counted as submitted, accepted and trained.
func resume(cfg Config, step, epoch, doneSteps int64) (*Controller, error) {
	if step < 1 {
		return nil, fmt.Errorf("%w: resume step must be ≥ 1, got %d", ErrInvalidConfig, step)
	}
	if epoch < 1 {
		return nil, fmt.Errorf("%w: resume epoch must be ≥ 1, got %d", ErrInvalidConfig, epoch)
	}
	c, err := New(cfg)
	if err != nil {
		return nil, err
	}
	done := doneSteps * cfg.MiniBatchSize
	c.step = step
	c.epoch = epoch
	c.submitted, c.accepted, c.trained = done, done, done
	c.check()
	return c, nil
}

// groupID is promptID#seq, or promptID#epoch.seq after a Resume.
func (c *Controller) groupID(promptID string) string {
	if c.epoch == 0 {
		return promptID + "#" + strconv.FormatInt(c.seq, 10)
	}
	return promptID + "#" + strconv.FormatInt(c.epoch, 10) + "." + strconv.FormatInt(c.seq, 10)
}

// Config returns the controller's configuration.
func (c *Controller) Config() Config { return c.cfg }

// Step is current_global_step: the trainer step the next mini-batch is for.
func (c *Controller) Step() int64 { return c.step }

// Version is the trainer's current policy version, BaseVersion + Step − 1.
func (c *Controller) Version() int64 { return c.cfg.BaseVersion + c.step - 1 }

// Capacity is SkyRL's
//
//	min(W − running, (S + current_global_step)·B − (accepted + running)).
//
// Accepted counts every accepted group not filtered or dropped, including
// those already trained: the bound grows by B per step instead.
func (c *Controller) Capacity() int64 {
	byWorkers := c.cfg.NumParallelGenerationWorkers - c.running
	byStale := (c.cfg.MaxStalenessSteps+c.step)*c.cfg.MiniBatchSize - (c.accepted + c.running)
	return min(byWorkers, byStale)
}

// TryAcquire admits a new group for promptID if Capacity() > 0: running+1,
// submitted+1. The group id is promptID + "#" + the admission sequence
// number (with the epoch after a Resume), so a requeued prompt gets a
// fresh id. ok is false (and nothing changes) when there is no capacity:
// the worker should wait.
func (c *Controller) TryAcquire(promptID string, now time.Time) (adm Admission, ok bool) {
	c.advance(now)
	if c.Capacity() <= 0 {
		return Admission{}, false
	}
	c.seq++
	adm = Admission{
		GroupID:          c.groupID(promptID),
		PromptID:         promptID,
		ScheduledStep:    c.step,
		ScheduledVersion: c.Version(),
	}
	c.groups[adm.GroupID] = &group{adm: adm, state: StateRunning, oldestVersion: UnknownVersion}
	c.running++
	c.submitted++
	c.check()
	return adm, true
}

func (c *Controller) lookup(groupID string, want GroupState, op string) (*group, error) {
	g, ok := c.groups[groupID]
	if !ok {
		return nil, fmt.Errorf("%s %q: %w", op, groupID, ErrUnknownGroup)
	}
	if g.state != want {
		return nil, fmt.Errorf("%s %q: group is %s, want %s: %w", op, groupID, g.state, want, ErrWrongState)
	}
	return g, nil
}

// Accept records a finished group: running−1, accepted+1. oldestVersion
// is the policy version of the group's oldest generated token, or
// UnknownVersion to fall back to the version it was scheduled at.
func (c *Controller) Accept(groupID string, oldestVersion int64, now time.Time) error {
	c.advance(now)
	g, err := c.lookup(groupID, StateRunning, "accept")
	if err != nil {
		return err
	}
	if oldestVersion < 0 {
		oldestVersion = g.adm.ScheduledVersion
	}
	g.oldestVersion = oldestVersion
	g.state = StateAccepted
	c.running--
	c.accepted++
	c.check()
	return nil
}

// Filter records that the dynamic-sampling filter dropped an accepted
// group: accepted−1, filtered+1. The prompt counts as consumed (it is not
// requeued). Because accepted falls, capacity rises: filtering every group
// can never deadlock the loop.
func (c *Controller) Filter(groupID string, now time.Time) error {
	c.advance(now)
	if _, err := c.lookup(groupID, StateAccepted, "filter"); err != nil {
		return err
	}
	delete(c.groups, groupID)
	c.accepted--
	c.filtered++
	c.check()
	return nil
}

// Release hands an accepted group back untrained: accepted−1 (capacity
// released) and a Requeue{Reason: ReasonReleased} of its prompt, so its
// prompt is generated again instead of lost. Used when dynamic sampling
// gives up on the mini-batch the group was waiting in.
func (c *Controller) Release(groupID string, now time.Time) error {
	c.advance(now)
	g, err := c.lookup(groupID, StateAccepted, "release")
	if err != nil {
		return err
	}
	delete(c.groups, groupID)
	c.accepted--
	c.released++
	c.outbox = append(c.outbox, Requeue{PromptID: g.adm.PromptID, GroupID: groupID, Reason: ReasonReleased})
	c.check()
	return nil
}

// Consume records that an accepted group was used up by the current
// step without being trained on itself: replace mode fills its slot in
// the mini-batch with a copy of a good group. Like a trained group it
// stays in accepted (the step's B slots are what the bound (S + step)·B
// pays for), so replacement generates no more groups per step than SkyRL
// does; no staleness is measured.
func (c *Controller) Consume(groupID string, now time.Time) error {
	c.advance(now)
	if _, err := c.lookup(groupID, StateAccepted, "consume"); err != nil {
		return err
	}
	delete(c.groups, groupID)
	c.trained++
	c.trainedThisStep++
	if c.trainedThisStep == c.cfg.MiniBatchSize {
		c.idle.trainerFed()
	}
	c.check()
	return nil
}

// Abort records that a running group's generation was abandoned:
// running−1, and a Requeue of its prompt is emitted.
func (c *Controller) Abort(groupID string, now time.Time) error {
	c.advance(now)
	g, err := c.lookup(groupID, StateRunning, "abort")
	if err != nil {
		return err
	}
	delete(c.groups, groupID)
	c.running--
	c.aborted++
	c.outbox = append(c.outbox, Requeue{PromptID: g.adm.PromptID, GroupID: groupID, Reason: ReasonAborted})
	c.check()
	return nil
}

// CheckForTraining is the per-group staleness check SkyRL lacks, done when
// the trainer is about to take an accepted group for the current step.
// Staleness is measured as Config.Measure says: scheduled (default, SkyRL)
// = Step() − the step the group was admitted at; token = Version() − the
// group's oldest token version (clamped at 0; a token newer than the
// trainer is counted in FutureVersions). Both are reported. Within the
// bound, or under PolicyAccept, the verdict is Train and the group leaves
// the controller as trained (it stays in accepted, as in SkyRL). Beyond
// the bound under PolicyRequeue the verdict is Drop: accepted−1, the
// capacity is released and a Requeue{Reason: ReasonStale} is emitted.
func (c *Controller) CheckForTraining(groupID string, now time.Time) (Decision, error) {
	c.advance(now)
	g, err := c.lookup(groupID, StateAccepted, "check")
	if err != nil {
		return Decision{}, err
	}
	d := c.measure(g)
	if d.Token < 0 {
		c.futureVersions++
		d.Token = 0
		d = c.decide(d)
	}
	delete(c.groups, groupID)
	if d.Violation && c.cfg.StalePolicy == PolicyRequeue {
		d.Verdict = Drop
		c.accepted--
		c.staleDropped++
		c.outbox = append(c.outbox, Requeue{PromptID: g.adm.PromptID, GroupID: groupID, Reason: ReasonStale, Staleness: d.Staleness})
		c.check()
		return d, nil
	}
	d.Verdict = Train
	if d.Violation {
		c.violations++
	}
	c.trained++
	c.trainedThisStep++
	c.stale.observe(d.Staleness)
	if c.trainedThisStep == c.cfg.MiniBatchSize {
		c.idle.trainerFed()
	}
	c.check()
	return d, nil
}

// WouldDrop reports, without changing anything, whether CheckForTraining
// of the accepted group would drop it now (stale under PolicyRequeue).
// Mini-batch assembly that judges a whole generation batch (replace mode)
// uses it to requeue stale groups before it decides on the batch.
func (c *Controller) WouldDrop(groupID string) (bool, error) {
	g, err := c.lookup(groupID, StateAccepted, "peek")
	if err != nil {
		return false, err
	}
	d := c.measure(g)
	return d.Violation && c.cfg.StalePolicy == PolicyRequeue, nil
}

// measure computes a group's staleness under both measures (Token may be
// negative: a token newer than the trainer).
func (c *Controller) measure(g *group) Decision {
	d := Decision{GroupID: g.adm.GroupID, PromptID: g.adm.PromptID, Step: c.step,
		Scheduled: c.step - g.adm.ScheduledStep, Token: c.Version() - g.oldestVersion}
	return c.decide(d)
}

// decide fills Staleness and Violation from the configured measure.
func (c *Controller) decide(d Decision) Decision {
	d.Staleness = d.Scheduled
	if c.cfg.measure() == MeasureToken {
		d.Staleness = max(d.Token, 0)
	}
	d.Violation = d.Staleness > c.cfg.MaxStalenessSteps
	return d
}

// StepDone records that the trainer finished step `step` (its mini-batch
// is trained): current_global_step+1. Counters are NOT decremented for the
// consumed groups — SkyRL (like AReaL) keeps accepted cumulative and lets
// the bound (S + step)·B grow by B per step instead, which is the same
// thing when each step consumes B groups. A duplicate (step < Step()) is
// ignored and returns false; a step beyond Step() is an error.
func (c *Controller) StepDone(step int64, now time.Time) (advanced bool, err error) {
	c.advance(now)
	if step < c.step {
		return false, nil
	}
	if step > c.step {
		return false, fmt.Errorf("step done %d while current step is %d: %w", step, c.step, ErrStepAhead)
	}
	c.step++
	c.trainedThisStep = 0
	c.idle.trainerStarved()
	c.check()
	return true, nil
}

// Tick advances the idle-time accounting to now without any other change.
func (c *Controller) Tick(now time.Time) { c.advance(now) }

// Drain returns the requeues emitted since the last Drain, in order, and
// clears the outbox.
func (c *Controller) Drain() []Requeue {
	out := c.outbox
	c.outbox = nil
	return out
}

// Groups returns the number of groups the controller holds (running plus
// accepted and not yet checked for training).
func (c *Controller) Groups() int { return len(c.groups) }

func (c *Controller) advance(now time.Time) {
	c.idle.advance(now, c.cfg.NumParallelGenerationWorkers-c.running, c.Capacity() <= 0)
}

// check panics if an invariant is broken: that is a bug in this package.
func (c *Controller) check() {
	if c.running < 0 || c.accepted < 0 || c.Capacity() < 0 {
		panic(fmt.Sprintf("staleness: negative counter: running=%d accepted=%d capacity=%d", c.running, c.accepted, c.Capacity()))
	}
	if c.submitted != c.running+c.accepted+c.filtered+c.aborted+c.staleDropped+c.released {
		panic(fmt.Sprintf("staleness: submitted %d != running %d + accepted %d + filtered %d + aborted %d + stale %d + released %d",
			c.submitted, c.running, c.accepted, c.filtered, c.aborted, c.staleDropped, c.released))
	}
	if int64(len(c.groups)) != c.running+c.accepted-c.trained {
		panic(fmt.Sprintf("staleness: %d groups held, want running %d + accepted %d − trained %d",
			len(c.groups), c.running, c.accepted, c.trained))
	}
}
