package node

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/asyncrl/asyncrl/cluster/internal/clustertest"
	"github.com/asyncrl/asyncrl/config"
)

// TestExternalEngineProcessesLearn is issue 13's acceptance run: the
// default run (30 steps, seed 1) with engines.count 0 on three `asyncrl
// engine` processes started outside it, driven only over HTTP (two apply
// deltas in place, one loads full checkpoints), in each pause mode. It must
// learn as the default run does, every version must be acknowledged by
// every engine, and no trajectory may be lost. It logs the control path of
// one weight update (pause → load → resume) per engine for BENCHMARKS.md.
// About a minute on two cores: ASYNCRL_ENGINES_E2E=1 (make test-engines).
func TestExternalEngineProcessesLearn(t *testing.T) {
	if os.Getenv("ASYNCRL_ENGINES_E2E") != "1" {
		t.Skip("set ASYNCRL_ENGINES_E2E=1 (make test-engines) to run three asyncrl engine processes")
	}
	bin := clustertest.BuildBinary(t)
	for _, mode := range config.PauseMode("").Values() {
		t.Run(mode, func(t *testing.T) {
			cfg := config.Default()
			cfg.Run.Steps, cfg.Run.Seed = 30, 1
			cfg.Run.DataDir = t.TempDir()
			cfg.Run.ReportDir = filepath.Join(t.TempDir(), "report")
			cfg.Trainer.PauseMode = config.PauseMode(mode)
			cfg.Engines.Count = 0
			ecfg := filepath.Join(t.TempDir(), "engines.yaml")
			// The engines play the same latency model as the run's own would.
			if err := os.WriteFile(ecfg, []byte(fmt.Sprintf("engines:\n  time_scale: %g\n", cfg.Engines.TimeScale)), 0o644); err != nil {
				t.Fatal(err)
			}
			loads := []config.WeightLoad{config.LoadDelta, config.LoadFull, config.LoadDelta}
			for i, port := range clustertest.FreePorts(t, len(loads)) {
				addr := "127.0.0.1:" + strconv.Itoa(port)
				startEngineProcess(t, bin, addr, ecfg, 100+int64(i))
				cfg.Engines.External = append(cfg.Engines.External,
					config.ExternalEngine{URL: "http://" + addr, Kind: config.EngineBuiltin, WeightLoad: loads[i]})
			}
			n, s, acks := runNodeAcks(t, cfg)
			checkLedger(t, n, s)
			t.Logf("pause %s: reward first5 %.3f last5 %.3f, staleness max %d (bound %d), lost %d, wall %.1fs",
				mode, s.RewardFirst5, s.RewardLast5, s.StalenessMax, s.StalenessBound, s.TrajectoriesLost, s.WallSeconds)
			if s.Steps != 30 || s.TrajectoriesLost != 0 || s.StalenessMax > s.StalenessBound {
				t.Fatalf("steps %d lost %d staleness max %d bound %d", s.Steps, s.TrajectoriesLost, s.StalenessMax, s.StalenessBound)
			}
			if s.RewardLast5 < s.RewardFirst5+0.05 {
				t.Errorf("reward did not rise clearly: first5 %.3f last5 %.3f", s.RewardFirst5, s.RewardLast5)
			}
			for _, d := range n.driven {
				missing := 0
				for v := int64(1); v <= 30; v++ {
					if !acks.Acked(cfg.Run.ID, d.Name, v) {
						missing++
					}
				}
				if missing > 0 {
					t.Errorf("%s: %d of 30 versions never acknowledged", d.Name, missing)
				}
			}
			logSwaps(t, n)
		})
	}
}

// startEngineProcess runs `asyncrl engine` on addr until the test ends and
// waits until it serves.
func startEngineProcess(t *testing.T, bin, addr, cfgFile string, seed int64) {
	t.Helper()
	cmd := exec.Command(bin, "engine", "--listen", addr, "--seed", strconv.FormatInt(seed, 10), "--config", cfgFile)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("engine on %s not healthy after 30 s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// logSwaps logs each engine's weight updates over HTTP (count, mean, max
// bucket) from asyncrl_engine_weight_swap_seconds, and the requests the
// router saw fail.
func logSwaps(t *testing.T, n *Node) {
	t.Helper()
	mfs, err := n.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "asyncrl_engine_weight_swap_seconds":
			for _, m := range mf.GetMetric() {
				h := m.GetHistogram()
				t.Logf("swap %s: %d updates, mean %.2f ms, p≤%s", label(m, "engine"), h.GetSampleCount(),
					1e3*h.GetSampleSum()/float64(max(1, h.GetSampleCount())), quantileBucket(h, 0.9))
			}
		case "asyncrl_router_errors_total":
			for _, m := range mf.GetMetric() {
				t.Logf("router errors %s: %.0f", label(m, "kind"), m.GetCounter().GetValue())
			}
		}
	}
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// quantileBucket is the upper bound of the first bucket holding q of the
// observations (a coarse p90 for the log).
func quantileBucket(h *dto.Histogram, q float64) string {
	want := uint64(q * float64(h.GetSampleCount()))
	for _, b := range h.GetBucket() {
		if b.GetCumulativeCount() >= want {
			return fmt.Sprintf("%.1f ms (90%%)", 1e3*b.GetUpperBound())
		}
	}
	return "+Inf"
}
