package node

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport"
)

// TestControlBytesPerStep measures the bytes the default run (make run's
// config, 10 steps) puts on its control subjects per trained step — the
// kept groups (sampling → controller) and the TrainBatches (controller →
// trainer) — beside the trajectory subject the rollout actors store
// their groups on (the data itself): issue 31's batches by reference
// (bench/results/batchref.md; -v prints the figures). It asserts the
// shape, not a size: no kept GroupReady and no TrainBatch carries a token
// batch, each references a stored message, and the buffer deletes the
// settled groups.
func TestControlBytesPerStep(t *testing.T) {
	cfg := config.Default()
	cfg.Run.Steps, cfg.Run.Seed = 10, 1
	cfg.Run.DataDir = t.TempDir()
	cfg.Run.ReportDir = filepath.Join(t.TempDir(), "report")
	var mu sync.Mutex
	bytes, msgs := map[string]int64{}, map[string]int64{}
	var subs []transport.Subscription
	var node *Node
	onStart := func(n *Node) {
		node = n
		for _, subj := range []string{n.subj.Kept, n.subj.Train, n.subj.Trajectories} {
			s := subj
			sub, err := n.bus.Subscribe(s, func(m *transport.Msg) {
				mu.Lock()
				bytes[s] += int64(len(m.Data))
				msgs[s]++
				mu.Unlock()
				if s != n.subj.Trajectories {
					if err := onlyReferences(m.Data); err != nil {
						t.Errorf("%s: %v", s, err)
					}
				}
			})
			if err != nil {
				t.Errorf("subscribe %s: %v", s, err)
				continue
			}
			subs = append(subs, sub)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := Run(ctx, cfg, Options{InMemoryBus: true, OnStart: onStart})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	steps := max(int64(s.Steps), 1)
	for _, subj := range []string{"groups.kept", "train", "trajectories"} {
		full := "asyncrl." + cfg.Run.ID + "." + subj
		t.Logf("%-13s %6d msgs %10d bytes  %9.0f bytes/step", subj, msgs[full], bytes[full], float64(bytes[full])/float64(steps))
	}
	t.Logf("steps %d, reward first5 %.3f last5 %.3f", s.Steps, s.RewardFirst5, s.RewardLast5)
	// The buffer holds the groups in flight, not every group judged: the
	// sampling actor deleted each one the controller settled.
	deleted, held := node.smp.Released()
	t.Logf("trajectory buffer: %d settled groups deleted, %d referenced groups not settled at stop", deleted, held)
	if deleted == 0 {
		t.Errorf("no settled group was deleted from the trajectory buffer")
	}
}

// onlyReferences fails a kept GroupReady or a TrainBatch that carries a
// token batch instead of a reference to a stored one.
func onlyReferences(data []byte) error {
	msg, err := messages.Decode(data)
	if err != nil {
		return err
	}
	var refs []messages.BatchRef
	switch m := msg.(type) {
	case messages.GroupReady:
		refs = append(refs, m.Batch)
	case messages.TrainBatch:
		for _, g := range m.Groups {
			refs = append(refs, g.Batch)
		}
	default:
		return nil
	}
	for _, r := range refs {
		if len(r.Inline) != 0 || !r.Stored() {
			return fmt.Errorf("a %T carries %d inline bytes (stored reference: %v)", msg, len(r.Inline), r.Stored())
		}
	}
	return nil
}
