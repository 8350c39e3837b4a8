package transport

import (
	"fmt"
	"strings"
)

// RunPlan is every subject, stream and bucket name of one run: the one
// place they are spelled. cluster/node (the pipeline and the lease agent),
// cluster/enginehost, cluster/rollouthost, cluster/ledger, cluster/ckpt,
// bench/scale, chaos and the simulator all take their names from it, so a
// node and the simulator cannot drift apart again. subjects.go documents
// the plan as a table generated from PlanEntries (plan_test.go keeps the
// two equal).
//
// Fields ending in All are patterns (they hold '*' or '>'); the others are
// concrete subjects or names. Subjects under one node, engine or term are
// methods. A cluster term is a run of its own (run id <run>-t<token>): its
// pipeline uses Plan(term), while the lease agent's run-wide control
// subjects (TermAnnounce, Leaving) and the durable state (ledger buckets,
// checkpoints) use the base run's plan.
type RunPlan struct {
	// Run is the run id every name below is built from.
	Run string

	// Prompts: PromptAssigned, controller → rollout actors (queue group
	// "rollout").
	Prompts string
	// Trajectories: GroupReady, rollout → the trajectory buffer (stream
	// GroupStream) → the sampling actor.
	Trajectories string
	// Aborted: EpisodeAborted, rollout (or the term holder for a dead
	// node's groups) → controller.
	Aborted string
	// GroupsAll: pattern of Kept and Filtered, the controller's input.
	GroupsAll string
	// Kept: GroupReady the sampling actor kept → controller.
	Kept string
	// Filtered: GroupFiltered, sampling actor → controller.
	Filtered string
	// Train: TrainBatch, controller → trainer.
	Train string
	// Steps: StepDone, trainer → controller, publisher, observers.
	Steps string
	// Weights: WeightsPublished (trainer) and MinVersionSet (publisher) →
	// discovery watcher, observers.
	Weights string
	// Capacity: CapacityChanged, controller → observers.
	Capacity string
	// Ledger: PromptLedger, everyone that settles a prompt → the ledger
	// stream (LedgerStream).
	Ledger string
	// Settled: GroupAccepted, GroupRequeued, SamplingExhausted, controller
	// → the ledger stream (under Ledger).
	Settled string
	// LedgerAll: pattern of the subjects under Ledger (Settled, and any
	// added later), captured by LedgerStream with Ledger itself.
	LedgerAll string
	// AcksAll: every engine's EngineVersionAck (Engine(id, EngineAck)).
	AcksAll string
	// EnginesAll: every engine announcement (health, load, ack).
	EnginesAll string
	// TurnResults: TurnResult, engines → the router shell. The simulator
	// only: in a run a turn is an HTTP exchange through the router.
	TurnResults string
	// TurnsAll: pattern of every Turn(engine) and TurnResults (the
	// simulator only).
	TurnsAll string

	// TermAnnounce: TermAnnounce, trainer lease holder → rollout hosts
	// (the base run's plan).
	TermAnnounce string
	// RolloutStatusAll: pattern of RolloutStatus(node) (the term's plan).
	RolloutStatusAll string
	// EngineControlAll: pattern of EngineControl(node).
	EngineControlAll string
	// Leaving: NodeLeaving, a node stopping cleanly → every node.
	Leaving string
	// RankHostAll: pattern of RankHost(node) (the base run's plan).
	RankHostAll string

	// LedgerStream is the stream of Ledger and Settled (ledger-<run>).
	LedgerStream string
	// GroupStream is the trajectory buffer on Trajectories (groups-<run>),
	// consumed by the sampling actor's durable consumer "sampling".
	GroupStream string
	// DurableGroups is the subject cluster/ledger's group buffer stores on.
	// It lies outside asyncrl.<run>.groups.> on purpose: live subscribers of
	// the groups topic must not see the buffer's raw payloads.
	DurableGroups string
	// DurableGroupStream is cluster/ledger's group buffer stream.
	DurableGroupStream string
	// PromptsBucket and ProgressBucket are cluster/ledger's KV buckets (the
	// durable prompt ledger, the fenced trainer progress).
	PromptsBucket, ProgressBucket string
	// CheckpointBucket is cluster/ckpt's object store of trainer checkpoints.
	CheckpointBucket string
	// WeightsBucket is the object store of the run's (a term's) weights.
	WeightsBucket string
}

// DurableRoot is the first token of cluster/ledger's group buffer subject.
const DurableRoot = "asyncrl-durable"

// NodeEngine is the engine id a one-process run's engines acknowledge
// versions under (Engine(NodeEngine, EngineAck)).
const NodeEngine = "node"

// Plan returns run's plan; run must be a valid token (ValidToken).
func Plan(run string) (RunPlan, error) {
	if err := ValidToken(run); err != nil {
		return RunPlan{}, fmt.Errorf("run id: %w", err)
	}
	return planOf(run), nil
}

// MustPlan is Plan for a constant run id; it panics on a bad one.
func MustPlan(run string) RunPlan {
	p, err := Plan(run)
	if err != nil {
		panic(err)
	}
	return p
}

// AnyRunPlan is the plan with '*' for the run: its subjects are patterns
// matching the same subject of every run (NATS permissions, cluster/access).
// Its stream and bucket names are not names; do not use them.
func AnyRunPlan() RunPlan { return planOf("*") }

// planOf builds the plan without validating run (Plan validates; the
// documentation renders it for "<run>").
func planOf(run string) RunPlan {
	s := func(topic Topic, more ...string) string { return join(run, topic, more...) }
	return RunPlan{
		Run:              run,
		Prompts:          s(TopicPrompts),
		Trajectories:     s(TopicTrajectories),
		Aborted:          s(TopicTrajectories, "aborted"),
		GroupsAll:        s(TopicGroups, ">"),
		Kept:             s(TopicGroups, "kept"),
		Filtered:         s(TopicGroups, "filtered"),
		Train:            s(TopicTrain),
		Steps:            s(TopicSteps),
		Weights:          s(TopicWeights),
		Capacity:         s(TopicCapacity),
		Ledger:           s(TopicLedger),
		Settled:          s(TopicLedger, "groups"),
		LedgerAll:        s(TopicLedger, ">"),
		AcksAll:          s(TopicEngines, "*", string(EngineAck)),
		EnginesAll:       s(TopicEngines, "*", "*"),
		TurnResults:      s(TopicTurns, "results"),
		TurnsAll:         s(TopicTurns, "*"),
		TermAnnounce:     s(TopicControl, "term"),
		RolloutStatusAll: s(TopicControl, "rollouts", "*"),
		EngineControlAll: s(TopicControl, "engines", "*"),
		Leaving:          s(TopicControl, "leaving"),
		RankHostAll:      s(TopicControl, "ranks", "*"),

		LedgerStream:       "ledger-" + run,
		GroupStream:        "groups-" + run,
		DurableGroups:      DurableRoot + "." + run + "." + string(TopicGroups),
		DurableGroupStream: "asyncrl_" + run + "_groupbuf",
		PromptsBucket:      "asyncrl_" + run + "_prompts",
		ProgressBucket:     "asyncrl_" + run + "_progress",
		CheckpointBucket:   "asyncrl-ckpt-" + run,
		WeightsBucket:      "asyncrl-weights-" + run,
	}
}

// join spells asyncrl.<run>.<topic>[.<more>…] without validating.
func join(run string, topic Topic, more ...string) string {
	n := len(SubjectRoot) + 1 + len(run) + 1 + len(topic)
	for _, m := range more {
		n += 1 + len(m)
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString(SubjectRoot)
	b.WriteByte('.')
	b.WriteString(run)
	b.WriteByte('.')
	b.WriteString(string(topic))
	for _, m := range more {
		b.WriteByte('.')
		b.WriteString(m)
	}
	return b.String()
}

// id validates one node, engine or term token of a subject; "*" is
// allowed in AnyRunPlan's subjects only.
func (p RunPlan) id(what, tok string) error {
	if tok == "*" && p.Run == "*" {
		return nil
	}
	if err := ValidToken(tok); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// Engine is engine id's announcement subject of kind:
// asyncrl.<run>.engines.<id>.<health|load|ack>.
func (p RunPlan) Engine(id string, kind EngineTopic) (string, error) {
	switch kind {
	case EngineHealth, EngineLoad, EngineAck:
	default:
		return "", fmt.Errorf("%w: unknown engine topic %q (allowed: health, load, ack)", ErrBadSubject, kind)
	}
	if err := p.id("engine id", id); err != nil {
		return "", err
	}
	return join(p.Run, TopicEngines, id, string(kind)), nil
}

// EngineKindAll is every engine's announcement of kind:
// asyncrl.<run>.engines.*.<kind>.
func (p RunPlan) EngineKindAll(kind EngineTopic) string {
	return join(p.Run, TopicEngines, "*", string(kind))
}

// EngineControl is where node's engine host takes LoadWeights (and the
// simulator's engine node its LoadWeights): asyncrl.<run>.control.engines.<node>.
func (p RunPlan) EngineControl(node string) (string, error) {
	if err := p.id("node", node); err != nil {
		return "", err
	}
	return join(p.Run, TopicControl, "engines", node), nil
}

// RolloutStatus is where node's rollout actors report their groups in
// flight to the term (p is the term's plan): asyncrl.<term>.control.rollouts.<node>.
func (p RunPlan) RolloutStatus(node string) (string, error) {
	if err := p.id("node", node); err != nil {
		return "", err
	}
	return join(p.Run, TopicControl, "rollouts", node), nil
}

// Turn is where the simulator's router shell sends engine's TurnRequests
// (asyncrl.<run>.turns.<engine>; the simulator only, like TurnResults).
func (p RunPlan) Turn(engine string) (string, error) {
	if err := p.id("engine id", engine); err != nil {
		return "", err
	}
	return join(p.Run, TopicTurns, engine), nil
}

// RankHost is where node's rank host takes a multi-node trainer group's
// requests (start ranks, their frames, stop them; trainer.exec_nodes),
// from the term holder (p is the base run's plan: a group outlives no
// term, but the host serves every term): asyncrl.<run>.control.ranks.<node>.
func (p RunPlan) RankHost(node string) (string, error) {
	if err := p.id("node", node); err != nil {
		return "", err
	}
	return join(p.Run, TopicControl, "ranks", node), nil
}
