package node

import (
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/asyncrl/asyncrl/internal/report"
)

// Summary builds the run's summary from the trainer's steps, the
// controller's books, the rollout counters and the ledger. Call it after
// Stop.
func (n *Node) Summary(interrupted bool, runErr error) report.Summary {
	cfg := n.cfg
	wall := time.Since(n.start).Seconds()
	s := report.Summary{RunID: cfg.Run.ID, Task: n.task.Name(), Seed: cfg.Run.Seed, StepsRequested: cfg.Run.Steps,
		StalenessBound: int64(cfg.Trainer.MaxStalenessSteps), PauseMode: string(cfg.Trainer.PauseMode),
		StalenessMeasure: string(cfg.Staleness.Measure), FilterMode: string(cfg.Filter.Mode), GenerationBatchesPerStep: []int{},
		Interrupted: interrupted, WallSeconds: wall, RewardMeanPerStep: []float64{}, PerStep: []report.StepRow{}}
	if runErr != nil {
		s.Error = runErr.Error()
	}
	if n.steplog != nil {
		rows, err := n.steplog.rows()
		if err != nil {
			// The rows read are kept; the summary says what is missing.
			s.Error = errors.Join(runErr, err).Error()
		}
		s.Steps = len(rows)
		s.PerStep = append(s.PerStep, rows...)
		for _, r := range rows {
			s.RewardMeanPerStep = append(s.RewardMeanPerStep, r.RewardMean)
			s.FinalVersion = r.Version
		}
	}
	s.RewardFirst5, s.RewardLast5 = report.Mean5(s.RewardMeanPerStep)
	s.RewardByVersion = n.rewardByVersion()
	s.RewardGeneratedFirst5, s.RewardGeneratedLast5, s.RewardGeneratedVersions = report.GeneratedFirstLast(s.RewardByVersion, int64(cfg.Trainer.MiniBatchSize))
	if n.ctl != nil && n.ctl.Core() != nil {
		core := n.ctl.Core()
		m := core.Staleness()
		st := core.Stats()
		s.StalenessMax, s.StalenessMean, s.StalenessHistogram = m.StalenessMax, m.StalenessMean, m.StalenessHistogram
		s.GroupsTrained = st.Trained
		s.GroupsDroppedZeroVariance = st.Filtered
		s.GroupsRequeuedStale = st.RequeuedStale
		s.GroupsReplaced, s.GenerationBatchesResampled, s.TrajectoriesMasked = st.Replaced, st.Resampled, st.Masked
		s.GroupsRequeuedSampling = st.RequeuedSampling
		s.GenerationBatchesPerStep = append(s.GenerationBatchesPerStep, st.GenerationBatches...)
		if k := len(st.GenerationBatches); k > 0 {
			sum := 0
			for _, b := range st.GenerationBatches {
				sum += b
			}
			s.GenerationBatchesMean = float64(sum) / float64(k)
		}
		s.GroupsRequeuedAborted = st.RequeuedAborted
		s.GroupsInFlightAtStop = int64(core.InFlight())
	}
	tot := n.rolloutTotals()
	s.GroupsGenerated = tot.GroupsReady
	s.TrajectoriesStarted, s.TrajectoriesFinished, s.TrajectoriesAborted = tot.Started, tot.Finished, tot.Aborted
	s.TrajectoriesMixedVersions = tot.MixedVersions
	s.TurnResubmits = tot.Resubmits
	s.TrajectoriesAbortedEnvError, s.TrajectoriesAbortedEnvTimeout = tot.EnvErrors, tot.EnvTimeouts
	s.EnvBackoffs, s.EnvBackoffSeconds = tot.EnvBackoffs, float64(tot.EnvBackoffMs)/1000
	s.ToolCalls, s.ToolCallsMalformed = tot.ToolCalls, tot.MalformedCalls
	s.ToolCallsTimedOut, s.EpisodesWithToolCall = tot.ToolTimeouts, tot.ToolCallEpisodes
	s.Tokens, s.GeneratedTokens = tot.Tokens, tot.Generated
	if wall > 0 {
		s.TokensPerSecond = float64(tot.Tokens) / wall
		s.GeneratedTokensPerSec = float64(tot.Generated) / wall
	}
	// Lost: trajectories neither finished nor reported aborted, and the
	// trajectories of groups reported on the bus whose fate never reached
	// the controller's books.
	s.TrajectoriesLost = tot.Started - tot.Finished - tot.Aborted
	if n.ledger != nil {
		s.TrajectoriesLost += int64(len(n.unsettled()) * cfg.Rollout.NSamplesPerPrompt)
	}
	for _, e := range n.engines {
		s.EngineVersions = append(s.EngineVersions, e.E.Version())
	}
	s.TrainerRanks = n.rankRows()
	return s
}

// rewardByVersion is the sampling core's reward tally (every judged
// group, kept or dropped) by generating version, in version order.
func (n *Node) rewardByVersion() []report.VersionReward {
	rows := []report.VersionReward{}
	if n.smp == nil || n.smp.Core() == nil {
		return rows
	}
	tally := n.smp.Core().Stats().Rewards
	for _, v := range slices.Sorted(maps.Keys(tally)) {
		t := tally[v]
		rows = append(rows, report.VersionReward{Version: v, Groups: t.Groups, Trajectories: t.Trajectories, NaN: t.NaN, Mean: t.Mean()})
	}
	return rows
}
