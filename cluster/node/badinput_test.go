package node

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport"
)

// TestBadInputOnEverySubject: while a run trains, every control subject
// of the pipeline gets malformed payloads — empty, random bytes, a valid
// frame cut short, a valid frame of a kind the subject does not carry —
// and an oversized one, which the bus refuses before it reaches anyone.
// Nothing crashes, the decoders count what they refused, and the run
// ends with every step trained once (issue 21: bad input on any subject
// is refused without a crash).
func TestBadInputOnEverySubject(t *testing.T) {
	cfg := smallConfig(t, 4)
	var sent int
	n, s := runNode(t, cfg, func(n *Node) {
		ack, err := nodeAck(n.subj)
		if err != nil {
			t.Fatal(err)
		}
		subs := []string{n.subj.Prompts, n.subj.Trajectories, n.subj.Aborted, n.subj.Kept, n.subj.Filtered,
			n.subj.Train, n.subj.Steps, n.subj.Weights, n.subj.Capacity, ack}
		valid, err := messages.Encode(messages.CapacityChanged{Header: messages.Header{RunID: cfg.Run.ID, Sender: "intruder"}, Capacity: 1 << 40})
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(1, 2))
		junk := make([]byte, 512)
		for i := range junk {
			junk[i] = byte(rng.IntN(256))
		}
		payloads := [][]byte{{}, junk, valid[:len(valid)/2], {0xff, 0xff, 0xff, 0xff}}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, sub := range subs {
			for _, p := range payloads {
				if err := n.bus.Publish(ctx, sub, p); err != nil {
					t.Errorf("publish %d bytes on %s: %v", len(p), sub, err)
				}
				sent++
			}
			if sub != n.subj.Capacity { // the one subject this kind belongs on
				if err := n.bus.Publish(ctx, sub, valid); err != nil {
					t.Errorf("publish on %s: %v", sub, err)
				}
			}
		}
		big := make([]byte, n.bus.MaxPayload()+1)
		if err := n.bus.Publish(ctx, n.subj.Train, big); !errors.Is(err, transport.ErrPayloadTooLarge) {
			t.Errorf("an oversized TrainBatch: %v; want ErrPayloadTooLarge", err)
		}
	})
	if s.Steps != 4 || s.TrajectoriesLost != 0 {
		t.Fatalf("steps %d lost %d after the bad input", s.Steps, s.TrajectoriesLost)
	}
	checkLedger(t, n, s)
	if d := counterValue(t, n, "asyncrl_actor_decode_errors_total"); d == 0 {
		t.Errorf("no decode error counted after %d malformed payloads", sent)
	}
}
