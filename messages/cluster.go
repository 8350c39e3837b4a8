package messages

// Cluster flow (asyncrl node): the trainer lease's holder announces its
// term, and nodes that run rollout actors for it report what they hold in
// flight, so the holder can requeue a dead node's groups.

// TermAnnounce is the trainer lease holder's periodic announcement of the
// pipeline it runs, on asyncrl.<run>.control.term (the run's base id).
// Header.Sender: the holder's node name; Version: the trainer's current
// global version.
type TermAnnounce struct {
	Header
	// Term is the pipeline's run id (<run>-t<token>): its subjects and
	// streams.
	Term string `cbor:"10,keyasint,omitempty"`
	// Token is the holder's fencing token; a node follows the largest.
	Token uint64 `cbor:"11,keyasint,omitempty"`
	// Router is the base URL of the term's router (where rollout actors
	// send their turns).
	Router string `cbor:"12,keyasint,omitempty"`
}

func (TermAnnounce) Kind() Kind { return KindTermAnnounce }
func (m TermAnnounce) String() string {
	return newLine("TermAnnounce", m.Header).str("term", m.Term).i64("token", int64(m.Token)).
		str("router", m.Router).done()
}

// RolloutStatus lists the groups a node's rollout actors are running, on
// asyncrl.<term>.control.rollouts.<node>, once a second. Header.Sender:
// the node. When the node dies, the holder reports these groups aborted
// so the controller requeues them.
type RolloutStatus struct {
	Header
	// GroupIDs and PromptIDs are parallel: group i runs prompt i.
	GroupIDs  []string `cbor:"10,keyasint,omitempty"`
	PromptIDs []string `cbor:"11,keyasint,omitempty"`
}

func (RolloutStatus) Kind() Kind { return KindRolloutStatus }
func (m RolloutStatus) String() string {
	return newLine("RolloutStatus", m.Header).strs("groups", m.GroupIDs).strs("prompts", m.PromptIDs).done()
}

// NodeLeaving is a node's word, on asyncrl.<run>.control.leaving just
// before it leaves gossip cleanly, that it is going for good: the others
// drop it from the quorum's voters instead of counting it as failed
// (gossip alone reports a clean leave and a death alike). Header.Sender:
// the node.
type NodeLeaving struct {
	Header
}

func (NodeLeaving) Kind() Kind { return KindNodeLeaving }
func (m NodeLeaving) String() string {
	return newLine("NodeLeaving", m.Header).done()
}
