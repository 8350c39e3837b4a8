package weightsync

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/cluster/localengine"
	"github.com/asyncrl/asyncrl/config"
	pol "github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/transport/dataplane"
)

// TestDataPlaneFetchVerifies: the fetch side alone — a clean version loads
// to the published weights, a corrupted one fails with ErrChecksum, a
// withdrawn one with ErrUnknownTransfer.
func TestDataPlaneFetchVerifies(t *testing.T) {
	m, err := pol.New(pol.DefaultConfig(), 7)
	if err != nil {
		t.Fatal(err)
	}
	d, err := newDataPlane("t", m.Config(), []string{"engine-0"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	d.corrupt = func(v int64, b []byte) {
		if v == 2 {
			b[len(b)-1] ^= 1
		}
	}
	ctx := context.Background()
	for v := int64(1); v <= 2; v++ {
		dir := t.TempDir()
		if err := m.SaveServing(dir); err != nil {
			t.Fatal(err)
		}
		if _, err := d.publishDir(ctx, dir, v); err != nil {
			t.Fatal(err)
		}
	}
	got, err := d.fetch(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := m.Clone()
	want.RoundBF16()
	probe := []int32{1, 2, 3}
	a, b := make([]float32, got.VocabSize()), make([]float32, want.VocabSize())
	got.NextLogits(probe, a)
	want.NextLogits(probe, b)
	if !slices.Equal(a, b) {
		t.Error("version 1 fetched from the data plane differs from the published weights")
	}
	if _, err := d.fetch(ctx, 2); !errors.Is(err, dataplane.ErrChecksum) {
		t.Errorf("corrupt version 2: %v, want ErrChecksum", err)
	}
	for v := int64(3); v <= 4; v++ { // versions 1 and 2 drop out of the offer window
		dir := t.TempDir()
		if err := m.SaveServing(dir); err != nil {
			t.Fatal(err)
		}
		if _, err := d.publishDir(ctx, dir, v); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.fetch(ctx, 1); !errors.Is(err, dataplane.ErrUnknownTransfer) {
		t.Errorf("withdrawn version 1: %v, want ErrUnknownTransfer", err)
	}
	if r := testutil.ToFloat64(d.refused); r != 2 {
		t.Errorf("refused %v, want 2", r)
	}
}

// TestDataPlaneLoadOnAStoppedEngineIsGone: the data plane swaps versions
// into engines of this process; a load on one this process stopped fails
// with ErrEngineGone (the Agent then takes it out of rotation for good,
// Leave), a load on a running one swaps the version in.
func TestDataPlaneLoadOnAStoppedEngineIsGone(t *testing.T) {
	m, err := pol.New(pol.DefaultConfig(), 7)
	if err != nil {
		t.Fatal(err)
	}
	ec := config.Default().Engines
	ec.Count, ec.TimeScale = 2, 0
	les, err := localengine.Start(ec, m.Clone(), 1, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer localengine.StopAll(les)
	d, err := newDataPlane("t", m.Config(), []string{les[0].Name, les[1].Name}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	ctx := context.Background()
	dir := t.TempDir()
	if err := m.SaveServing(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := d.publishDir(ctx, dir, 1); err != nil {
		t.Fatal(err)
	}
	agent := func(le *localengine.Engine) *Agent {
		dr, err := DriveLocal(le, "asyncrl-policy", "")
		if err != nil {
			t.Fatal(err)
		}
		return &Agent{c: AgentConfig{Engine: dr, PauseMode: string(config.PauseKeep)}}
	}
	if v, err := (dataPlaneSource{d}).load(ctx, agent(les[0]), 1); err != nil || v != 1 || les[0].E.Stats().Version != 1 {
		t.Fatalf("running engine: load %d, %v; serves %d", v, err, les[0].E.Stats().Version)
	}
	if err := les[1].Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := (dataPlaneSource{d}).load(ctx, agent(les[1]), 1); !errors.Is(err, ErrEngineGone) {
		t.Fatalf("stopped engine: %v, want ErrEngineGone", err)
	}
}
