package transport

import (
	"fmt"
	"strings"
)

// PlanEntry is one row of a run's plan: a subject (or pattern, or stream or
// bucket name), what travels on it, who sends and who receives it.
type PlanEntry struct {
	// Name is the subject, pattern, stream or bucket, as RunPlan spells it.
	Name string
	// Kind: "pub/sub", "queue", "stream", "pattern", "stream name",
	// "KV bucket" or "object store".
	Kind string
	// Messages are the message types on it (empty for names).
	Messages string
	// From → To: who publishes, who subscribes (or who owns a name).
	From, To string
}

// PlanEntries lists every entry of p, the per-node and per-engine
// subjects spelled with the placeholders node and id (PlanTable passes
// "<node>" and "<id>").
func (p RunPlan) PlanEntries(node, id string) []PlanEntry {
	j := func(topic Topic, more ...string) string { return join(p.Run, topic, more...) }
	return []PlanEntry{
		{p.Prompts, "queue", "PromptAssigned", "controller", "rollout actors (queue \"rollout\")"},
		{p.Trajectories, "stream", "GroupReady", "rollout actors (batch inline)", "sampling actor (GroupStream); trainer (reads by sequence)"},
		{p.Aborted, "pub/sub", "EpisodeAborted", "rollout actors, term holder", "controller"},
		{p.Kept, "pub/sub", "GroupReady", "sampling actor (by reference)", "controller"},
		{p.Filtered, "pub/sub", "GroupFiltered", "sampling actor", "controller"},
		{p.GroupsAll, "pattern", "", "", "controller (Kept and Filtered)"},
		{p.Train, "pub/sub", "TrainBatch", "controller (references)", "trainer (fetches the groups)"},
		{p.Steps, "pub/sub", "StepDone", "trainer", "controller, publisher, observers"},
		{p.Weights, "pub/sub", "WeightsPublished, MinVersionSet", "trainer, publisher", "discovery watcher, observers"},
		{p.Capacity, "pub/sub", "CapacityChanged", "controller", "observers"},
		{p.Ledger, "stream", "PromptLedger", "controller, rollout, term", "ledger (LedgerStream); sampling actor (deletes a settled group from GroupStream)"},
		{p.Settled, "stream", "GroupAccepted, GroupRequeued, SamplingExhausted", "controller", "ledger (LedgerStream)"},
		{p.LedgerAll, "pattern", "", "", "LedgerStream (with Ledger)"},
		{j(TopicEngines, id, string(EngineHealth)), "pub/sub", "EngineHealth", "engine host", "discovery watcher, router"},
		{j(TopicEngines, id, string(EngineLoad)), "pub/sub", "EngineLoad", "engine host", "discovery watcher, router"},
		{j(TopicEngines, id, string(EngineAck)), "pub/sub", "EngineVersionAck", "engine's weight-sync agent", "publisher"},
		{p.AcksAll, "pattern", "", "", "publisher (every engine's acks)"},
		{p.EnginesAll, "pattern", "", "", "discovery watcher"},
		{j(TopicTurns, id), "pub/sub", "TurnRequest", "router shell (simulator only)", "engine"},
		{p.TurnResults, "pub/sub", "TurnResult", "engines (simulator only)", "router shell"},
		{p.TurnsAll, "pattern", "", "", "simulator's message faults"},
		{p.TermAnnounce, "pub/sub", "TermAnnounce", "trainer lease holder", "rollout hosts"},
		{j(TopicControl, "rollouts", node), "pub/sub", "RolloutStatus", "rollout host", "term holder"},
		{p.RolloutStatusAll, "pattern", "", "", "term holder"},
		{j(TopicControl, "engines", node), "request", "LoadWeights", "term's publisher", "engine host"},
		{p.EngineControlAll, "pattern", "", "", "NATS permissions"},
		{p.Leaving, "pub/sub", "NodeLeaving", "a node stopping", "every node"},
		{j(TopicControl, "ranks", node), "request", "RankRequest (start, frame, stop)", "term holder", "rank host"},
		{p.RankHostAll, "pattern", "", "", "NATS permissions"},
		{p.DurableGroups, "stream", "GroupReady (raw)", "cluster/ledger buffer", "cluster/ledger (DurableGroupStream)"},
		{p.LedgerStream, "stream name", "", "pipeline", "Ledger, LedgerAll"},
		{p.GroupStream, "stream name", "", "pipeline, rollout hosts", "Trajectories (consumer \"sampling\")"},
		{p.DurableGroupStream, "stream name", "", "cluster/ledger", "DurableGroups"},
		{p.PromptsBucket, "KV bucket", "", "cluster/ledger", "durable prompt ledger"},
		{p.ProgressBucket, "KV bucket", "", "cluster/ledger", "fenced trainer progress"},
		{p.CheckpointBucket, "object store", "", "cluster/ckpt", "trainer checkpoints"},
		{p.WeightsBucket, "object store", "", "cluster/weightsync", "a term's weights (base, deltas)"},
	}
}

// PlanTable renders the plan of run "<run>" as the table subjects.go
// documents (one row per entry, columns aligned, each line prefixed with
// indent).
func PlanTable(indent string) string {
	rows := [][]string{{"name", "kind", "messages", "from", "to"}}
	for _, e := range planOf("<run>").PlanEntries("<node>", "<id>") {
		rows = append(rows, []string{e.Name, e.Kind, e.Messages, e.From, e.To})
	}
	width := make([]int, len(rows[0]))
	for _, r := range rows {
		for i, c := range r {
			width[i] = max(width[i], len(c))
		}
	}
	var b strings.Builder
	for _, r := range rows {
		line := indent
		for i, c := range r {
			if i == len(r)-1 {
				line += c
			} else {
				line += fmt.Sprintf("%-*s  ", width[i], c)
			}
		}
		b.WriteString(strings.TrimRight(line, " "))
		b.WriteByte('\n')
	}
	return b.String()
}
