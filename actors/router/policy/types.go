package policy

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Expected routing outcomes (no replica, gated) are
// Decision outcomes, not errors; these are for misuse.
var (
	ErrInvalidConfig    = errors.New("policy: invalid config")
	ErrUnknownReplica   = errors.New("policy: unknown replica")
	ErrDuplicateReplica = errors.New("policy: replica already present")
)

// Outcome says how a Decision was reached.
type Outcome uint8

const (
	// OutcomeStickyHit: the session stayed on the replica it was on.
	OutcomeStickyHit Outcome = iota
	// OutcomeNew: a session seen for the first time was placed.
	OutcomeNew
	// OutcomeMoved: the session's replica became unhealthy, was removed,
	// or lags (lag rule move), so it was reassigned.
	OutcomeMoved
	// OutcomeSpilled: bounded_sticky moved the session off an overloaded
	// replica.
	OutcomeSpilled
	// OutcomeGated: the session is held on a replica that is paused,
	// updating or behind the minimum version (lag rule hold); retry later.
	// Decision.Replica is empty, Decision.From names the replica.
	OutcomeGated
	// OutcomeUntracked: routed without a session (no key, or a policy that
	// keeps no sessions).
	OutcomeUntracked
	// OutcomeNoReplica: no replica may take the request. Decision.Replica
	// is empty.
	OutcomeNoReplica
)

var outcomeNames = [...]string{"sticky_hit", "new", "moved", "spilled", "gated", "untracked", "no_replica"}

// Outcomes lists every outcome, for pre-creating metric label values.
var Outcomes = []Outcome{OutcomeStickyHit, OutcomeNew, OutcomeMoved, OutcomeSpilled, OutcomeGated, OutcomeUntracked, OutcomeNoReplica}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("outcome(%d)", o)
}

// State is a replica's serving state, set by whoever drives weight updates
// and administration.
type State uint8

const (
	// Active: serving, takes new sessions.
	Active State = iota
	// Paused: engine paused (e.g. vLLM /pause); no traffic.
	Paused
	// Updating: weights being loaded; no traffic.
	Updating
	// Draining: keeps its existing sessions, takes no new ones, so it can
	// be removed once they finish without losing their KV caches.
	Draining
)

var stateNames = [...]string{"active", "paused", "updating", "draining"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", s)
}

// ParseState parses a State name as String writes it.
func ParseState(s string) (State, error) {
	for i, n := range stateNames {
		if n == s {
			return State(i), nil
		}
	}
	return 0, fmt.Errorf("policy: unknown state %q: want one of %v", s, stateNames)
}

// Request is what the core needs to route one HTTP request.
type Request struct {
	// SessionKey identifies the trajectory (X-Session-ID or another key
	// source). Empty: untracked.
	SessionKey string
	// HashOnly marks a key derived from the body text: consistent_hash
	// places by it, but no policy tracks it as a session.
	HashOnly bool
	// PromptTokens and ExpectedDecodeTokens are charged to the chosen
	// replica's in-flight tokens until Done.
	PromptTokens         int
	ExpectedDecodeTokens int
	// PrefixHash identifies the prompt's leading bytes (shared by the
	// samples of a GRPO group and the turns of a conversation); 0 = unknown.
	PrefixHash uint64
	// PrefixBlocks are cumulative hashes of the prompt's leading blocks,
	// shortest first: block i covers its first (i+1)·B bytes (the proxy's
	// PrefixBytes), like an engine's prefix-cache block hashes. The
	// replica holding the longest run of them most likely caches the most
	// of this prompt: a long system prompt shared by every conversation
	// matches everywhere for a few blocks, a conversation's own history
	// only where it ran. Optional; PrefixHash alone counts as one block.
	PrefixBlocks []uint64
	// Avoid lists replicas that must not be chosen for this request (a
	// retry after a connection failure or a 503 there). A session on an
	// avoided replica moves, as if that replica were unhealthy.
	Avoid []string
}

// Decision is the core's answer for one Request.
type Decision struct {
	// Replica is the chosen replica URL; empty for gated and no_replica.
	Replica string
	Outcome Outcome
	// From is the session's previous replica for moved, spilled and gated.
	From string
	// Tokens charged to Replica's in-flight tokens; pass them to Done.
	Tokens int64
}

// String renders the decision deterministically for logs and golden files.
func (d Decision) String() string {
	s := d.Outcome.String()
	if d.Replica != "" {
		s += " → " + d.Replica
	}
	if d.From != "" {
		s += " from " + d.From
	}
	if d.Tokens != 0 {
		s += fmt.Sprintf(" tokens=%d", d.Tokens)
	}
	return s
}

// OK reports whether the request may be sent (Replica is set).
func (d Decision) OK() bool { return d.Replica != "" }

// ReplicaView is a read-only snapshot of one replica.
type ReplicaView struct {
	URL     string
	Healthy bool
	State   State
	Version int64
	// Lag is how many versions the replica is behind the newest one any
	// replica acknowledged (0 = up to date).
	Lag              int64
	Sessions         int
	InflightRequests int
	InflightTokens   int64
	QueueLen         int
	KVUsage          float64
	MetricsAt        time.Time
	// Eligible: may take new sessions right now (healthy, active, ≥ min
	// version, and up to date unless no up-to-date replica can take them).
	Eligible bool
}

// SessionView is a read-only snapshot of one session.
type SessionView struct {
	Key        string
	Replica    string
	LastAccess time.Time
	PrefixHash uint64
}
