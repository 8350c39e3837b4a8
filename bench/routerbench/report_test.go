package routerbench

import (
	"math"
	"strings"
	"testing"
)

// SummarizePublish takes the rule ratio within each repetition, then the
// median, per (pressure, policy).
func TestSummarizePublishRatiosWithinRepetition(t *testing.T) {
	r := func(pol, rule string, hit, tput float64) Result {
		return Result{Pressure: 1, Policy: pol, Rule: rule, HitRate: hit, ThroughputModelled: tput,
			Outcomes: map[string]float64{"moved": 3}, PerReplica: []int{1, 5}, Publishes: 4}
	}
	reps := [][]Result{
		{r("a", "newest", 0.5, 100), r("a", "staleness", 0.6, 110), r("b", "newest", 0.4, 100), r("b", "staleness", 0.4, 100)},
		{r("a", "staleness", 0.9, 100), r("a", "newest", 0.6, 100), r("b", "staleness", 0.5, 100), r("b", "newest", 0.5, 50)},
		{r("a", "newest", 0.8, 100), r("a", "staleness", 0.8, 130), r("b", "newest", 0.2, 100), r("b", "staleness", 0.3, 100)},
	}
	ss := SummarizePublish(reps, "newest")
	if len(ss) != 4 {
		t.Fatalf("%d summaries", len(ss))
	}
	got := map[string]PublishSummary{}
	for _, s := range ss {
		got[s.Policy+"/"+s.Rule] = s
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	// a: hit ratios 1.2, 1.5, 1.0 → 1.2; tput ratios 1.1, 1.0, 1.3 → 1.1.
	if s := got["a/staleness"]; !near(s.RHitRate, 1.2) || !near(s.RThroughput, 1.1) || !near(s.HitRate, 0.8) || s.Runs != 3 {
		t.Fatalf("a/staleness: %+v", s)
	}
	// b: tput ratios 1, 2, 1 → 1; hit 1, 1, 1.5 → 1.
	if s := got["b/staleness"]; !near(s.RThroughput, 1) || !near(s.RHitRate, 1) {
		t.Fatalf("b/staleness: %+v", s)
	}
	if s := got["a/newest"]; !near(s.RHitRate, 1) || s.Moves != 3 || s.Publishes != 4 || s.PerReplica[0] != 5 {
		t.Fatalf("a/newest: %+v", s)
	}
	var b strings.Builder
	WritePublishMarkdown(&b, ss, "newest")
	if !strings.Contains(b.String(), "| a | staleness | 80.0 % | 1.200 | 110 | 1.100 |") {
		t.Fatalf("table:\n%s", b.String())
	}
}
