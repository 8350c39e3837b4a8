package chaos

import (
	"fmt"
	"sort"
	"strings"

	"github.com/asyncrl/asyncrl/cluster/node"
	"github.com/asyncrl/asyncrl/internal/report"
)

// Invariant names, in table order.
const (
	InvNothingLost   = "nothing lost"
	InvExactlyOnce   = "each group ends once"
	InvNoDoubleTrain = "no prompt trained twice"
	InvStaleness     = "staleness ≤ S"
	InvVersionsGrow  = "engine versions only increase"
	InvNoOverclaim   = "router never ahead of engine"
	InvProgress      = "progress after faults"
	InvConverged     = "engines reach latest version"
	InvWeightLoads   = "every version loaded"
	InvDurable       = "durable ledger = bus view"
)

// Invariant is one verdict.
type Invariant struct {
	Name string `json:"name"`
	Held bool   `json:"held"`
	// Detail says what was measured, or the first violations.
	Detail string `json:"detail"`
}

// Evidence is what the shell collected for the checks.
type Evidence struct {
	// Summary is the node's summary after Stop.
	Summary report.Summary
	// Groups is every group's history read back from the durable ledger
	// (the JetStream files) after the node stopped.
	Groups []node.GroupRecord
	// LedgerRecords is how many ledger records were read back.
	LedgerRecords int
	// LedgerMismatches lists groups whose final states differ between the
	// durable ledger and the node's live view of the bus.
	LedgerMismatches []string
	// VersionDrops lists router or engine versions seen to decrease.
	VersionDrops []string
	// Overclaims lists moments the router credited an engine with a version
	// above the one it served.
	Overclaims []string
	// Samples is how many times the router's view was sampled.
	Samples int
	// StepsAtHeal and StepsAtEnd are the trainer steps when every fault was
	// healed and when the run was stopped.
	StepsAtHeal, StepsAtEnd int
	// Latest is the latest published version; EngineVersions what each chaos
	// engine served after the heal (-1: not running).
	Latest         int64
	EngineVersions []int64
	// LoadErrors are versions the fleet could not load.
	LoadErrors []string
}

// Check evaluates every invariant on ev. It is pure.
func Check(ev Evidence) []Invariant {
	s := ev.Summary
	var out []Invariant
	add := func(name string, viol []string, ok string) {
		inv := Invariant{Name: name, Held: len(viol) == 0, Detail: ok}
		if !inv.Held {
			inv.Detail = firstFew(viol)
		}
		out = append(out, inv)
	}

	var lost []string
	if s.TrajectoriesLost != 0 {
		lost = append(lost, fmt.Sprintf("trajectories_lost %d", s.TrajectoriesLost))
	}
	if s.TrajectoriesStarted != s.TrajectoriesFinished+s.TrajectoriesAborted {
		lost = append(lost, fmt.Sprintf("started %d ≠ finished %d + aborted %d", s.TrajectoriesStarted, s.TrajectoriesFinished, s.TrajectoriesAborted))
	}
	add(InvNothingLost, lost, fmt.Sprintf("lost 0 of %d trajectories (%d aborted, requeued)", s.TrajectoriesStarted, s.TrajectoriesAborted))

	var twice, open, stale []string
	openN, trainedN := 0, 0
	perPrompt := map[string]int{}
	for _, g := range ev.Groups {
		fates := g.Trained + g.FilteredFinal + g.Requeued
		if fates > 1 {
			twice = append(twice, fmt.Sprintf("%s: trained %d filtered %d requeued %d", g.GroupID, g.Trained, g.FilteredFinal, g.Requeued))
		}
		if fates == 0 && g.Consumed {
			openN++
		}
		if g.Trained > 0 {
			trainedN++
			perPrompt[g.PromptID]++
			if g.Staleness > s.StalenessBound {
				stale = append(stale, fmt.Sprintf("%s trained with staleness %d > %d", g.GroupID, g.Staleness, s.StalenessBound))
			}
		}
	}
	if int64(openN) != s.GroupsInFlightAtStop {
		open = append(open, fmt.Sprintf("%d consumed groups without a final state, %d in flight at stop", openN, s.GroupsInFlightAtStop))
	}
	add(InvExactlyOnce, append(twice, open...), fmt.Sprintf("%d groups: each trained, filtered or requeued once, %d in flight at stop", len(ev.Groups), openN))

	var dup []string
	for p, n := range perPrompt {
		if n > 1 {
			dup = append(dup, fmt.Sprintf("prompt %s trained %d times", p, n))
		}
	}
	sort.Strings(dup)
	add(InvNoDoubleTrain, dup, fmt.Sprintf("%d groups trained, each prompt once", trainedN))

	if s.StalenessMax > s.StalenessBound {
		stale = append(stale, fmt.Sprintf("staleness_max %d > bound %d", s.StalenessMax, s.StalenessBound))
	}
	add(InvStaleness, stale, fmt.Sprintf("max %d, bound %d", s.StalenessMax, s.StalenessBound))

	add(InvVersionsGrow, ev.VersionDrops, fmt.Sprintf("%d samples of the router, no decrease", ev.Samples))
	add(InvNoOverclaim, ev.Overclaims, fmt.Sprintf("%d samples: router version ≤ engine version", ev.Samples))

	var stuck []string
	if ev.StepsAtEnd <= ev.StepsAtHeal || ev.StepsAtEnd == 0 {
		stuck = append(stuck, fmt.Sprintf("steps %d at heal, %d at stop", ev.StepsAtHeal, ev.StepsAtEnd))
	}
	add(InvProgress, stuck, fmt.Sprintf("%d steps under faults, %d at stop", ev.StepsAtHeal, ev.StepsAtEnd))

	var behind []string
	for i, v := range ev.EngineVersions {
		if v != ev.Latest {
			behind = append(behind, fmt.Sprintf("engine %d serves v%d, latest v%d", i, v, ev.Latest))
		}
	}
	add(InvConverged, behind, fmt.Sprintf("all %d at v%d after the heal", len(ev.EngineVersions), ev.Latest))
	add(InvWeightLoads, ev.LoadErrors, "no load failed")
	add(InvDurable, ev.LedgerMismatches, fmt.Sprintf("%d records read back from JetStream after stop, every group agrees", ev.LedgerRecords))
	return out
}

func firstFew(v []string) string {
	const n = 3
	if len(v) <= n {
		return strings.Join(v, "; ")
	}
	return strings.Join(v[:n], "; ") + fmt.Sprintf("; … %d more", len(v)-n)
}
