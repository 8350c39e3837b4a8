package node

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/internal/report"
)

// smallConfig is a short run: reverse (single-turn, fast), B=2, W=4, S=1,
// n=4, 2 engines, files in temp dirs.
func smallConfig(t *testing.T, steps int) config.Config {
	t.Helper()
	c := config.Default()
	c.Run.ID = "test"
	c.Run.Steps = steps
	c.Run.DataDir = t.TempDir()
	c.Run.ReportDir = filepath.Join(t.TempDir(), "report")
	c.Rollout.Task = "reverse"
	c.Rollout.NSamplesPerPrompt = 4
	c.Rollout.Concurrency = 8
	c.Trainer.MiniBatchSize, c.Trainer.NumParallelGenerationWorkers, c.Trainer.MaxStalenessSteps = 2, 4, 1
	c.Router.HealthCheckInterval = 100 * time.Millisecond
	c.Router.HealthCheckTimeout = 100 * time.Millisecond
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return c
}

// checkLedger asserts every group ended trained, filtered or requeued at
// most once (and only after being consumed), and that the groups without
// a final state are exactly the ones the controller held at stop.
func checkLedger(t *testing.T, n *Node, s report.Summary) {
	t.Helper()
	open := 0
	trained := 0
	for _, g := range n.Ledger().Snapshot() {
		fates := g.Trained + g.FilteredFinal + g.Requeued
		if fates > 1 {
			t.Errorf("group %s settled %d times: %+v", g.GroupID, fates, g)
		}
		if fates > 0 && !g.Consumed {
			t.Errorf("group %s settled without being consumed: %+v", g.GroupID, g)
		}
		if g.Trained > 0 && (!g.Kept || !g.Accepted) {
			t.Errorf("group %s trained without passing the filter and the staleness check: %+v", g.GroupID, g)
		}
		if g.Staleness > s.StalenessBound {
			t.Errorf("group %s accepted with staleness %d > bound %d", g.GroupID, g.Staleness, s.StalenessBound)
		}
		if fates == 0 && g.Consumed {
			open++
		}
		trained += g.Trained
	}
	if int64(open) != s.GroupsInFlightAtStop {
		t.Errorf("%d consumed groups without a final state, controller held %d at stop", open, s.GroupsInFlightAtStop)
	}
	if b := n.cfg.Trainer.MiniBatchSize; int64(trained) != s.GroupsTrained || trained != s.Steps*b {
		t.Errorf("trained groups: ledger %d, controller %d, want steps·B = %d", trained, s.GroupsTrained, s.Steps*b)
	}
	if u := n.unsettled(); len(u) > 0 {
		t.Errorf("groups reported but never on the controller's books: %+v", u)
	}
}

func runNode(t *testing.T, cfg config.Config, during func(*Node)) (*Node, report.Summary) {
	t.Helper()
	return runNodeWith(t, cfg, Options{InMemoryBus: true}, during)
}

// runNodeWith is runNode with the node's Options.
func runNodeWith(t *testing.T, cfg config.Config, opts Options, during func(*Node)) (*Node, report.Summary) {
	t.Helper()
	n, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	// A deadline against hangs, not an expected duration: the 30-step
	// learning runs take seconds, but minutes on a loaded 2-core machine.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if during != nil {
		during(n)
	}
	interrupted, err := n.Wait(ctx)
	n.Stop()
	if err != nil || interrupted {
		t.Fatalf("wait: interrupted %v err %v", interrupted, err)
	}
	s := n.Summary(false, nil)
	if err := report.Write(cfg.Run.ReportDir, s); err != nil {
		t.Fatal(err)
	}
	return n, s
}

func TestShortLoopOverNATS(t *testing.T) {
	cfg := smallConfig(t, 4)
	cfg.Metrics.Listen = "127.0.0.1:0"
	var scraped string
	n, s := runNode(t, cfg, func(n *Node) {
		deadline := time.Now().Add(30 * time.Second)
		for len(n.steps()) < 1 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		resp, err := http.Get(n.MetricsURL())
		if err != nil {
			t.Errorf("scrape: %v", err)
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		scraped = string(b)
	})
	for _, want := range []string{"asyncrl_loop_steps_total", "asyncrl_loop_reward_mean", "asyncrl_rollout_trajectories_finished_total",
		`asyncrl_engine_weight_version{engine="1"}`} {
		if !strings.Contains(scraped, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if s.Steps != 4 || s.FinalVersion != 4 {
		t.Fatalf("steps %d final version %d", s.Steps, s.FinalVersion)
	}
	for i, v := range s.EngineVersions {
		if v != 4 {
			t.Errorf("engine %d serves version %d, want 4", i, v)
		}
	}
	if s.TrajectoriesLost != 0 || s.TrajectoriesStarted != s.TrajectoriesFinished+s.TrajectoriesAborted {
		t.Fatalf("lost %d: started %d finished %d aborted %d", s.TrajectoriesLost, s.TrajectoriesStarted, s.TrajectoriesFinished, s.TrajectoriesAborted)
	}
	if s.StalenessMax > s.StalenessBound || s.StalenessBound != 1 {
		t.Fatalf("staleness max %d bound %d", s.StalenessMax, s.StalenessBound)
	}
	checkLedger(t, n, s)
	// Versions advance one per step.
	for i, r := range s.PerStep {
		if r.Step != int64(i+1) || r.Version != int64(i+1) {
			t.Fatalf("step row %d = %+v", i, r)
		}
	}
	raw, err := os.ReadFile(filepath.Join(cfg.Run.ReportDir, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"steps", "final_version", "reward_mean_per_step", "staleness_max", "staleness_mean",
		"staleness_bound", "groups_generated", "groups_trained", "groups_dropped_zero_variance", "groups_requeued_stale",
		"trajectories_lost", "tokens_per_second", "wall_seconds", "seed"} {
		if _, ok := m[k]; !ok {
			t.Errorf("summary.json lacks %q", k)
		}
	}
	if rs := m["reward_mean_per_step"].([]any); len(rs) != 4 {
		t.Errorf("reward_mean_per_step has %d entries", len(rs))
	}
	// The reward by generating version covers every group the filter
	// judged: each trained or dropped group, none the rollouts did not
	// publish; versions are the run's.
	var judged int64
	for _, r := range s.RewardByVersion {
		judged += r.Groups
		if r.Version < 0 || r.Version > s.FinalVersion || r.Trajectories != r.Groups*int64(cfg.Rollout.NSamplesPerPrompt) ||
			r.Mean < 0 || r.Mean > 1 {
			t.Errorf("reward_by_version row %+v (final version %d, n %d)", r, s.FinalVersion, cfg.Rollout.NSamplesPerPrompt)
		}
	}
	if judged < s.GroupsTrained+s.GroupsDroppedZeroVariance || judged > s.GroupsGenerated {
		t.Errorf("reward_by_version counts %d groups; trained %d + dropped %d, generated %d",
			judged, s.GroupsTrained, s.GroupsDroppedZeroVariance, s.GroupsGenerated)
	}
	t.Logf("reward by version: %+v (trained %d dropped %d generated %d)", s.RewardByVersion, s.GroupsTrained, s.GroupsDroppedZeroVariance, s.GroupsGenerated)
	if _, ok := m["reward_by_version"].([]any); !ok {
		t.Errorf("summary.json lacks reward_by_version: %v", m["reward_by_version"])
	}
	// The per-step log holds the summary's rows, one a line, as written
	// during the run.
	lines, err := os.ReadFile(filepath.Join(cfg.Run.ReportDir, StepsFile))
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range strings.Split(strings.TrimSpace(string(lines)), "\n") {
		var row report.StepRow
		if err := json.Unmarshal([]byte(l), &row); err != nil || i >= len(s.PerStep) || row != s.PerStep[i] {
			t.Fatalf("%s line %d = %s (%v); want the summary's row %d", StepsFile, i+1, l, err, i)
		}
	}
	for _, f := range []string{"report.html", report.RewardPNG, report.StalenessPNG, report.ThroughputPNG} {
		if _, err := os.Stat(filepath.Join(cfg.Run.ReportDir, f)); err != nil {
			t.Error(err)
		}
	}
}

func TestEngineKilledMidRunLosesNothing(t *testing.T) {
	cfg := smallConfig(t, 8)
	// Slower engines so requests are in flight when one dies.
	cfg.Engines.TimeScale = 0.5
	n, s := runNode(t, cfg, func(n *Node) {
		deadline := time.Now().Add(30 * time.Second)
		for len(n.steps()) < 2 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if err := n.StopEngine(context.Background(), 0); err != nil {
			t.Errorf("stop engine: %v", err)
		}
	})
	if s.Steps != 8 {
		t.Fatalf("run did not finish after an engine died: %d steps", s.Steps)
	}
	if s.TrajectoriesLost != 0 {
		t.Fatalf("trajectories lost: %d", s.TrajectoriesLost)
	}
	if s.EngineVersions[0] >= s.FinalVersion || s.EngineVersions[1] != s.FinalVersion {
		t.Fatalf("engine versions %v, final %d: the dead engine must stay behind, the live one current", s.EngineVersions, s.FinalVersion)
	}
	checkLedger(t, n, s)
}

// cancelOnWrite cancels a context the first time the progress view
// reports a step: an interrupt at a known point, without sleeping.
type cancelOnWrite struct {
	once   sync.Once
	cancel context.CancelFunc
}

func (c *cancelOnWrite) Write(p []byte) (int, error) {
	if strings.Contains(string(p), "step ") {
		c.once.Do(c.cancel)
	}
	return len(p), nil
}

func TestInterruptStillWritesReport(t *testing.T) {
	cfg := smallConfig(t, 1000)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := Run(ctx, cfg, Options{InMemoryBus: true, Progress: &cancelOnWrite{cancel: cancel}})
	if err != nil {
		t.Fatal(err)
	}
	if !s.Interrupted || s.Steps < 1 || s.Steps >= 1000 || s.TrajectoriesLost != 0 {
		t.Fatalf("interrupted %v steps %d lost %d", s.Interrupted, s.Steps, s.TrajectoriesLost)
	}
	got, err := report.ReadJSON(cfg.Run.ReportDir)
	if err != nil || !got.Interrupted || got.Steps != s.Steps {
		t.Fatalf("report after interrupt: %+v, %v", got, err)
	}
}

func TestBadInput(t *testing.T) {
	cfg := smallConfig(t, 1)
	ds := filepath.Join(t.TempDir(), "prompts.jsonl")
	if err := os.WriteFile(ds, []byte("{\"id\":\"a\",\"text\":\"rev ab=\"}\n\n{\"id\":\"b\",\"text\":3}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.Rollout.Dataset = ds
	_, err := New(cfg, Options{})
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), ds+":3:") {
		t.Fatalf("malformed dataset line: %v; want the file and line 3", err)
	}
	cfg = smallConfig(t, 1)
	cfg.Trainer.MiniBatchSize = 8
	if _, err := New(cfg, Options{}); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "trainer.num_parallel_generation_workers: 4 is outside [mini_batch_size, mini_batch_size·(max_staleness_steps+1)]") {
		t.Fatalf("B > W: %v", err)
	}
	cfg = smallConfig(t, 1)
	cfg.Rollout.Task = "nope"
	if _, err := New(cfg, Options{}); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "rollout.task") {
		t.Fatalf("unknown task: %v", err)
	}
}

func TestFilterStarvationEndsTheRun(t *testing.T) {
	// Greedy sampling makes the n samples of a prompt identical, so every
	// group has zero reward variance and the filter drops it; after
	// max_sample_batches·B drops in a row the run ends with ErrStalled
	// instead of spinning forever.
	cfg := smallConfig(t, 5)
	cfg.Rollout.Temperature = 0
	cfg.Filter.MaxSampleBatches = 2
	n, err := New(cfg, Options{InMemoryBus: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = n.Wait(ctx)
	n.Stop()
	if !errors.Is(err, ErrStalled) || !strings.Contains(err.Error(), "max_sample_batches") {
		t.Fatalf("err = %v, want ErrStalled naming filter.max_sample_batches", err)
	}
	s := n.Summary(false, err)
	if s.Steps != 0 || s.GroupsDroppedZeroVariance < 4 || s.TrajectoriesLost != 0 || s.Error == "" {
		t.Fatalf("steps %d dropped %d lost %d error %q", s.Steps, s.GroupsDroppedZeroVariance, s.TrajectoriesLost, s.Error)
	}
}
