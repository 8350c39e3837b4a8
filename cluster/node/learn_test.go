package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/cluster/weightsync"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/weights/delta"
)

// TestDefaultsLearn is the acceptance run of docs/run.md: the shipped
// defaults, 30 steps, seed 1. It takes 5–15 s on 2 cores, so it runs only
// with ASYNCRL_LONG=1.
func TestDefaultsLearn(t *testing.T) {
	if os.Getenv("ASYNCRL_LONG") == "" {
		t.Skip("set ASYNCRL_LONG=1 to run the 30-step learning check")
	}
	cfg := config.Default()
	cfg.Run.Steps, cfg.Run.Seed = 30, 1
	cfg.Run.DataDir = t.TempDir()
	cfg.Run.ReportDir = filepath.Join(t.TempDir(), "report")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := Run(ctx, cfg, Options{InMemoryBus: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("reward per step %.3f", s.RewardMeanPerStep)
	t.Logf("first5 %.3f last5 %.3f staleness max %d mean %.2f lost %d wall %.1fs", s.RewardFirst5, s.RewardLast5,
		s.StalenessMax, s.StalenessMean, s.TrajectoriesLost, s.WallSeconds)
	if s.Steps != 30 || s.Interrupted {
		t.Fatalf("steps %d interrupted %v", s.Steps, s.Interrupted)
	}
	if s.RewardLast5 < s.RewardFirst5+0.05 {
		t.Errorf("reward did not rise clearly: first5 %.3f last5 %.3f", s.RewardFirst5, s.RewardLast5)
	}
	if s.StalenessMax > s.StalenessBound || s.TrajectoriesLost != 0 {
		t.Errorf("staleness max %d (bound %d), lost %d", s.StalenessMax, s.StalenessBound, s.TrajectoriesLost)
	}
}

// TestPublishCost measures what the delta path costs per step against the
// in-memory path (publisher.mode full) on the default run: the trainer's
// publish time (write + encode + until an engine serves the version) and
// the wall time. A measurement, not an assertion of speed: it only checks
// both runs finish; ASYNCRL_LONG=1 go test -run TestPublishCost -v.
func TestPublishCost(t *testing.T) {
	if os.Getenv("ASYNCRL_LONG") == "" {
		t.Skip("set ASYNCRL_LONG=1 to measure the publish cost on the default run")
	}
	for _, mode := range []config.PublishMode{config.PublishDelta, config.PublishFull} {
		cfg := config.Default()
		cfg.Run.Steps, cfg.Run.Seed = 30, 1
		cfg.Run.DataDir = t.TempDir()
		cfg.Run.ReportDir = t.TempDir()
		cfg.Publisher.Mode = mode
		n, s := runNode(t, cfg, nil)
		var pub, train time.Duration
		steps := n.steps()
		for _, st := range steps {
			pub += st.PublishTime
			train += st.TrainTime
		}
		k := time.Duration(len(steps))
		extra := ""
		if n.wsync != nil {
			var comp, raw int64
			for v := int64(1); v <= int64(len(steps)); v++ {
				m, err := delta.ReadManifestDir(filepath.Join(weightsync.LayoutFor(cfg).SyncDir, delta.DeltaDir(v)), v)
				if err != nil {
					t.Fatal(err)
				}
				comp, raw = comp+m.TotalCompressedNumBytes, raw+m.TotalUncompressedNumBytes
			}
			extra = fmt.Sprintf(" (write+encode %v/step; deltas %d B/step, %.3f of the changed tensors' bytes)",
				n.wsync.EncodeTime()/k, comp/int64(len(steps)), float64(comp)/float64(max(raw, 1)))
		}
		t.Logf("%s: publish %v/step%s, train %v/step, wall %.1fs, reward first5 %.3f last5 %.3f", mode, pub/k, extra, train/k,
			s.WallSeconds, s.RewardFirst5, s.RewardLast5)
		if s.Steps != 30 {
			t.Fatalf("%s: %d steps", mode, s.Steps)
		}
	}
}
