package chaos

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/asyncrl/asyncrl/cluster/node"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/natsbus"
)

// readDurableLedger reopens the JetStream store the run left in storeDir
// (the node and its NATS server are stopped by then) and rebuilds every
// group's history from the prompt ledger stream alone: consumed, accepted
// with its staleness, and each trained, filtered or requeued record. It is
// the post-mortem view that survives the process, so the invariants are
// checked against what was durably written, not only against what one
// subscriber happened to see.
func readDurableLedger(ctx context.Context, storeDir, runID string) ([]node.GroupRecord, int, error) {
	opts := natsbus.DefaultOptions()
	opts.StoreDir = storeDir
	opts.Name = "asyncrl-chaos-audit"
	bus, err := natsbus.Connect(ctx, opts)
	if err != nil {
		return nil, 0, fmt.Errorf("chaos: audit: reopen %s: %w", storeDir, err)
	}
	defer bus.Close()
	plan, err := transport.Plan(runID)
	if err != nil {
		return nil, 0, fmt.Errorf("chaos: audit: %w", err)
	}
	js, err := jetstream.New(bus.Conn())
	if err != nil {
		return nil, 0, fmt.Errorf("chaos: audit: %w", err)
	}
	st, err := js.Stream(ctx, plan.LedgerStream)
	if err != nil {
		return nil, 0, fmt.Errorf("chaos: audit: ledger stream: %w", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("chaos: audit: ledger stream: %w", err)
	}
	last := info.State.LastSeq
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, 0, fmt.Errorf("chaos: audit: consumer: %w", err)
	}
	recs := map[string]*node.GroupRecord{}
	var order []string
	get := func(id string) *node.GroupRecord {
		g, ok := recs[id]
		if !ok {
			g = &node.GroupRecord{GroupID: id}
			recs[id] = g
			order = append(order, id)
		}
		return g
	}
	var seen uint64
	n := 0
	for seen < last {
		if err := ctx.Err(); err != nil {
			return nil, n, err
		}
		batch, err := cons.Fetch(512, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, n, fmt.Errorf("chaos: audit: fetch: %w", err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			if md, err := m.Metadata(); err == nil {
				seen = max(seen, md.Sequence.Stream)
			}
			msg, err := messages.Decode(m.Data())
			if err != nil {
				continue
			}
			n++
			switch v := msg.(type) {
			case messages.PromptLedger:
				get(v.GroupID).ApplyLedger(v)
			case messages.GroupAccepted:
				get(v.GroupID).ApplyAccepted(v)
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return nil, n, fmt.Errorf("chaos: audit: fetch: %w", err)
		}
		if got == 0 {
			return nil, n, fmt.Errorf("chaos: audit: the ledger stream ended at %d of %d", seen, last)
		}
	}
	out := make([]node.GroupRecord, 0, len(order))
	for _, id := range order {
		out = append(out, *recs[id])
	}
	return out, n, nil
}

// compareLedgers lists the groups whose final states differ between the
// durable ledger and the node's live view of the bus.
func compareLedgers(durable, live []node.GroupRecord) []string {
	byID := map[string]node.GroupRecord{}
	for _, g := range live {
		byID[g.GroupID] = g
	}
	var out []string
	inDurable := map[string]bool{}
	for _, d := range durable {
		inDurable[d.GroupID] = true
	}
	for _, l := range live {
		if l.Terminal() && !inDurable[l.GroupID] {
			out = append(out, fmt.Sprintf("%s: ended on the bus (trained %d filtered %d requeued %d) but not in the durable ledger",
				l.GroupID, l.Trained, l.FilteredFinal, l.Requeued))
		}
	}
	for _, d := range durable {
		l := byID[d.GroupID]
		if d.Consumed != l.Consumed || d.Trained != l.Trained || d.FilteredFinal != l.FilteredFinal || d.Requeued != l.Requeued {
			out = append(out, fmt.Sprintf("%s: durable consumed=%v trained %d filtered %d requeued %d, live consumed=%v trained %d filtered %d requeued %d",
				d.GroupID, d.Consumed, d.Trained, d.FilteredFinal, d.Requeued, l.Consumed, l.Trained, l.FilteredFinal, l.Requeued))
		}
	}
	return out
}
