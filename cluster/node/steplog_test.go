package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/actors/trainer"
	"github.com/asyncrl/asyncrl/model"
)

// The step log computes each row's throughput from the previous step's
// time and rollout tokens, writes it as a line when it happens, and reads
// every row back for the summary — from the file, or from memory for a
// run without a report directory. After close nothing more is written.
func TestStepLog(t *testing.T) {
	start := time.Unix(1000, 0)
	rec := func(step int64, at float64, tokens int) trainer.StepRecord {
		return trainer.StepRecord{Step: step, Version: step, RewardMean: float64(step) / 10, Tokens: tokens,
			Stats: model.StepStats{Loss: 0.5}, TrainTime: 250 * time.Millisecond,
			Done: start.Add(time.Duration(at * float64(time.Second)))}
	}
	dir := filepath.Join(t.TempDir(), "report")
	for _, d := range []string{dir, ""} {
		l, err := openStepLog(d, start)
		if err != nil {
			t.Fatal(err)
		}
		l.add(rec(1, 2, 40), 0, false) // rollout tokens not counted yet
		l.add(rec(2, 4, 60), 1000, true)
		l.add(rec(3, 8, 80), 3000, true)
		if d != "" {
			raw, err := os.ReadFile(filepath.Join(d, StepsFile))
			if err != nil || strings.Count(string(raw), "\n") != 3 {
				t.Fatalf("%s before close: %q, %v; want 3 lines", StepsFile, raw, err)
			}
		}
		if err := l.close(); err != nil {
			t.Fatal(err)
		}
		l.add(rec(4, 9, 1), 4000, true)
		rows, err := l.rows()
		if err != nil || len(rows) != 3 {
			t.Fatalf("dir %q: %d rows, %v; want 3", d, len(rows), err)
		}
		r1, r2, r3 := rows[0], rows[1], rows[2]
		if r1.TokensPerSecond != 0 || r1.TrainTokensPerSecond != 20 || r1.ElapsedSeconds != 2 || r1.TrainSeconds != 0.25 {
			t.Errorf("dir %q: first row %+v", d, r1)
		}
		// Step 2 has the first token count: no interval to rate it over.
		if r2.TokensPerSecond != 0 || r2.TrainTokensPerSecond != 30 {
			t.Errorf("dir %q: second row %+v", d, r2)
		}
		if r3.TokensPerSecond != 500 || r3.TrainTokensPerSecond != 20 || r3.Step != 3 || r3.RewardMean != 0.3 || r3.Loss != 0.5 {
			t.Errorf("dir %q: third row %+v; want 2000 tokens over 4 s", d, r3)
		}
	}
}
