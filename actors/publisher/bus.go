package publisher

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/asyncrl/asyncrl/internal/fsutil"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport"
)

// BusPublisher is the Publisher of a remote trainer worker: it writes the
// BF16 serving checkpoint of each version to Dir (a directory the engines'
// node can read: the same machine, or a shared file system), announces it
// with WeightsPublished on Weights, and returns once an EngineVersionAck for
// that version arrives on Acks (the node loaded it on its engines), so
// StepDone never runs ahead of the weights.
type BusPublisher struct {
	Bus transport.Bus
	// RunID and Sender fill the WeightsPublished header.
	RunID, Sender string
	// Dir receives one checkpoint directory per version (v00000001, …).
	Dir string
	// Weights is the WeightsPublished subject; Acks the pattern of
	// EngineVersionAck subjects (asyncrl.<run>.engines.*.ack).
	Weights, Acks string
	// AckTimeout bounds the wait for the ack (default 60 s).
	AckTimeout time.Duration
	// Resend is how often the announcement is repeated until an ack comes
	// (default 2 s): a plain publish made while the bus reconnects is lost,
	// and one lost announcement would otherwise stall training until
	// AckTimeout (found by asyncrl chaos --faults bus-reconnect). The node
	// treats a repeat of a version it already serves as a request to ack
	// again, and a repeat of its newest version that no engine serves
	// (every engine failed it) as a request to publish it again
	// (cluster/node publishRemote) once publisher.retry_backoff has passed
	// since its last try (doubling each try), so an engine that is back
	// acks it within that backoff and one that keeps refusing it is not
	// told to load it on every repeat.
	Resend time.Duration
}

var _ Publisher = (*BusPublisher)(nil)

// CheckpointDir is where version v is written under dir.
func CheckpointDir(dir string, v int64) string { return filepath.Join(dir, fmt.Sprintf("v%08d", v)) }

// Publish writes, announces and waits for the ack of version. A serving
// directory under Dir (an exec child's whose out_dir is there) is
// announced where it is; one elsewhere is copied under Dir first, and the
// built-in policy in memory is written there.
func (p *BusPublisher) Publish(ctx context.Context, w Weights, version int64) error {
	dir, err := p.stage(w, version)
	if err != nil {
		return fmt.Errorf("trainer: publish: %w", err)
	}
	acked := make(chan struct{})
	var once bool
	sub, err := p.Bus.Subscribe(p.Acks, func(msg *transport.Msg) {
		a, err := messages.DecodeAs[messages.EngineVersionAck](msg.Data)
		if err == nil && a.RunID == p.RunID && a.Version >= version && !once {
			once = true
			close(acked)
		}
	})
	if err != nil {
		return fmt.Errorf("trainer: publish: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	data, err := messages.Encode(messages.WeightsPublished{
		Header:      messages.Header{RunID: p.RunID, Sender: p.Sender, Version: version},
		BaseVersion: version, Format: messages.WeightsFull, URI: "file://" + dir,
	})
	if err != nil {
		return err
	}
	if err := p.Bus.Publish(ctx, p.Weights, data); err != nil {
		return fmt.Errorf("trainer: publish: %w", err)
	}
	timeout, resend := p.AckTimeout, p.Resend
	if timeout <= 0 {
		timeout = time.Minute
	}
	if resend <= 0 {
		resend = 2 * time.Second
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	tick := time.NewTicker(resend)
	defer tick.Stop()
	for {
		select {
		case <-acked:
			return nil
		case <-tick.C:
			// A failed repeat is not fatal: the next tick tries again.
			_ = p.Bus.Publish(ctx, p.Weights, data)
		case <-t.C:
			return fmt.Errorf("trainer: publish: no engine acknowledged version %d within %v", version, timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// stage is the directory version is announced from (see Publish).
func (p *BusPublisher) stage(w Weights, version int64) (string, error) {
	if w.Dir != "" {
		if rel, err := filepath.Rel(p.Dir, w.Dir); err == nil && filepath.IsLocal(rel) {
			return w.Dir, nil
		}
	}
	dir := CheckpointDir(p.Dir, version)
	if w.Dir != "" {
		return dir, fsutil.CopyDir(dir, w.Dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	return dir, w.Model.SaveServing(dir)
}
