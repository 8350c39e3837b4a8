package weightsync

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	pol "github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/weights/delta"
	"github.com/asyncrl/asyncrl/weights/store"
)

// fullRefusing is a local store whose writes of full checkpoints (keys
// under full-) fail, as a store cut mid-upload would.
type fullRefusing struct{ *store.Local }

var errFullWrite = errors.New("full checkpoint write cut")

func (s fullRefusing) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if strings.HasPrefix(key, delta.KindFull+"-") {
		return errFullWrite
	}
	return s.Local.Put(ctx, key, r, size)
}

func (s fullRefusing) Commit(ctx context.Context, key string, data []byte) error {
	if strings.HasPrefix(key, delta.KindFull+"-") {
		return errFullWrite
	}
	return s.Local.Commit(ctx, key, data)
}

// TestFullCheckpointFailureStillPublishesTheDelta: a version whose full
// checkpoint is due (full_checkpoint_every 1) but cannot be written is
// still written as its delta — no error, so the version is announced —
// with FullBytes 0 and no prune scheduled below a full checkpoint that
// does not exist; the next version's delta is encoded against it.
func TestFullCheckpointFailureStillPublishesTheDelta(t *testing.T) {
	m, err := pol.New(pol.DefaultConfig(), 7)
	if err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	if err := m.SaveServing(base); err != nil {
		t.Fatal(err)
	}
	local, err := store.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pcfg := delta.DefaultPublisherConfig()
	pcfg.FullEvery = 1
	ctx := context.Background()
	mode, err := Store(ctx, fullRefusing{local}, pcfg, base, t.TempDir(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	s := mode.(*storeMode)
	w := &Sync{log: zerolog.Nop(), mode: mode,
		published:     prometheus.NewCounter(prometheus.CounterOpts{Name: "p"}),
		deltaBytes:    prometheus.NewCounter(prometheus.CounterOpts{Name: "d"}),
		encodeSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "e"})}
	for v := int64(1); v <= 2; v++ {
		next, err := pol.New(pol.DefaultConfig(), uint64(7+v)) // other weights: a delta with bytes
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		if err := next.SaveServing(dir); err != nil {
			t.Fatal(err)
		}
		info, full, err := s.write(ctx, w, dir, v, false, time.Now())
		if err != nil {
			t.Fatalf("version %d, whose full checkpoint cannot be written: %v, want it published as a delta", v, err)
		}
		if info.Version != v || info.DeltaBytes <= 0 || info.FullBytes != 0 || full {
			t.Fatalf("version %d: %+v (full %v), want version %d with its delta bytes, FullBytes 0 and no prune", v, info, full, v)
		}
		if w.Current() != v {
			t.Fatalf("Current = %d after version %d", w.Current(), v)
		}
	}
	if len(s.fulls) != 0 {
		t.Fatalf("full checkpoints recorded for pruning: %v, want none", s.fulls)
	}
	keys, err := local.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if strings.HasPrefix(k, delta.KindFull+"-") {
			t.Fatalf("store holds %s: no full checkpoint was written", k)
		}
	}
}
