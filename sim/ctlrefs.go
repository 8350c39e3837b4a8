package sim

import (
	"github.com/asyncrl/asyncrl/messages"
)

// batchStore holds the token batches of the groups the sampling core
// kept, addressed by sequence, as the run's trajectory buffer (JetStream)
// holds the messages the control messages reference (issue 31: batches by
// reference). The kept GroupReady and the TrainBatch carry a BatchRef to
// an entry; the trainer fetches it. An entry is deleted when the
// controller's ledger settles its group (trained, filtered, requeued), as
// the sampling actor's shell deletes the stored message
// (actors/sampling/refs.go). It survives a controller crash: a restarted
// controller re-sends its in-flight batch (controller.Resume), whose
// groups are unsettled and so still stored — the real stream outlives the
// controller process the same way.
type batchStore struct {
	next    uint64
	msgs    map[uint64][]byte // seq → the stored GroupReady, batch inline
	byGroup map[string]uint64
}

func newBatchStore() *batchStore {
	return &batchStore{msgs: map[uint64][]byte{}, byGroup: map[string]uint64{}}
}

// put stores a group's message and returns its sequence.
func (s *batchStore) put(group string, payload []byte) uint64 {
	s.next++
	s.msgs[s.next] = payload
	s.byGroup[group] = s.next
	return s.next
}

// get reads the message at seq.
func (s *batchStore) get(seq uint64) ([]byte, bool) {
	p, ok := s.msgs[seq]
	return p, ok
}

// release deletes a settled group's message (no-op for one never stored).
func (s *batchStore) release(group string) {
	if seq, ok := s.byGroup[group]; ok {
		delete(s.msgs, seq)
		delete(s.byGroup, group)
	}
}

// storeKept stores a kept group's token batch (data) and turns m's batch
// into the reference the sampling actor forwards: subject, sequence,
// size and checksum, no bytes.
func (c *ctlNode) storeKept(m messages.GroupReady, data []byte) (messages.GroupReady, error) {
	stored := m
	stored.Batch = messages.BatchRef{Inline: data, Bytes: int64(len(data)), Checksum: messages.BatchChecksum(data)}
	payload, err := messages.Encode(stored)
	if err != nil {
		return m, err
	}
	seq := c.batches.put(m.GroupID, payload)
	m.Batch = messages.BatchRef{Subject: plan.Trajectories, Seq: seq, Bytes: stored.Batch.Bytes, Checksum: stored.Batch.Checksum}
	return m, nil
}

// trainedOf counts the tokens a loss mask trains (GroupReady's
// TrainedTokens).
func trainedOf(mask []uint8) int32 {
	n := int32(0)
	for _, m := range mask {
		if m != 0 {
			n++
		}
	}
	return n
}
