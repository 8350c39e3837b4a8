package sim

import (
	"crypto/sha256"
	"encoding/hex"
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
// model's lines is the log the seed had before the model existed — its
// hash is the one testdata/loghashes.golden pinned then (10 steps).
func TestRankModelLeavesTheRunAlone(t *testing.T) {
	before := map[int64]string{ // loghashes.golden before the rank model (issue 31)
		1: "ea38fcc0305a7ffc9eaa7f62c39960bb1d567f5885f61170d4d591131f019d20",
		2: "036a82cde7826bb8b3d5a0f9c2d60c6d00025e52beb04709576edfb4d833c74d",
		3: "437c61ba34d0106d19e98529e010f6471c4d1af3b575298f4937ecfb38b74dfa",
	}
	for seed, want := range before {
		res, err := Run(Config{Seed: seed, Scenario: ScenarioFailover, Steps: 10, KeepLog: true})
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		h, ranks := sha256.New(), 0
		for _, l := range res.Log {
			if isRankLine(l) {
				ranks++
				continue
			}
			h.Write([]byte(l + "\n"))
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != want || ranks == 0 {
			t.Errorf("seed %d: without its %d rank lines the log hashes to %s, want %s (the run before the rank model)", seed, ranks, got, want)
		}
	}
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
