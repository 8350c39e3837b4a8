package sampling

import "github.com/asyncrl/asyncrl/messages"

// Held is the pure rule of batches by reference (issue 31 item 5): which
// stored groups the trajectory buffer must keep. A kept group is
// forwarded as a reference to its stored message (Reference) and held
// until the controller's PromptLedger settles it — trained (sent after
// the step's StepDone, so no trainer fetches it again), filtered or
// requeued; then its message may be deleted. Any other ledger state keeps
// it. The sampling actor's shell (refs.go) and the simulator step this
// same table; Held has no locks, goroutines or I/O.
type Held struct {
	seqs map[string]uint64 // group → its stored message's sequence
}

// NewHeld returns an empty table.
func NewHeld() *Held { return &Held{seqs: map[string]uint64{}} }

// Keep records that group's reference points at the stored message seq.
func (h *Held) Keep(group string, seq uint64) { h.seqs[group] = seq }

// Settle applies a ledger entry: when it settles a held group, the group
// is released and its message's sequence returned (delete it); otherwise
// ok is false and nothing changes.
func (h *Held) Settle(l messages.PromptLedger) (seq uint64, ok bool) {
	switch l.State {
	case messages.LedgerTrained, messages.LedgerFiltered, messages.LedgerRequeued:
	default:
		return 0, false
	}
	seq, ok = h.seqs[l.GroupID]
	delete(h.seqs, l.GroupID)
	return seq, ok
}

// Len is the number of groups held.
func (h *Held) Len() int { return len(h.seqs) }

// Reference turns a stored GroupReady (its batch inline, as the rollout
// published it) into the one forwarded: a reference to the stored message
// (subject, sequence) with the batch's size and checksum — the rollout's
// when it packed them, else computed — and no bytes. ok is false for a
// group that is already a reference or carries no batch (forwarded as is).
func Reference(g messages.GroupReady, subject string, seq uint64) (messages.GroupReady, bool) {
	b := g.Batch
	if b.Stored() || len(b.Inline) == 0 {
		return g, false
	}
	if b.Bytes == 0 {
		b.Bytes = int64(len(b.Inline))
	}
	if b.Checksum == "" {
		b.Checksum = messages.BatchChecksum(b.Inline)
	}
	g.Batch = messages.BatchRef{Subject: subject, Seq: seq, Bytes: b.Bytes, Checksum: b.Checksum}
	return g, true
}
