package routerbench

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestParseTextKeepsNamedSamples(t *testing.T) {
	text := `# HELP vllm:prefix_cache_hits_total Prompt tokens found in the prefix cache.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{model_name="asyncrl-policy"} 1234
vllm:prefix_cache_queries_total{model_name="asyncrl-policy"} 2000
vllm:time_to_first_token_seconds_bucket{model_name="asyncrl-policy",le="0.01"} 3
vllm:time_to_first_token_seconds_bucket{model_name="asyncrl-policy",le="+Inf"} 7
vllm:time_to_first_token_seconds_sum{model_name="asyncrl-policy"} 0.5
go_goroutines 12
`
	keep := map[string]bool{"vllm:prefix_cache_hits_total": true, "vllm:time_to_first_token_seconds_bucket": true, "go_goroutines": true}
	got, err := parseText(strings.NewReader(text), keep)
	if err != nil {
		t.Fatal(err)
	}
	want := []sample{
		{"vllm:prefix_cache_hits_total", "", 1234},
		{"vllm:time_to_first_token_seconds_bucket", "0.01", 3},
		{"vllm:time_to_first_token_seconds_bucket", "+Inf", 7},
		{"go_goroutines", "", 12},
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("sample %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	if _, err := parseText(strings.NewReader("go_goroutines{a=\"b\" 1\n"), keep); err == nil {
		t.Fatal("unterminated labels accepted")
	}
	if _, err := parseText(strings.NewReader("go_goroutines abc\n"), keep); err == nil {
		t.Fatal("bad value accepted")
	}
}

func TestHistogramQuantile(t *testing.T) {
	inf := math.Inf(1)
	bs := []bucket{{0.1, 10}, {inf, 20}, {0.2, 20}, {0.05, 0}} // unsorted on purpose
	tests := []struct {
		q, want float64
	}{
		{0.25, 0.075}, // rank 5 of 20 in (0.05, 0.1]: halfway
		{0.5, 0.1},    // rank 10: top of the first non-empty bucket
		{0.75, 0.15},  // rank 15 in (0.1, 0.2]
		{1, 0.2},
	}
	for _, tc := range tests {
		if got := histogramQuantile(tc.q, bs); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("q%.2f = %v, want %v", tc.q, got, tc.want)
		}
	}
	// Observations beyond the last finite bound report that bound.
	if got := histogramQuantile(0.99, []bucket{{1, 1}, {inf, 10}}); got != 1 {
		t.Errorf("+Inf rank: %v, want 1", got)
	}
	if !math.IsNaN(histogramQuantile(0.5, []bucket{{1, 0}, {inf, 0}})) {
		t.Error("empty histogram not NaN")
	}
}

func TestPercentileAndMedian(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3, 6, 7, 8, 9, 10}
	for _, tc := range []struct{ p, want float64 }{{0.5, 5}, {0.9, 9}, {0.99, 10}, {1, 10}, {0, 1}} {
		if got := percentile(append([]float64(nil), xs...), tc.p); got != tc.want {
			t.Errorf("p%v = %v, want %v", tc.p, got, tc.want)
		}
	}
	if got := Median([]float64{3, math.NaN(), 1, 2}); got != 2 {
		t.Errorf("median ignoring NaN = %v", got)
	}
	if got := Median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("even median = %v", got)
	}
	if !math.IsNaN(Median(nil)) || !math.IsNaN(percentile(nil, 0.5)) {
		t.Error("empty input not NaN")
	}
}

func TestSummarizeRatiosPairWithinARepetition(t *testing.T) {
	mk := func(pol string, tput float64) Result {
		return Result{Policy: pol, Pressure: 1, ThroughputModelled: tput, PerReplica: []int{1, 3}}
	}
	// Repetition 1 runs on a slow host (everything halves); ratios pair
	// each repetition with its own baseline, so the ratio stays 2.
	reps := [][]Result{
		{mk("base", 100), mk("x", 200)},
		{mk("base", 50), mk("x", 100)},
		{mk("base", 80), mk("x", 160)},
	}
	ss := Summarize(reps, "base")
	if len(ss) != 2 {
		t.Fatalf("%d summaries", len(ss))
	}
	x := ss[1]
	if x.Policy != "x" || x.Runs != 3 || x.ThroughputModelled != 160 || x.RThroughput != 2 {
		t.Fatalf("summary %+v", x)
	}
	if ss[0].RThroughput != 1 || x.PerReplica[0] != 3 || x.PerReplica[1] != 1 {
		t.Fatalf("baseline ratio %v, per replica %v", ss[0].RThroughput, x.PerReplica)
	}
}

func TestDeriveThroughputs(t *testing.T) {
	r := Result{Generated: 1000, ConvMax: 4, Modelled: 2 * time.Second}
	r.Derive()
	if r.ThroughputModelled != 250 || r.ThroughputBusy != 500 {
		t.Fatalf("makespan %v busy %v, want 250 and 500 tok/s", r.ThroughputModelled, r.ThroughputBusy)
	}
	var zero Result
	zero.Derive()
	if zero.ThroughputModelled != 0 || zero.ThroughputBusy != 0 {
		t.Fatal("empty result got a throughput")
	}
}
