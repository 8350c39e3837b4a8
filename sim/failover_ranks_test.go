package sim

import (
	"errors"
	"strings"
	"testing"
)

// isRankLine: a line of the rank model (failover_ranks.go).
func isRankLine(l string) bool {
	return strings.Contains(l, " rank group ") || strings.Contains(l, " rank host")
}

// TestRankModelLeavesTheRunAlone: the rank model draws from its own
// stream and feeds nothing back, so a failover seed's log without the
// model's lines is the log of the same seed run without the model
// (Config.rankModelOff).
func TestRankModelLeavesTheRunAlone(t *testing.T) {
	run := func(seed int64, off bool) (kept []string, ranks int) {
		t.Helper()
		res, err := Run(Config{Seed: seed, Scenario: ScenarioFailover, Steps: 10, KeepLog: true, rankModelOff: off})
		if err != nil {
			t.Fatalf("seed %d (rank model off %v): %v", seed, off, err)
		}
		for _, l := range res.Log {
			if isRankLine(l) {
				ranks++
				continue
			}
			kept = append(kept, l)
		}
		return kept, ranks
	}
	for seed := int64(1); seed <= 4; seed++ {
		with, ranks := run(seed, false)
		without, none := run(seed, true)
		if ranks == 0 || none != 0 {
			t.Fatalf("seed %d: %d rank lines with the model, %d without; want some, then none", seed, ranks, none)
		}
		if i := firstDiff(with, without); i >= 0 {
			t.Errorf("seed %d: without its %d rank lines the log differs from the run without the model at line %d:\nwith:    %s\nwithout: %s",
				seed, ranks, i, lineAt(with, i), lineAt(without, i))
		}
	}
}

// firstDiff is the first index where a and b differ, -1 if equal.
func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

func lineAt(l []string, i int) string {
	if i < len(l) {
		return l[i]
	}
	return "(end of log)"
}

// TestDeposedRanksAreCaught: a rank host that keeps the ranks of a group
// a newer term ended (planted) breaks rank-fencing on the seed's first
// takeover that reaches a host, minimised to the fault that deposed the
// holder; the correct shell runs the seed clean, with the deposed
// group's ranks killed on that host.
func TestDeposedRanksAreCaught(t *testing.T) {
	const seed = 5
	_, err := Run(Config{Seed: seed, Scenario: ScenarioFailover, Steps: 8, Bugs: []Bug{BugRankHostKeepsDeposed}, Minimize: true})
	var v *Violation
	if !errors.As(err, &v) || v.Invariant != InvRankFencing || !strings.Contains(v.Detail, "older than token") {
		t.Fatalf("seed %d with the planted bug: %v; want %s, a deposed term's ranks served", seed, err, InvRankFencing)
	}
	res, err := Run(Config{Seed: seed, Scenario: ScenarioFailover, Steps: 8, KeepLog: true})
	if err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	host, _, _ := strings.Cut(v.Detail, "'s rank host")
	_, rest, _ := strings.Cut(v.Detail, " of group ")
	group, _, _ := strings.Cut(rest, " ")
	l, ok := firstLine(res.Log, host+": rank host kills", " of "+group+" ")
	if !ok {
		t.Fatalf("the correct shell never killed %s's ranks of %s (planted: %s)", host, group, v.Detail)
	}
	t.Logf("planted: %s (faults %v)\ncorrect: %s", v.Detail, v.Faults, l)
}
