package sim

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Summary aggregates the results of one or more seeds.
type Summary struct {
	Scenario  Scenario
	FirstSeed int64
	// Seeds is the number of seeds run; Passed how many held every
	// invariant (all but the last when a violation stopped the batch).
	Seeds, Passed   int
	Events          int
	InvariantChecks int64
	VirtualTime     time.Duration
	StepsTrained    int64
	Faults          map[FaultKind]int
	Trained         int64
	Filtered        int64
	Requeued        int64
	MaxStaleness    int64
	StepDowns       int
	NoStepDowns     int
	BuffersLost     int
	LostGroups      int
	// PublishRetries sums the runs' publish retries; GaveUp counts the
	// runs the step rule ended by giving a step up (failover: the runs
	// in which a term's trainer gave one up).
	PublishRetries, GaveUp int
	// FetchRetries sums the trainer's fetches tried again; FetchGaveUps
	// counts the runs a fetch give-up ended.
	FetchRetries, FetchGaveUps int
	// Rollouts sums the failover runs' rollout outcomes.
	Rollouts RolloutFates
	// Workload and LogHash are set for a single seed.
	Workload, LogHash string
}

// Add folds one run into the summary.
func (s *Summary) Add(r Result) {
	if s.Faults == nil {
		s.Faults = map[FaultKind]int{}
	}
	if s.Seeds == 0 {
		s.Scenario, s.FirstSeed, s.Workload, s.LogHash = r.Scenario, r.Seed, r.Workload, r.LogHash
	} else {
		s.Workload, s.LogHash = "", ""
	}
	s.Seeds++
	if r.Violation == nil {
		s.Passed++
	}
	s.Events += r.Events
	s.InvariantChecks += r.InvariantChecks
	s.VirtualTime += r.VirtualTime
	s.StepsTrained += r.StepsTrained
	for k, n := range r.Faults {
		s.Faults[k] += n
	}
	s.Trained += r.Trained
	s.Filtered += r.Filtered
	s.Requeued += r.Requeued
	s.MaxStaleness = max(s.MaxStaleness, r.MaxStaleness)
	s.StepDowns += r.StepDowns
	s.NoStepDowns += r.NoStepDowns
	s.BuffersLost += r.BuffersLost
	s.LostGroups += r.LostGroups
	s.PublishRetries += r.PublishRetries
	s.FetchRetries += r.FetchRetries
	s.FetchGaveUps += r.FetchGaveUps
	s.Rollouts.add(r.Rollouts)
	if r.GaveUp > 0 {
		s.GaveUp++
	}
}

// RunSeeds runs seeds cfg.Seed … cfg.Seed+n−1 and stops at the first
// violation, which it returns (minimised when cfg.Minimize is set) with
// the summary so far.
func RunSeeds(cfg Config, n int) (Summary, error) {
	if n < 1 {
		return Summary{}, fmt.Errorf("%w: seeds %d: want ≥ 1", ErrInvalidConfig, n)
	}
	var s Summary
	first := cfg.Seed
	for i := 0; i < n; i++ {
		c := cfg
		c.Seed = first + int64(i)
		r, err := Run(c)
		if r.Events > 0 || err == nil {
			s.Add(r)
		}
		if err != nil {
			return s, err
		}
	}
	return s, nil
}

// Format renders the summary for people, one fact per line, faults in a
// fixed order so equal runs print equal summaries.
func (s Summary) Format() string {
	var b strings.Builder
	if s.Seeds == 1 {
		fmt.Fprintf(&b, "seed %d, scenario %s: ", s.FirstSeed, s.Scenario)
	} else {
		fmt.Fprintf(&b, "seeds %d..%d, scenario %s: ", s.FirstSeed, s.FirstSeed+int64(s.Seeds)-1, s.Scenario)
	}
	fmt.Fprintf(&b, "%d of %d passed\n", s.Passed, s.Seeds)
	if s.Workload != "" {
		fmt.Fprintf(&b, "  workload          %s\n", s.Workload)
	}
	fmt.Fprintf(&b, "  events            %d (%.1fs of virtual time)\n", s.Events, s.VirtualTime.Seconds())
	fmt.Fprintf(&b, "  invariants        %d checks of %d invariants after every event\n", s.InvariantChecks, len(Invariants))
	fmt.Fprintf(&b, "  steps trained     %d\n", s.StepsTrained)
	fmt.Fprintf(&b, "  groups            trained %d, filtered %d, requeued %d; max staleness %d\n", s.Trained, s.Filtered, s.Requeued, s.MaxStaleness)
	var fs []string
	total := 0
	for _, k := range FaultKinds {
		if n := s.Faults[k]; n > 0 {
			fs = append(fs, fmt.Sprintf("%s %d", k, n))
			total += n
		}
	}
	if total == 0 {
		fmt.Fprintf(&b, "  faults injected   none\n")
	} else {
		fmt.Fprintf(&b, "  faults injected   %d: %s\n", total, strings.Join(fs, ", "))
	}
	if s.StepDowns > 0 || s.BuffersLost > 0 {
		fmt.Fprintf(&b, "  terms             %d stepped down (%d for no step); %d unreplicated buffers lost, with %d finished groups (requeued by the next term)\n",
			s.StepDowns, s.NoStepDowns, s.BuffersLost, s.LostGroups)
	}
	if s.PublishRetries > 0 || s.GaveUp > 0 {
		ended := "runs ended by the trainer giving a step up"
		if s.Scenario == ScenarioFailover {
			ended = "runs where a term's trainer gave a step up (the term failed, another took over)"
		}
		fmt.Fprintf(&b, "  publishes         %d failed publishes tried again; %d %s\n", s.PublishRetries, s.GaveUp, ended)
	}
	if s.FetchRetries > 0 || s.FetchGaveUps > 0 {
		fmt.Fprintf(&b, "  batch fetches     %d tries failed on a buffer electing a leader and were tried again; %d runs ended by a fetch given up\n", s.FetchRetries, s.FetchGaveUps)
	}
	if f := s.Rollouts; f != (RolloutFates{}) {
		fmt.Fprintf(&b, "  rollouts          %d episodes aborted, %d groups aborted; %d stores retried, %d cut by a term switch, %d given up; %d groups requeued on their reports (%d then swept as a dead node's, ignored); %d pulls held back by the router's minimum version\n",
			f.EpisodesAborted, f.GroupsAborted, f.StoresRetried, f.StoresCut, f.StoresGivenUp, f.RequeuedOnReports, f.SweptAfterReports, f.Gated)
	}
	if s.LogHash != "" {
		fmt.Fprintf(&b, "  event log sha256  %s\n", s.LogHash)
	}
	return b.String()
}

// WriteTo writes Format's text.
func (s Summary) WriteTo(w io.Writer) (int64, error) {
	n, err := io.WriteString(w, s.Format())
	return int64(n), err
}
