package messages

import "strconv"

// Rollout flow: a prompt is assigned to a rollout actor, which runs n
// trajectories (one router session each) turn by turn and reports each one.

// PromptAssigned hands one prompt to a rollout actor, which turns it into a
// group of NSamples trajectories. Version: the policy version current when
// the staleness controller admitted the group (its scheduling step).
type PromptAssigned struct {
	Header
	PromptID string `cbor:"10,keyasint,omitempty"`
	GroupID  string `cbor:"11,keyasint,omitempty"`
	// Task names the environment/task that scores the trajectories.
	Task string `cbor:"12,keyasint,omitempty"`
	// Text is the prompt text; TokenIDs the pre-tokenised prompt. Either may be empty.
	Text     string  `cbor:"13,keyasint,omitempty"`
	TokenIDs []int32 `cbor:"14,keyasint,omitempty"`
	// NSamples is the group size n (GRPO).
	NSamples int32 `cbor:"15,keyasint,omitempty"`
	// Attempt counts requeues of this prompt (0 on first assignment).
	Attempt int32 `cbor:"16,keyasint,omitempty"`
}

func (PromptAssigned) Kind() Kind { return KindPromptAssigned }
func (m PromptAssigned) String() string {
	return newLine("PromptAssigned", m.Header).str("prompt", m.PromptID).str("group", m.GroupID).
		str("task", m.Task).str("text", m.Text).i32s("tokens", m.TokenIDs).
		i64("n", int64(m.NSamples)).i64("attempt", int64(m.Attempt)).done()
}

// TurnRequest asks for one generation turn of a trajectory (rollout → router
// → engine). Version: the minimum policy version the turn may be served by.
type TurnRequest struct {
	Header
	TrajectoryID string `cbor:"10,keyasint,omitempty"`
	GroupID      string `cbor:"11,keyasint,omitempty"`
	TurnIndex    int32  `cbor:"12,keyasint,omitempty"`
	// Engine is the engine/replica id the router picked (empty: router decides).
	Engine string `cbor:"13,keyasint,omitempty"`
	// Tokens is the full context (prompt and earlier turns) to continue from.
	Tokens      []int32 `cbor:"14,keyasint,omitempty"`
	MaxTokens   int32   `cbor:"15,keyasint,omitempty"`
	Temperature float64 `cbor:"16,keyasint,omitempty"`
	TopP        float64 `cbor:"17,keyasint,omitempty"`
	TopK        int32   `cbor:"18,keyasint,omitempty"`
	// ReturnRoutes asks the engine for routed experts (R3); RoutesPromptStart
	// is the number of context rows already captured in earlier turns.
	ReturnRoutes      bool  `cbor:"19,keyasint,omitempty"`
	RoutesPromptStart int32 `cbor:"20,keyasint,omitempty"`
}

func (TurnRequest) Kind() Kind { return KindTurnRequest }
func (m TurnRequest) String() string {
	return newLine("TurnRequest", m.Header).str("traj", m.TrajectoryID).str("group", m.GroupID).
		i64("turn", int64(m.TurnIndex)).str("engine", m.Engine).i32s("tokens", m.Tokens).
		i64("max_tokens", int64(m.MaxTokens)).f64("temperature", m.Temperature).f64("top_p", m.TopP).
		i64("top_k", int64(m.TopK)).boolean("routes", m.ReturnRoutes).
		i64("routes_prompt_start", int64(m.RoutesPromptStart)).done()
}

// TurnResult is one generated turn. Version: ServingVersion when the whole
// turn came from one version; TokenVersions says per token otherwise.
type TurnResult struct {
	Header
	TrajectoryID string    `cbor:"10,keyasint,omitempty"`
	TurnIndex    int32     `cbor:"11,keyasint,omitempty"`
	Engine       string    `cbor:"12,keyasint,omitempty"`
	Tokens       []int32   `cbor:"13,keyasint,omitempty"`
	Logprobs     []float32 `cbor:"14,keyasint,omitempty"`
	// FinishReason as the engine reports it: stop, length, abort.
	FinishReason string `cbor:"15,keyasint,omitempty"`
	// ServingVersion is the policy version of the engine when the turn finished.
	ServingVersion int64 `cbor:"16,keyasint,omitempty"`
	// TokenVersions is the policy version per generated token, when a weight
	// update landed mid-turn; empty means all tokens are ServingVersion.
	TokenVersions []int32 `cbor:"17,keyasint,omitempty"`
	// Routes, when requested, lies in a token batch on a data plane or inline.
	Routes *BatchRef `cbor:"18,keyasint,omitempty"`
}

func (TurnResult) Kind() Kind { return KindTurnResult }
func (m TurnResult) String() string {
	l := newLine("TurnResult", m.Header).str("traj", m.TrajectoryID).i64("turn", int64(m.TurnIndex)).
		str("engine", m.Engine).i32s("tokens", m.Tokens).f32s("logprobs", m.Logprobs).
		str("finish", m.FinishReason).i64("serving_v", m.ServingVersion).i32s("token_v", m.TokenVersions)
	return l.ref("routes", m.Routes).done()
}

// TrajectoryDone reports one finished (or aborted) trajectory. Version: the
// newest policy version that produced any of its tokens (MaxVersion).
type TrajectoryDone struct {
	Header
	TrajectoryID string  `cbor:"10,keyasint,omitempty"`
	GroupID      string  `cbor:"11,keyasint,omitempty"`
	PromptID     string  `cbor:"12,keyasint,omitempty"`
	Reward       float64 `cbor:"13,keyasint,omitempty"`
	// Tokens is the number of tokens (prompt and generated) in the trajectory.
	Tokens int64 `cbor:"14,keyasint,omitempty"`
	// MinVersion/MaxVersion bound the policy versions of its generated tokens.
	MinVersion int64  `cbor:"15,keyasint,omitempty"`
	MaxVersion int64  `cbor:"16,keyasint,omitempty"`
	Turns      int32  `cbor:"17,keyasint,omitempty"`
	Aborted    bool   `cbor:"18,keyasint,omitempty"`
	Reason     string `cbor:"19,keyasint,omitempty"`
}

func (TrajectoryDone) Kind() Kind { return KindTrajectoryDone }
func (m TrajectoryDone) String() string {
	return newLine("TrajectoryDone", m.Header).str("traj", m.TrajectoryID).str("group", m.GroupID).
		str("prompt", m.PromptID).f64("reward", m.Reward).i64("tokens", m.Tokens).
		i64("min_v", m.MinVersion).i64("max_v", m.MaxVersion).i64("turns", int64(m.Turns)).
		boolean("aborted", m.Aborted).str("reason", m.Reason).done()
}

// EpisodeAborted says a trajectory was given up (engine failure, timeout,
// cancellation) so its group can be requeued or shrunk. Version: the policy
// version at abort time.
type EpisodeAborted struct {
	Header
	TrajectoryID string `cbor:"10,keyasint,omitempty"`
	PromptID     string `cbor:"11,keyasint,omitempty"`
	GroupID      string `cbor:"12,keyasint,omitempty"`
	Reason       string `cbor:"13,keyasint,omitempty"`
}

func (EpisodeAborted) Kind() Kind { return KindEpisodeAborted }
func (m EpisodeAborted) String() string {
	return newLine("EpisodeAborted", m.Header).str("traj", m.TrajectoryID).str("prompt", m.PromptID).
		str("group", m.GroupID).str("reason", m.Reason).done()
}

// SessionFinished releases a router session (sticky mapping, load count).
type SessionFinished struct {
	Header
	SessionID    string `cbor:"10,keyasint,omitempty"`
	TrajectoryID string `cbor:"11,keyasint,omitempty"`
	Engine       string `cbor:"12,keyasint,omitempty"`
}

func (SessionFinished) Kind() Kind { return KindSessionFinished }
func (m SessionFinished) String() string {
	return newLine("SessionFinished", m.Header).str("session", m.SessionID).
		str("traj", m.TrajectoryID).str("engine", m.Engine).done()
}

// BatchRef points at a packed TokenBatch (Arrow IPC): either a durable stream
// message (Subject+Seq) or the bytes inline.
//
// A stream reference addresses the message the rollout actor stored in
// the trajectory buffer: an encoded GroupReady whose Batch holds the
// Arrow bytes inline (BatchRef.Resolve checks and extracts them). Inline
// remains for a bus without a trajectory buffer (a rollout actor without
// GroupStream publishes its groups plainly: unit tests, bench/scale's
// in-memory pipeline) and for TurnResult.Routes.
type BatchRef struct {
	Subject string `cbor:"1,keyasint,omitempty"`
	Seq     uint64 `cbor:"2,keyasint,omitempty"`
	// Inline holds the Arrow IPC stream itself; empty when Subject is set.
	Inline []byte `cbor:"3,keyasint,omitempty"`
	// Bytes is the encoded batch size, for accounting without fetching it.
	Bytes int64 `cbor:"4,keyasint,omitempty"`
	// Checksum of the encoded batch ("xxh3-128:<hex>" style: algorithm prefix).
	Checksum string `cbor:"5,keyasint,omitempty"`
}

func (l *line) ref(k string, r *BatchRef) *line {
	l.key(k)
	if r == nil {
		l.b = append(l.b, "nil"...)
		return l
	}
	l.b = appendRef(l.b, r)
	return l
}

func appendRef(b []byte, r *BatchRef) []byte {
	l := &line{b: b}
	l.b = append(l.b, "{subject="...)
	l.b = strconv.AppendQuote(l.b, r.Subject)
	l.b = append(l.b, " seq="...)
	l.b = strconv.AppendUint(l.b, r.Seq, 10)
	l.b = append(l.b, " inline="...)
	l.b = strconv.AppendInt(l.b, int64(len(r.Inline)), 10)
	l.b = append(l.b, "B bytes="...)
	l.b = strconv.AppendInt(l.b, r.Bytes, 10)
	l.b = append(l.b, " checksum="...)
	l.b = strconv.AppendQuote(l.b, r.Checksum)
	l.b = append(l.b, '}')
	return l.b
}
