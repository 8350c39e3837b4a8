package node

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/actors/publisher"
	"github.com/asyncrl/asyncrl/cluster/weightsync"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/weights/delta"
)

// checkRepeatIsAcked: a worker repeats an announcement until it sees an
// ack (its first ack may be lost in a bus reconnect), so the node must ack
// a repeat of a version it already serves.
func checkRepeatIsAcked(t *testing.T, n *Node, cfg config.Config, version int64) {
	t.Helper()
	acked := make(chan struct{}, 1)
	sub, err := n.Bus().Subscribe(n.subj.AcksAll, func(m *transport.Msg) {
		if a, err := messages.DecodeAs[messages.EngineVersionAck](m.Data); err == nil && a.Version >= version {
			select {
			case acked <- struct{}{}:
			default:
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	dir := filepath.Join(cfg.Run.DataDir, "weights")
	if cfg.Publisher.SyncDir != "" {
		dir = cfg.Publisher.SyncDir
	}
	data, err := messages.Encode(messages.WeightsPublished{Header: messages.Header{RunID: cfg.Run.ID, Sender: "worker", Version: version},
		BaseVersion: version, Format: messages.WeightsFull, URI: "file://" + publisher.CheckpointDir(dir, version)})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Bus().Publish(context.Background(), n.subj.Weights, data); err != nil {
		t.Fatal(err)
	}
	select {
	case <-acked:
	case <-time.After(10 * time.Second):
		t.Fatalf("a repeated announcement of version %d got no ack", version)
	}
}

// TestRemoteTrainerWorker runs the trainer as a worker process (here a
// goroutine with its own bus connection): its versions reach the engines
// as deltas through the receivers (publisher.mode delta), or from memory
// (full).
func TestRemoteTrainerWorker(t *testing.T) {
	for _, mode := range []config.PublishMode{config.PublishDelta, config.PublishFull} {
		t.Run(string(mode), func(t *testing.T) { testRemoteTrainerWorker(t, mode) })
	}
}

func testRemoteTrainerWorker(t *testing.T, mode config.PublishMode) {
	cfg := smallConfig(t, 3)
	cfg.Trainer.Backend = config.BackendRemote
	cfg.Publisher.Mode = mode
	n, err := New(cfg, Options{InMemoryBus: true, ResendTrainAfter: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// The worker connects after the node started (and possibly after the
	// first TrainBatch was sent): the controller's resend covers that.
	wctx, wcancel := context.WithCancel(ctx)
	werr := make(chan error, 1)
	go func() { werr <- RunWorker(wctx, cfg, WorkerOptions{NATSURL: n.BusURL()}) }()
	interrupted, err := n.Wait(ctx)
	wcancel()
	if e := <-werr; e != nil {
		t.Errorf("worker: %v", e)
	}
	checkRepeatIsAcked(t, n, cfg, 3)
	n.Stop()
	if err != nil || interrupted {
		t.Fatalf("wait: interrupted %v err %v", interrupted, err)
	}
	s := n.Summary(false, nil)
	if s.Steps != 3 || s.FinalVersion != 3 || s.TrajectoriesLost != 0 {
		t.Fatalf("steps %d final %d lost %d", s.Steps, s.FinalVersion, s.TrajectoriesLost)
	}
	for i, v := range s.EngineVersions {
		if v != 3 {
			t.Errorf("engine %d at version %d: the worker's versions did not reach it", i, v)
		}
	}
	for _, r := range s.PerStep {
		if r.Tokens == 0 || r.Microbatches == 0 {
			t.Errorf("step row from the worker's StepDone lacks its figures: %+v", r)
		}
	}
	checkLedger(t, n, s)
	_, err = delta.ReadManifestDir(filepath.Join(weightsync.LayoutFor(cfg).SyncDir, delta.DeltaDir(3)), 3)
	if (err == nil) != (mode == config.PublishDelta) {
		t.Errorf("mode %s: delta version 3 in the sync dir: %v", mode, err)
	}
}
