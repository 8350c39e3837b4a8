package report

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestMean5(t *testing.T) {
	for _, tc := range []struct {
		xs          []float64
		first, last float64
	}{
		{nil, 0, 0},
		{[]float64{1, 2}, 1.5, 1.5},
		{[]float64{1, 1, 1, 1, 1, 0, 3, 3, 3, 3, 3}, 1, 3},
	} {
		f, l := Mean5(tc.xs)
		if f != tc.first || l != tc.last {
			t.Errorf("Mean5(%v) = %v, %v; want %v, %v", tc.xs, f, l, tc.first, tc.last)
		}
	}
}

func TestGeneratedFirstLast(t *testing.T) {
	row := func(v, groups, trajs int64, mean float64) VersionReward {
		return VersionReward{Version: v, Groups: groups, Trajectories: trajs, Mean: mean}
	}
	rows := []VersionReward{
		row(0, 10, 40, 0.5), row(1, 4, 16, 0.25), row(2, 1, 4, 0), // version 2: under a mini-batch
		row(3, 4, 16, 1), row(4, 4, 8, 1), row(5, 4, 16, 0.5), row(6, 4, 16, 0.5), row(7, 2, 8, 0),
	}
	f, l, k := GeneratedFirstLast(rows, 4)
	if k != 6 {
		t.Errorf("%d versions qualify, want 6", k)
	}
	// first five qualifying: 0, 1, 3, 4, 5 → (20 + 4 + 16 + 8 + 8) / 96
	// last five: 1, 3, 4, 5, 6 → (4 + 16 + 8 + 8 + 8) / 72
	if want := 56.0 / 96; f != want {
		t.Errorf("first = %v, want %v (trajectory-weighted, versions under 4 groups left out)", f, want)
	}
	if want := 44.0 / 72; l != want {
		t.Errorf("last = %v, want %v", l, want)
	}
	if f, l, k := GeneratedFirstLast(rows[:2], 4); f != 24.0/56 || l != f || k != 2 {
		// fewer than five: both are every qualifying version
		t.Errorf("two versions: %v, %v", f, l)
	}
	if f, l, k := GeneratedFirstLast(rows, 100); f != 0 || l != 0 || k != 0 {
		t.Errorf("none qualifying: %v, %v", f, l)
	}
}

func TestWriteReport(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "r")
	s := Summary{RunID: "x", Task: "reverse", Steps: 2, StepsRequested: 2, FinalVersion: 2, RewardMeanPerStep: []float64{0.1, 0.4},
		StalenessBound: 2, StalenessHistogram: []int64{1, 3, 0, 0}, PerStep: []StepRow{{Step: 1, Version: 1, RewardMean: 0.1, TokensPerSecond: 10}, {Step: 2, Version: 2, RewardMean: 0.4, TokensPerSecond: 20}}}
	if err := Write(dir, s); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"summary.json", "report.html", RewardPNG, StalenessPNG, ThroughputPNG} {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(f, ".png") && !bytes.HasPrefix(data, []byte("\x89PNG")) {
			t.Errorf("%s is not a PNG", f)
		}
	}
	got, err := ReadJSON(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.FinalVersion != 2 || len(got.RewardMeanPerStep) != 2 || got.RewardMeanPerStep[1] != 0.4 {
		t.Fatalf("round trip: %+v", got)
	}
	html, _ := os.ReadFile(filepath.Join(dir, "report.html"))
	for _, want := range []string{"reward.png", "staleness.png", "throughput.png", "<td>0.400</td>"} {
		if !bytes.Contains(html, []byte(want)) {
			t.Errorf("report.html lacks %q", want)
		}
	}
	// An empty run (interrupted before the first step) still writes a report.
	if err := Write(filepath.Join(t.TempDir(), "empty"), Summary{Interrupted: true}); err != nil {
		t.Fatal(err)
	}
}
