package sim

import (
	"github.com/asyncrl/asyncrl/actors/sampling"
	"github.com/asyncrl/asyncrl/messages"
)

// batchStore holds the token batches of the groups the sampling core
// kept, addressed by sequence, as the run's trajectory buffer (JetStream)
// holds the messages the control messages reference (issue 31: batches by
// reference). The kept GroupReady and the TrainBatch carry a BatchRef to
// an entry; the trainer fetches it. Which entries stay is the sampling
// actor's own rule (sampling.Held, stepped here as its shell refs.go
// steps it): an entry is deleted when the controller's ledger settles its
// group (trained, filtered, requeued). It survives a controller crash: a restarted
// controller re-sends its in-flight batch (controller.Resume), whose
// groups are unsettled and so still stored — the real stream outlives the
// controller process the same way.
type batchStore struct {
	next uint64
	msgs map[uint64][]byte // seq → the stored GroupReady, batch inline
	held *sampling.Held
}

func newBatchStore() *batchStore {
	return &batchStore{msgs: map[uint64][]byte{}, held: sampling.NewHeld()}
}

// put stores a message and returns its sequence.
func (s *batchStore) put(payload []byte) uint64 {
	s.next++
	s.msgs[s.next] = payload
	return s.next
}

// get reads the message at seq.
func (s *batchStore) get(seq uint64) ([]byte, bool) {
	p, ok := s.msgs[seq]
	return p, ok
}

// settle applies a ledger entry to the held table and deletes the
// message of a group it settles.
func (s *batchStore) settle(l messages.PromptLedger) {
	if seq, ok := s.held.Settle(l); ok {
		delete(s.msgs, seq)
	}
}

// storeKept stores a kept group's token batch (data) and turns m's batch
// into the reference the sampling actor forwards: subject, sequence,
// size and checksum, no bytes.
func (c *ctlNode) storeKept(m messages.GroupReady, data []byte) (messages.GroupReady, error) {
	stored := m
	stored.Batch = messages.InlineRef(data)
	payload, err := messages.Encode(stored)
	if err != nil {
		return m, err
	}
	seq := c.batches.put(payload)
	ref, _ := sampling.Reference(stored, plan.Trajectories, seq)
	c.batches.held.Keep(m.GroupID, seq)
	return ref, nil
}
