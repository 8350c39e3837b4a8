package trainer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/actors/loop"
	"github.com/asyncrl/asyncrl/actors/publisher"
	"github.com/asyncrl/asyncrl/actors/trainer/microbatch"
	"github.com/asyncrl/asyncrl/actors/trainer/steprule"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/transport"
)

// ErrInvalidConfig is wrapped by every error Config.Validate returns.
var ErrInvalidConfig = errors.New("trainer: invalid config")

// Subjects are the trainer actor's subjects.
type Subjects struct {
	Train   string // in: TrainBatch
	Steps   string // out: StepDone
	Weights string // out: WeightsPublished
}

// Config configures the trainer actor.
type Config struct {
	RunID, Name string
	// NormStd divides GRPO advantages by the group's std (false: Dr. GRPO).
	NormStd bool
	// Microbatch plans each mini-batch's microbatches.
	Microbatch microbatch.Config
	Subjects   Subjects
	Logger     zerolog.Logger
	// VersionBase is the wrapped model.Trainer's Version() at this run's
	// version 0. A trainer resumed from a checkpoint keeps its optimiser
	// step count (Adam's bias correction depends on it), so it cannot be
	// reset; instead everything the actor says or checks on the bus — the
	// TrainBatch step it expects, StepDone, WeightsPublished, the
	// Publisher's version, StepRecord — is local: tr.Version() − VersionBase.
	// 0 (the default) is a trainer that starts with the run.
	VersionBase int64
	// OnStep, when set, receives every trained step's record in the
	// trainer's goroutine, before its StepDone goes out: the one place a
	// run's every step passes (the actor keeps only the newest
	// RecordsKept). It must not block: it delays the next step.
	OnStep func(StepRecord)
	// Batches fetches the groups a TrainBatch references (StreamSource on
	// the run's trajectory buffer). nil accepts inline references only.
	Batches BatchSource
	// PublishRetry is how a step whose publish failed is published again
	// (the step rule's Retry: publisher.attempts tries in all, waits from
	// publisher.retry_backoff) before training stops on it (Err). The
	// zero value tries once: the first failed publish stops training.
	PublishRetry steprule.Retry
}

// publishRetry is PublishRetry, its zero value one try.
func (c Config) publishRetry() steprule.Retry {
	if c.PublishRetry == (steprule.Retry{}) {
		return steprule.Retry{Attempts: 1}
	}
	return c.PublishRetry
}

// Validate names the first invalid field.
func (c Config) Validate() error {
	if err := c.Microbatch.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if c.Subjects.Train == "" || c.Subjects.Steps == "" {
		return fmt.Errorf("%w: Subjects.Train and Steps must be set", ErrInvalidConfig)
	}
	if err := c.publishRetry().Validate(); err != nil {
		return fmt.Errorf("%w: PublishRetry: %w", ErrInvalidConfig, err)
	}
	if c.VersionBase < 0 {
		return fmt.Errorf("%w: VersionBase must be >= 0, got %d", ErrInvalidConfig, c.VersionBase)
	}
	return nil
}

// StepRecord describes one trained step.
type StepRecord struct {
	Step, Version int64 // Version: the version the step produced
	RewardMean    float64
	Stats         model.StepStats
	Groups        int
	Trajectories  int
	Tokens        int
	Microbatches  int
	StalenessMax  int64
	TrainTime     time.Duration
	PublishTime   time.Duration
	Done          time.Time
	// GroupIDs are the groups the step trained (the TrainBatch's). Only
	// the newest GroupIDsKept records keep them (Actor.Steps): a run of
	// days must not hold every group id it ever trained.
	GroupIDs []string
}

// GroupIDsKept is how many of the newest step records keep their
// GroupIDs; older ones have them dropped (issue 37: per-step state stays
// O(1) per step). A reader of GroupIDs (the cluster agent's term feeds
// each new step to its core) reads a step long before it is this old.
const GroupIDsKept = 64

// RecordsKept is how many of the newest step records the actor keeps
// (StepsSince); a run's every record goes to Config.OnStep. A poller
// (progress, the term's feed) reads a step long before it is this old;
// keeping them all cost ~140 B a step, the largest per-step growth of
// bench-long (issue 37).
const RecordsKept = 4096

// Actor is the trainer actor: it trains each TrainBatch with its Stepper
// (the built-in trainer, or the exec backend's child process), publishes
// the new version and announces StepDone.
type Actor struct {
	bus transport.Bus
	tr  Stepper
	pub publisher.Publisher
	cfg Config

	box    *loop.Inbox[steprule.Input] // TrainBatches, for the step rule (run.go)
	sub    transport.Subscription
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	// unpublished is the step trained but not yet published: its weights
	// and record (the loop's goroutine only; nil: none).
	unpublished *unpublished
	// pubErr is the last publish's error (the loop's goroutine only): a
	// GiveUp names it.
	pubErr error

	mu sync.Mutex
	// rows holds the newest RecordsKept of the count trained steps'
	// records, compact (stepRow), record i at rows[i%RecordsKept]; ids
	// the group ids of the newest GroupIDsKept, ids[i%GroupIDsKept].
	rows  []stepRow
	count int
	ids   [GroupIDsKept][]string
	err   error
}

// Start subscribes the trainer to cfg.Subjects.Train. tr's weights must be
// the ones the engines serve as version 0 (Step 1 trains them), and
// tr.Version() must be cfg.VersionBase.
func Start(bus transport.Bus, tr *model.Trainer, pub publisher.Publisher, cfg Config) (*Actor, error) {
	return StartStepper(bus, builtinStepper{tr}, pub, cfg)
}

// StartStepper is Start with any Stepper (the exec backend: NewExec).
// tr.Version() must be cfg.VersionBase.
func StartStepper(bus transport.Bus, tr Stepper, pub publisher.Publisher, cfg Config) (*Actor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if v := tr.Version(); v != cfg.VersionBase {
		// A mismatch would shift every version the actor announces.
		return nil, fmt.Errorf("%w: VersionBase %d but the trainer holds version %d", ErrInvalidConfig, cfg.VersionBase, v)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &Actor{bus: bus, tr: tr, pub: pub, cfg: cfg, box: loop.NewInbox[steprule.Input](inboxLimit), ctx: ctx, cancel: cancel, done: make(chan struct{})}
	sub, err := bus.Subscribe(cfg.Subjects.Train, func(m *transport.Msg) {
		tb, err := messages.DecodeAs[messages.TrainBatch](m.Data)
		if err != nil || tb.RunID != cfg.RunID {
			cfg.Logger.Warn().Err(err).Msg("trainer: undecodable or foreign train batch dropped")
			return
		}
		a.box.Push(ctx, steprule.Received{Batch: tb})
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("trainer: subscribe: %w", err)
	}
	a.sub = sub
	go a.loop()
	return a, nil
}

// Stop unsubscribes and waits for the step in progress. A Stepper with a
// Close(context.Context) error method (the exec backend's child) is closed
// once no step runs.
func (a *Actor) Stop(ctx context.Context) error {
	err := a.sub.Unsubscribe()
	a.cancel()
	select {
	case <-a.done:
		if c, ok := a.tr.(interface{ Close(context.Context) error }); ok {
			err = errors.Join(err, c.Close(ctx))
		}
		return err
	case <-ctx.Done():
		return errors.Join(err, ctx.Err())
	}
}

// Steps returns the kept step records (the newest RecordsKept; a copy).
func (a *Actor) Steps() []StepRecord {
	recs, _ := a.StepsSince(0)
	return recs
}

// StepCount is the number of trained steps so far.
func (a *Actor) StepCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.count
}

// StepsSince returns the kept step records from index i on (the records
// after the first i: what a poller that has seen i has not seen yet) and
// the index after the last of them, the poller's next i. Records older
// than the newest RecordsKept are gone: the result then starts later
// than i (next − len(recs) > i says how many were missed).
func (a *Actor) StepsSince(i int) (recs []StepRecord, next int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	i = max(i, a.count-len(a.rows), 0)
	if i >= a.count {
		return nil, max(i, a.count)
	}
	recs = make([]StepRecord, 0, a.count-i)
	for k := i; k < a.count; k++ {
		rec := a.rows[k%RecordsKept].record()
		if k >= a.count-GroupIDsKept {
			rec.GroupIDs = a.ids[k%GroupIDsKept]
		}
		recs = append(recs, rec)
	}
	return recs, a.count
}

// keep records a trained step (the newest RecordsKept are kept).
func (a *Actor) keep(rec StepRecord) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ids[a.count%GroupIDsKept] = rec.GroupIDs
	if len(a.rows) < RecordsKept {
		a.rows = append(a.rows, rowOf(rec))
	} else {
		a.rows[a.count%RecordsKept] = rowOf(rec)
	}
	a.count++
}

// stepRow is a StepRecord as the actor keeps it: ~140 B instead of ~220
// (no duplicated fields, times as nanoseconds), without the group ids.
type stepRow struct {
	step, version                                 int64
	reward, loss, entropy, gradNorm               float64
	mismatch, mismatchSame, kl, clipFrac, isRatio float64
	sameVersionTokens, statTokens, groups, trajs  int32
	tokens, microbatches                          int32
	stalenessMax                                  int64
	trainNs, publishNs, doneNs                    int64
}

func rowOf(r StepRecord) stepRow {
	st := r.Stats
	return stepRow{step: r.Step, version: r.Version, reward: r.RewardMean, loss: st.Loss, entropy: st.Entropy, gradNorm: st.GradNorm,
		mismatch: st.Mismatch, mismatchSame: st.MismatchSameVersion, kl: st.KL, clipFrac: st.ClipFrac, isRatio: st.ISRatio,
		sameVersionTokens: int32(st.SameVersionTokens), statTokens: int32(st.Tokens), groups: int32(r.Groups), trajs: int32(r.Trajectories),
		tokens: int32(r.Tokens), microbatches: int32(r.Microbatches), stalenessMax: r.StalenessMax,
		trainNs: int64(r.TrainTime), publishNs: int64(r.PublishTime), doneNs: r.Done.UnixNano()}
}

func (r stepRow) record() StepRecord {
	return StepRecord{Step: r.step, Version: r.version, RewardMean: r.reward,
		Stats: model.StepStats{Version: r.version, Loss: r.loss, Entropy: r.entropy, GradNorm: r.gradNorm, Mismatch: r.mismatch,
			MismatchSameVersion: r.mismatchSame, SameVersionTokens: int(r.sameVersionTokens), KL: r.kl, Tokens: int(r.statTokens),
			ClipFrac: r.clipFrac, ISRatio: r.isRatio},
		Groups: int(r.groups), Trajectories: int(r.trajs), Tokens: int(r.tokens), Microbatches: int(r.microbatches),
		StalenessMax: r.stalenessMax, TrainTime: time.Duration(r.trainNs), PublishTime: time.Duration(r.publishNs),
		Done: time.Unix(0, r.doneNs)}
}

// Err returns the error that stopped training, if any.
func (a *Actor) Err() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// train trains tb, the step rule's Train (step cur+1 on local version
// cur), and publishes the new version (publish); run.go steps the rule
// with the outcome. A publish that fails after the Stepper stepped leaves
// the step in a.unpublished: the rule asks for it again (Publish), it is
// never trained twice.
func (a *Actor) train(tb messages.TrainBatch, cur int64) (StepRecord, error) {
	src := a.cfg.Batches
	if src == nil {
		src = inlineOnly{}
	}
	batch, _, err := fetchBatch(a.ctx, src, tb)
	if err != nil {
		return StepRecord{}, fmt.Errorf("trainer: step %d: %w", tb.Step, err)
	}
	p, err := Prepare(batch, a.cfg.NormStd, a.cfg.Microbatch, cur)
	if err != nil {
		return StepRecord{}, fmt.Errorf("trainer: step %d: %w", tb.Step, err)
	}
	t0 := time.Now()
	st, serving, err := a.tr.Step(a.ctx, p)
	if err != nil {
		return StepRecord{}, fmt.Errorf("trainer: step %d: %w", tb.Step, err)
	}
	st.Version = a.version() // the trainer counts its own steps; the bus speaks the run's
	mbs := 0
	for _, r := range p.Plan.Ranks {
		mbs += len(r.Microbatches)
	}
	a.unpublished = &unpublished{serving: serving, rec: StepRecord{Step: tb.Step, Version: st.Version, RewardMean: p.RewardMean,
		Stats: st, Groups: p.Groups, GroupIDs: slices.Clone(tb.GroupIDs), Trajectories: p.Trajectories, Tokens: p.Tok,
		Microbatches: mbs, StalenessMax: p.StalenessMax, TrainTime: time.Since(t0)}}
	return a.publish(tb.Step, st.Version)
}

// unpublished is a trained step whose publish has not succeeded yet: its
// serving weights and its record (all but the publish time).
type unpublished struct {
	serving publisher.Weights
	rec     StepRecord
}

// publish publishes the trained step's weights (a.unpublished) as
// version v — the step rule's Train, or its Publish after a failed
// publish — and on success keeps the record and sends WeightsPublished.
func (a *Actor) publish(step, v int64) (StepRecord, error) {
	u := a.unpublished // the rule asks to publish only the step this shell trained last
	if u == nil {
		return StepRecord{}, fmt.Errorf("trainer: publish step %d version %d: no trained step is held", step, v)
	}
	t1 := time.Now()
	if err := a.pub.Publish(a.ctx, u.serving, v); err != nil {
		a.pubErr = err
		return StepRecord{}, fmt.Errorf("trainer: step %d: publish version %d (the step is not acknowledged; the step rule publishes it again): %w", step, v, err)
	}
	a.unpublished = nil
	rec := u.rec
	rec.PublishTime, rec.Done = time.Since(t1), time.Now()
	a.keep(rec)
	if a.cfg.OnStep != nil {
		a.cfg.OnStep(rec)
	}
	if a.cfg.Subjects.Weights != "" {
		a.send(a.cfg.Subjects.Weights, messages.WeightsPublished{Header: a.header(v), BaseVersion: v,
			Format: messages.WeightsFull, URI: "inproc://" + a.cfg.Name, Step: step})
	}
	return rec, nil
}

// version is the trainer's version relative to this run's version 0.
func (a *Actor) version() int64 { return a.tr.Version() - a.cfg.VersionBase }

func (a *Actor) header(v int64) messages.Header {
	return messages.Header{RunID: a.cfg.RunID, Sender: a.cfg.Name, Version: v}
}

func (a *Actor) announce(step, newVersion int64, rec StepRecord) error {
	sd := messages.StepDone{Header: a.header(newVersion - 1), Step: step, NewVersion: newVersion,
		Loss: rec.Stats.Loss, RewardMean: rec.RewardMean, Stats: map[string]float64{
			"grad_norm": rec.Stats.GradNorm, "entropy": rec.Stats.Entropy, "mismatch": rec.Stats.Mismatch,
			"kl": rec.Stats.KL, "clip_frac": rec.Stats.ClipFrac, "is_ratio": rec.Stats.ISRatio, "tokens": float64(rec.Tokens),
			"trajectories": float64(rec.Trajectories), "microbatches": float64(rec.Microbatches),
			"staleness_max":         float64(rec.StalenessMax),
			"mismatch_same_version": rec.Stats.MismatchSameVersion, "same_version_tokens": float64(rec.Stats.SameVersionTokens),
			"train_seconds": rec.TrainTime.Seconds(), "publish_seconds": rec.PublishTime.Seconds(),
		}}
	return a.send(a.cfg.Subjects.Steps, sd)
}

func (a *Actor) send(subject string, m messages.Message) error {
	data, err := messages.Encode(m)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return a.bus.Publish(ctx, subject, data)
}
