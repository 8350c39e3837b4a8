package rollout

import "sync/atomic"

// Stats are the actor's counters. Every started trajectory ends Finished
// or Aborted (Started = Finished + Aborted + running).
type Stats struct {
	Started, Finished, Aborted int64
	GroupsReady, GroupsAborted int64
	// Tokens counts all tokens of finished trajectories; Generated the
	// model's tokens among them.
	Tokens, Generated int64
	// Resubmits counts turn calls that continued after a failure or abort.
	Resubmits int64
	// MixedVersions counts finished trajectories whose tokens came from
	// more than one policy version (keep-mode weight updates mid-episode).
	MixedVersions int64
	// BadPrompts counts PromptAssigned messages that could not be decoded
	// or belong to another run.
	BadPrompts int64
	// StoreRetries counts retried stores in the trajectory buffer;
	// GroupsUnstored the groups it never took (reported aborted instead).
	StoreRetries, GroupsUnstored int64
	// EnvErrors and EnvTimeouts count trajectories aborted by their chat
	// environment (ErrEnvFailed, ErrEnvTimeout; among Aborted); ToolCalls
	// and MalformedCalls the tool calls of finished ones; ToolTimeouts
	// their calls the environment cut off at a time limit
	// (chatenv.MetaToolTimeouts); ToolCallEpisodes the finished episodes
	// with at least one well-formed call.
	EnvErrors, EnvTimeouts, ToolCalls, MalformedCalls int64
	ToolTimeouts, ToolCallEpisodes                    int64
	// EnvBackoffs counts groups that waited before their episodes because
	// earlier groups' environment failed (outcome.EnvBackoff), EnvBackoffMs
	// the milliseconds they waited in all.
	EnvBackoffs, EnvBackoffMs int64
}

// Add sums o into s, field by field (the totals over a node's actors).
func (s *Stats) Add(o Stats) {
	s.Started += o.Started
	s.Finished += o.Finished
	s.Aborted += o.Aborted
	s.GroupsReady += o.GroupsReady
	s.GroupsAborted += o.GroupsAborted
	s.Tokens += o.Tokens
	s.Generated += o.Generated
	s.Resubmits += o.Resubmits
	s.MixedVersions += o.MixedVersions
	s.BadPrompts += o.BadPrompts
	s.StoreRetries += o.StoreRetries
	s.GroupsUnstored += o.GroupsUnstored
	s.EnvErrors += o.EnvErrors
	s.EnvTimeouts += o.EnvTimeouts
	s.ToolCalls += o.ToolCalls
	s.MalformedCalls += o.MalformedCalls
	s.ToolTimeouts += o.ToolTimeouts
	s.ToolCallEpisodes += o.ToolCallEpisodes
	s.EnvBackoffs += o.EnvBackoffs
	s.EnvBackoffMs += o.EnvBackoffMs
}

type counters struct {
	started, finished, aborted, groupsReady, groupsAborted atomic.Int64
	tokens, generated, resubmits, mixed, badPrompts        atomic.Int64
	storeRetries, groupsUnstored                           atomic.Int64
	envErrors, envTimeouts, toolCalls, malformedCalls      atomic.Int64
	toolTimeouts, toolCallEpisodes                         atomic.Int64
	envBackoffs, envBackoffMs                              atomic.Int64
}
