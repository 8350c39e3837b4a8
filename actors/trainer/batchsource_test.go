package trainer

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/actors/sampling/samplingtest"
	"github.com/asyncrl/asyncrl/actors/trainer/microbatch"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/transport"
)

// storeGroup stores group's trajectories in the trajectory buffer st as
// the rollout actor does (a GroupReady, batch inline) and returns the
// reference the sampling actor forwards.
func storeGroup(t *testing.T, st transport.Stream, subject, group string, rewards ...float32) messages.GroupRef {
	t.Helper()
	tb, _ := messages.NewTokenBatch(messages.BatchSpec{Vocab: 98})
	for i, r := range rewards {
		if err := tb.Append(traj(group+string(rune('a'+i)), group, r, 0, 0)); err != nil {
			t.Fatal(err)
		}
	}
	return messages.GroupRef{GroupID: group, Batch: samplingtest.StoreGroup(t, st, subject, group, tb)}
}

// TestTrainerFetchesReferencedGroups: on a real JetStream trajectory
// buffer, a TrainBatch of references trains (both groups fetched by
// sequence); a later step one of whose groups was deleted fails clearly —
// the error names the stream and sequence — and trains nothing: no
// publish, no StepDone, the trainer's version unchanged.
func TestTrainerFetchesReferencedGroups(t *testing.T) {
	ctx := context.Background()
	st, subject, bus := realBuffer(t)
	m, _ := model.New(model.DefaultConfig(), 1)
	ptr, _ := model.NewTrainer(m, model.DefaultTrainerConfig())
	pub := &recordingPublisher{}
	next := expect[messages.StepDone](t, bus, "S")
	a, err := Start(bus, ptr, pub, Config{RunID: "r", Name: "t", NormStd: true, Microbatch: microbatch.DefaultConfig(),
		Subjects: Subjects{Train: "T", Steps: "S"}, Batches: StreamSource{Stream: st.(transport.StoredReader), Name: st.Name()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Stop(context.Background()) })
	send := func(step int64, refs ...messages.GroupRef) {
		tb := messages.TrainBatch{Header: messages.Header{RunID: "r"}, Step: step, Groups: refs}
		for _, g := range refs {
			tb.GroupIDs = append(tb.GroupIDs, g.GroupID)
		}
		data, err := messages.Encode(tb)
		if err != nil {
			t.Fatal(err)
		}
		if err := bus.Publish(ctx, "T", data); err != nil {
			t.Fatal(err)
		}
	}

	send(1, storeGroup(t, st, subject, "g1", 1, 0), storeGroup(t, st, subject, "g2", 0, 1))
	if sd := next(); sd.Step != 1 || sd.NewVersion != 1 || sd.Stats["tokens"] != 12 {
		t.Fatalf("step 1 from references: %v (want 4 trajectories of 3 tokens trained)", sd)
	}

	keep, gone := storeGroup(t, st, subject, "g3", 1, 0), storeGroup(t, st, subject, "g4", 0, 1)
	if err := st.(transport.StoredReader).DeleteMsg(ctx, gone.Batch.Seq); err != nil {
		t.Fatal(err)
	}
	send(2, keep, gone)
	waitErr(a)
	err = a.Err()
	if !errors.Is(err, ErrBatchMissing) || !strings.Contains(err.Error(), "stream groups-r seq "+strconv.FormatUint(gone.Batch.Seq, 10)) ||
		!strings.Contains(err.Error(), "group g4") {
		t.Fatalf("step 2 with a deleted group: err %v; want ErrBatchMissing naming group g4 and stream groups-r seq %d", err, gone.Batch.Seq)
	}
	pub.mu.Lock()
	defer pub.mu.Unlock()
	if ptr.Version() != 1 || len(pub.versions) != 1 || len(a.Steps()) != 1 {
		t.Fatalf("after the failed step: trainer version %d, published %v, %d steps; want 1, [1], 1 (nothing trained)",
			ptr.Version(), pub.versions, len(a.Steps()))
	}
}
