package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/cluster/ckpt"
	"github.com/asyncrl/asyncrl/cluster/internal/clustertest"
	"github.com/asyncrl/asyncrl/cluster/ledger"
	"github.com/asyncrl/asyncrl/cluster/placement"
	"github.com/asyncrl/asyncrl/cluster/term"
	"github.com/asyncrl/asyncrl/cluster/weightsync"
	"github.com/asyncrl/asyncrl/internal/syncbuf"
	"github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/model/trainertest"
	"github.com/asyncrl/asyncrl/transport/natsbus"
)

// testCkptStore is run "ck"'s checkpoint store on an embedded bus.
func testCkptStore(t *testing.T) (*ckpt.Store, *natsbus.Bus) {
	t.Helper()
	b, err := natsbus.Connect(context.Background(), natsbus.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	raw, root, err := ckpt.OpenNATS(context.Background(), b.Conn(), "ck", 1, true)
	if err != nil {
		t.Fatal(err)
	}
	st, err := ckpt.New(raw, root, ckpt.Options{Scratch: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return st, b
}

// A term whose progress is past version 0 but records no checkpoint
// refuses to start instead of training on from the seed's weights; a
// fresh run starts without one; a recorded one is restored.
func TestTermCheckpointRefusesToRestartFromSeed(t *testing.T) {
	st, b := testCkptStore(t)
	ctx := context.Background()
	a := &Agent{cfg: Config{Name: "n1", Replicas: 1, InMemoryBus: true, Run: agentRunConfig(t, 4)}, bus: b}
	a.cfg.Run.Run.ID = "ck"
	dir := filepath.Join(t.TempDir(), "resume-t2")
	if _, _, err := startTermCkpt(ctx, a, ledger.Progress{Step: 3, Version: 3}, 2, dir, false, nil); !errors.Is(err, ckpt.ErrCheckpoint) ||
		!strings.Contains(err.Error(), "records no checkpoint") {
		t.Fatalf("progress at version 3 without a checkpoint: err %v", err)
	}
	if _, resume, err := startTermCkpt(ctx, a, ledger.Progress{}, 2, dir, false, nil); err != nil || resume {
		t.Fatalf("fresh run: resume %v err %v", resume, err)
	}
	loc, err := st.Save(ctx, trainertest.Trained(t, 2), 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := startTermCkpt(ctx, a, ledger.Progress{Step: 3, Version: 3, Checkpoint: loc}, 2, dir, false, nil); !errors.Is(err, ckpt.ErrCheckpoint) {
		t.Fatalf("a checkpoint of version 2 for progress at version 3: err %v", err)
	}
	var got []term.Input
	ck, resume, err := startTermCkpt(ctx, a, ledger.Progress{Step: 2, Version: 2, Checkpoint: loc}, 2, dir, false, func(in term.Input) { got = append(got, in) })
	if err != nil || !resume {
		t.Fatalf("resume: %v %v", resume, err)
	}
	if _, err := os.Stat(filepath.Join(dir, model.TrainerFileName)); err != nil {
		t.Fatalf("not downloaded into the resume dir: %v", err)
	}
	// The term's first step saves global version 3 and tells the term's
	// core where it lies (local version 1, the term's token).
	if err := ck.afterStep(ctx, trainertest.Trained(t, 3), 1); err != nil {
		t.Fatal(err)
	}
	want := term.CheckpointSaved{Token: 2, Version: 1, Location: st.Location(ckpt.Name(3, 2))}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("after local version 1 the core got %+v; want [%+v]", got, want)
	}
}

// n1 trains a few steps and stops; n2 takes the lease over and continues
// from the weights n1 made durable: the version 0 its engines serve (the
// term's base checkpoint) is bit-identical to n1's serving copy at the
// durable version, and its trainer's first version continues n1's
// optimiser step count. Without the restore, n2 would serve and train
// the seed's initial weights with a fresh Adam.
func TestAgentTakeoverRestoresCheckpointedWeights(t *testing.T) {
	url := externalBus(t)
	const steps = 5
	type saved struct {
		serving *model.Model
		trainer int64 // the trainer's own version (optimiser steps)
	}
	var mu sync.Mutex
	seen := map[string]map[int64]saved{} // node → global version → what it checkpointed
	// In the trainers' goroutines: copy, compare later in the test's.
	ckptSavedHook = func(node string, v int64, tr *model.Trainer) {
		s := saved{serving: tr.ServingCopy(), trainer: tr.Version()}
		mu.Lock()
		defer mu.Unlock()
		if seen[node] == nil {
			seen[node] = map[int64]saved{}
		}
		seen[node][v] = s
	}
	defer func() { ckptSavedHook = nil }()
	dataDirs := map[string]string{}
	mk := func(name string, ev *syncbuf.Buffer) *Agent {
		cfg := agentRunConfig(t, steps)
		dataDirs[name] = cfg.Run.DataDir
		return testAgent(t, url, Config{Name: name, Roles: []string{placement.Trainer, placement.Engine}, Run: cfg, Events: ev})
	}
	var ev1, ev2 syncbuf.Buffer
	a1 := mk("n1", &ev1)
	defer a1.Stop()
	clustertest.WaitFor(t, 30*time.Second, "n1 to train 2 steps", func() bool { return lastStep(ev1.String()) >= 2 })
	a2 := mk("n2", &ev2)
	defer a2.Stop()
	a1.Stop()
	stopped := int64(lastStep(ev1.String()))
	clustertest.WaitFor(t, 60*time.Second, "n2 to train a step", func() bool { return int64(lastStep(ev2.String())) > stopped })
	out := ev2.String()
	// The term that resumed: the last acquisition before a resume line.
	m := regexp.MustCompile(`(?s).*lease trainer acquired token (\d+).*?resume from checkpoint v(\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("n2 did not resume from a checkpoint:\n%s", out)
	}
	if from, _ := strconv.ParseInt(m[2], 10, 64); from != stopped {
		t.Fatalf("n2 resumed from checkpoint v%d; n1's last durable version was %d", from, stopped)
	}
	mu.Lock()
	n1At, n2Next := seen["n1"][stopped], seen["n2"][stopped+1]
	mu.Unlock()
	if n1At.serving == nil || n2Next.serving == nil {
		t.Fatalf("checkpoints seen: n1 v%d %v, n2 v%d %v", stopped, n1At.serving != nil, stopped+1, n2Next.serving != nil)
	}
	// What n2's engines serve as the term's version 0.
	tcfg := agentRunConfig(t, steps)
	tcfg.Run.DataDir = filepath.Join(dataDirs["n2"], "n2")
	tcfg.Run.ID = tcfg.Run.ID + "-t" + m[1]
	base, err := model.LoadServing(filepath.Join(weightsync.LayoutFor(tcfg).Publisher, "base"))
	if err != nil {
		t.Fatal(err)
	}
	n1Serving, n2Serving := trainertest.ServingBytes(t, n1At.serving), trainertest.ServingBytes(t, n2Next.serving)
	if !trainertest.Same(trainertest.ServingBytes(t, base), n1Serving) {
		t.Fatalf("n2's version 0 is not n1's serving copy at durable version %d", stopped)
	}
	seed, err := model.New(model.DefaultConfig(), uint64(tcfg.Run.Seed))
	if err != nil {
		t.Fatal(err)
	}
	seed.RoundBF16()
	if trainertest.Same(trainertest.ServingBytes(t, seed), n1Serving) {
		t.Fatal("n1's weights never left the seed's: the comparison above proves nothing")
	}
	if trainertest.Same(n2Serving, trainertest.ServingBytes(t, seed)) {
		t.Fatal("n2's first version is the seed's initial weights")
	}
	// The optimiser state came along: n2's first step is optimiser step
	// stopped+1, not 1.
	if n1At.trainer != stopped || n2Next.trainer != stopped+1 {
		t.Fatalf("optimiser steps: n1 at v%d %d, n2 at v%d %d", stopped, n1At.trainer, stopped+1, n2Next.trainer)
	}
}

// When the checkpoint the durable progress names is damaged, the standby's
// term fails with ckpt.ErrCheckpoint and gives the lease up (to be retried)
// instead of training on from the seed's weights.
func TestAgentTakeoverRefusesCorruptCheckpoint(t *testing.T) {
	url := externalBus(t)
	ctx := context.Background()
	mk := func(name string, ev *syncbuf.Buffer) *Agent {
		return testAgent(t, url, Config{Name: name, Roles: []string{placement.Trainer, placement.Engine}, Run: agentRunConfig(t, 20), Events: ev})
	}
	var ev1, ev2 syncbuf.Buffer
	a1 := mk("n1", &ev1)
	defer a1.Stop()
	clustertest.WaitFor(t, 30*time.Second, "n1 to train a step", func() bool { return lastStep(ev1.String()) >= 1 })
	a1.Stop()
	stopped := int64(lastStep(ev1.String()))
	m := regexp.MustCompile(`lease trainer acquired token (\d+)`).FindStringSubmatch(ev1.String())
	if m == nil {
		t.Fatalf("n1 events:\n%s", ev1.String())
	}
	tok, _ := strconv.ParseUint(m[1], 10, 64)
	opts := natsbus.DefaultOptions()
	opts.URL = url
	b, err := natsbus.Connect(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	raw, _, err := ckpt.OpenNATS(ctx, b.Conn(), agentRunConfig(t, 1).Run.ID, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.Delete(ctx, ckpt.Name(stopped, tok)+"/"+model.TrainerFileName); err != nil {
		t.Fatalf("deleting n1's durable checkpoint v%d-t%d: %v", stopped, tok, err)
	}
	a2 := mk("n2", &ev2)
	defer a2.Stop()
	clustertest.WaitFor(t, 30*time.Second, "n2's term to fail", func() bool { return strings.Contains(ev2.String(), "lease trainer resigned (failed)") })
	out := ev2.String()
	if !strings.Contains(out, "training failed") || !strings.Contains(out, ckpt.ErrCheckpoint.Error()) || !strings.Contains(out, "missing") {
		t.Fatalf("n2's failure does not name the damaged checkpoint:\n%s", out)
	}
	if strings.Contains(out, "resume from checkpoint") || lastStep(out) != 0 {
		t.Fatalf("n2 trained without the durable weights:\n%s", out)
	}
}
