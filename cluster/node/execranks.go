package node

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/asyncrl/asyncrl/actors/trainer"
	"github.com/asyncrl/asyncrl/internal/report"
)

// rankRows are the exec backend's per-rank figures for summary.json
// (nil on the other backends, or before the first step).
func (n *Node) rankRows() []report.RankRow {
	if n.exec == nil {
		return nil
	}
	var rows []report.RankRow
	for _, st := range n.exec.RankStats() {
		row := report.RankRow{Rank: st.Rank, Steps: st.Steps, MemoryBytes: int64(st.MemoryBytes)}
		if st.Steps > 0 {
			row.StepSecondsMean = st.StepSeconds / float64(st.Steps)
			row.AllReduceSecondsMean = st.AllReduceSeconds / float64(st.Steps)
		}
		rows = append(rows, row)
	}
	return rows
}

var (
	rankStepDesc = prometheus.NewDesc("asyncrl_trainer_rank_step_seconds_total",
		"Time each rank of the exec trainer's worker group spent in its TrainBatches (microbatches, all-reduces, optimiser step).",
		[]string{"rank"}, nil)
	rankAllReduceDesc = prometheus.NewDesc("asyncrl_trainer_rank_allreduce_seconds_total",
		"Time each rank of the exec trainer's worker group spent in the gradient all-reduce.", []string{"rank"}, nil)
	rankStepsDesc = prometheus.NewDesc("asyncrl_trainer_rank_steps_total",
		"Steps each rank of the exec trainer's worker group trained.", []string{"rank"}, nil)
	rankMemoryDesc = prometheus.NewDesc("asyncrl_trainer_rank_memory_bytes",
		"Peak memory of each rank of the exec trainer's worker group (CUDA peak allocation, else peak resident set).",
		[]string{"rank"}, nil)
)

// rankCollector exports trainer.Exec.RankStats on /metrics, one series
// per rank.
type rankCollector struct{ ex *trainer.Exec }

var _ prometheus.Collector = rankCollector{}

func (c rankCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- rankStepDesc
	ch <- rankAllReduceDesc
	ch <- rankStepsDesc
	ch <- rankMemoryDesc
}

func (c rankCollector) Collect(ch chan<- prometheus.Metric) {
	for _, st := range c.ex.RankStats() {
		r := strconv.Itoa(st.Rank)
		ch <- prometheus.MustNewConstMetric(rankStepDesc, prometheus.CounterValue, st.StepSeconds, r)
		ch <- prometheus.MustNewConstMetric(rankAllReduceDesc, prometheus.CounterValue, st.AllReduceSeconds, r)
		ch <- prometheus.MustNewConstMetric(rankStepsDesc, prometheus.CounterValue, float64(st.Steps), r)
		ch <- prometheus.MustNewConstMetric(rankMemoryDesc, prometheus.GaugeValue, st.MemoryBytes, r)
	}
}
