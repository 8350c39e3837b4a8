package routerbench

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
)

// Cell names a (pressure, policy) pair of the comparison.
type Cell struct {
	Pressure float64
	Policy   string
}

// Summary is the per-cell median over repetitions, and the median of the
// per-repetition ratios to the baseline policy measured in the same
// repetition.
type Summary struct {
	Cell
	Runs int
	// Medians of the Result fields.
	ThroughputModelled, ThroughputWall float64
	TTFT50, TTFT90, TTFT99             float64
	Conv50, Conv90, ConvMax            float64
	WallConv90                         float64
	HitRate, Preemptions, Moved        float64
	// PerReplica is the median request count of each replica, sorted
	// descending (replica identities differ between runs).
	PerReplica []float64
	// Ratios to the baseline (median of per-repetition ratios).
	RThroughput, RTTFT90, RConv90, RConvMax float64
	Spills                                  float64
}

// Summarize groups results by cell (reps[i] is repetition i's results)
// and takes medians; ratios divide each repetition's value by the
// baseline policy's value at the same pressure in that repetition.
func Summarize(reps [][]Result, baseline string) []Summary {
	type key = Cell
	byCell := map[key][]Result{}
	base := map[key]Result{} // (pressure, rep index encoded in Policy) → baseline
	var order []key
	for ri, rs := range reps {
		for _, r := range rs {
			k := key{r.Pressure, r.Policy}
			if _, ok := byCell[k]; !ok {
				order = append(order, k)
			}
			byCell[k] = append(byCell[k], r)
			if r.Policy == baseline {
				base[key{r.Pressure, fmt.Sprint(ri)}] = r
			}
		}
	}
	ratio := func(r Result, ri int, f func(Result) float64) float64 {
		b, ok := base[key{r.Pressure, fmt.Sprint(ri)}]
		if !ok || f(b) == 0 {
			return math.NaN()
		}
		return f(r) / f(b)
	}
	var out []Summary
	for _, k := range order {
		rs := byCell[k]
		col := func(f func(Result) float64) float64 { return medianOf(rs, f) }
		rcol := func(f func(Result) float64) float64 {
			var xs []float64
			for ri, rep := range reps {
				for _, r := range rep {
					if r.Pressure == k.Pressure && r.Policy == k.Policy {
						xs = append(xs, ratio(r, ri, f))
					}
				}
			}
			return Median(xs)
		}
		s := Summary{Cell: k, Runs: len(rs)}
		s.ThroughputModelled = col(func(r Result) float64 { return r.ThroughputModelled })
		s.ThroughputWall = col(func(r Result) float64 { return r.ThroughputWall })
		s.TTFT50 = col(func(r Result) float64 { return r.TTFT50 })
		s.TTFT90 = col(func(r Result) float64 { return r.TTFT90 })
		s.TTFT99 = col(func(r Result) float64 { return r.TTFT99 })
		s.Conv50 = col(func(r Result) float64 { return r.Conv50 })
		s.Conv90 = col(func(r Result) float64 { return r.Conv90 })
		s.ConvMax = col(func(r Result) float64 { return r.ConvMax })
		s.WallConv90 = col(func(r Result) float64 { return r.WallConv90 })
		s.HitRate = col(func(r Result) float64 { return r.HitRate })
		s.Preemptions = col(func(r Result) float64 { return r.Preemptions })
		s.Moved = col(func(r Result) float64 { return float64(r.Moved) })
		s.Spills = col(func(r Result) float64 { return r.Outcomes["spilled"] + r.Outcomes["moved"] })
		s.PerReplica = perReplicaMedians(rs)
		s.RThroughput = rcol(func(r Result) float64 { return r.ThroughputModelled })
		s.RTTFT90 = rcol(func(r Result) float64 { return r.TTFT90 })
		s.RConv90 = rcol(func(r Result) float64 { return r.Conv90 })
		s.RConvMax = rcol(func(r Result) float64 { return r.ConvMax })
		out = append(out, s)
	}
	return out
}

// medianOf is the median of f over rs.
func medianOf(rs []Result, f func(Result) float64) float64 {
	xs := make([]float64, len(rs))
	for i, r := range rs {
		xs[i] = f(r)
	}
	return Median(xs)
}

// perReplicaMedians is the median over rs of each rank of the per-replica
// request counts sorted descending (replica identities differ between
// runs); a run with fewer replicas counts 0 at the ranks it lacks.
func perReplicaMedians(rs []Result) []float64 {
	n := 0
	for _, r := range rs {
		n = max(n, len(r.PerReplica))
	}
	var out []float64
	for i := range n {
		out = append(out, medianOf(rs, func(r Result) float64 {
			if sorted := sortedDesc(r.PerReplica); i < len(sorted) {
				return sorted[i]
			}
			return 0
		}))
	}
	return out
}

func sortedDesc(xs []int) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = float64(x)
	}
	sort.Sort(sort.Reverse(sort.Float64Slice(out)))
	return out
}

// pressures lists the distinct pressures of ss in first-seen order: one
// table each.
func pressures[S any](ss []S, pressure func(S) float64) []float64 {
	var out []float64
	seen := map[float64]bool{}
	for _, s := range ss {
		if p := pressure(s); !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

// joinCounts writes per-replica counts as a table cell: "12 / 9 / 3".
func joinCounts(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.0f", x)
	}
	return strings.Join(parts, " / ")
}

// PressureName names a KV pressure factor as workloads.md does.
func PressureName(p float64) string {
	switch p {
	case 2:
		return "low (2×)"
	case 1:
		return "moderate (1×)"
	case 0.5:
		return "high (0.5×)"
	}
	return fmt.Sprintf("%g×", p)
}

// WriteMarkdown writes one table per pressure.
func WriteMarkdown(w io.Writer, ss []Summary, baseline string) {
	for _, p := range pressures(ss, func(s Summary) float64 { return s.Pressure }) {
		fmt.Fprintf(w, "\nKV pressure %s\n\n", PressureName(p))
		fmt.Fprintf(w, "| policy | tok/s (modelled) | ×%s | tok/s (wall÷scale) | TTFT p50/p90/p99 ms (modelled) | conv p50/p90/max s (modelled) | conv p90 ×, max × | conv p90 s (wall÷scale) | prefix hit | preempt | requests per replica | sessions on >1 replica |\n", baseline)
		fmt.Fprintf(w, "| --- | ---: | ---: | ---: | --- | --- | --- | ---: | ---: | ---: | --- | ---: |\n")
		for _, s := range ss {
			if s.Pressure != p {
				continue
			}
			fmt.Fprintf(w, "| %s | %.0f | %.2f | %.0f | %.0f / %.0f / %.0f | %.1f / %.1f / %.1f | %.2f, %.2f | %.1f | %.1f %% | %.0f | %s | %.0f |\n",
				s.Policy, s.ThroughputModelled, s.RThroughput, s.ThroughputWall,
				s.TTFT50*1e3, s.TTFT90*1e3, s.TTFT99*1e3,
				s.Conv50, s.Conv90, s.ConvMax, s.RConv90, s.RConvMax, s.WallConv90,
				s.HitRate*100, s.Preemptions, joinCounts(s.PerReplica), s.Moved)
		}
	}
}

// WriteOverheadMarkdown writes the overhead table: per load, the medians
// over repetitions of direct and routed p50/p99 and throughput, and the
// median of the per-repetition differences (added latency).
func WriteOverheadMarkdown(w io.Writer, reps [][]OverheadResult) {
	type load struct {
		clients int
		rate    float64
	}
	type pair struct{ direct, router OverheadResult }
	byLoad := map[load][]pair{}
	var order []load
	for _, rs := range reps {
		cur := map[load]*pair{}
		for _, r := range rs {
			l := load{r.Clients, r.Rate}
			if cur[l] == nil {
				cur[l] = &pair{}
				if _, ok := byLoad[l]; !ok {
					order = append(order, l)
				}
			}
			if r.Target == "router" {
				cur[l].router = r
			} else {
				cur[l].direct = r
			}
		}
		for l, p := range cur {
			byLoad[l] = append(byLoad[l], *p)
		}
	}
	us := func(ps []pair, f func(pair) float64) float64 {
		xs := make([]float64, len(ps))
		for i, p := range ps {
			xs[i] = f(p)
		}
		return Median(xs)
	}
	fmt.Fprintf(w, "\n| load | direct p50 / p99 µs | router p50 / p99 µs | added p50 / p99 µs | in-router p50 / p99 µs | direct req/s | router req/s | router/direct req/s | errors |\n")
	fmt.Fprintf(w, "| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: |\n")
	for _, l := range order {
		ps := byLoad[l]
		name := fmt.Sprintf("%d clients, closed loop", l.clients)
		if l.rate > 0 {
			name = fmt.Sprintf("%.0f req/s offered, open loop", l.rate)
		}
		errs := 0
		for _, p := range ps {
			errs += p.direct.Errors + p.router.Errors
		}
		fmt.Fprintf(w, "| %s | %.0f / %.0f | %.0f / %.0f | %.0f / %.0f | %.0f / %.0f | %.0f | %.0f | %.2f | %d |\n", name,
			us(ps, func(p pair) float64 { return float64(p.direct.P50.Microseconds()) }),
			us(ps, func(p pair) float64 { return float64(p.direct.P99.Microseconds()) }),
			us(ps, func(p pair) float64 { return float64(p.router.P50.Microseconds()) }),
			us(ps, func(p pair) float64 { return float64(p.router.P99.Microseconds()) }),
			us(ps, func(p pair) float64 { return float64((p.router.P50 - p.direct.P50).Microseconds()) }),
			us(ps, func(p pair) float64 { return float64((p.router.P99 - p.direct.P99).Microseconds()) }),
			us(ps, func(p pair) float64 { return float64(p.router.InRouter50.Microseconds()) }),
			us(ps, func(p pair) float64 { return float64(p.router.InRouter99.Microseconds()) }),
			us(ps, func(p pair) float64 { return p.direct.RPS }),
			us(ps, func(p pair) float64 { return p.router.RPS }),
			us(ps, func(p pair) float64 { return p.router.RPS / p.direct.RPS }),
			errs)
	}
}

// PublishSummary compares the version rules for one (pressure, policy)
// under the publish scenario: medians over repetitions per rule, and the
// median of the per-repetition ratios rule / baseline rule.
type PublishSummary struct {
	Pressure float64
	Policy   string // the routing policy (Result.Policy)
	Rule     string // the version rule (Result.Rule)
	Runs     int
	// Medians.
	HitRate, Throughput, Conv90, Moves, Publishes float64
	PerReplica                                    []float64
	// Ratios to the baseline rule in the same repetition (median).
	RHitRate, RThroughput, RConv90 float64
}

// SummarizePublish groups publish-scenario results by (pressure, policy,
// rule) and takes medians; ratios divide each repetition's value by the
// same (pressure, policy) cell's value under baseline rule in that
// repetition.
func SummarizePublish(reps [][]Result, baseline string) []PublishSummary {
	type key struct {
		p         float64
		pol, rule string
	}
	type bkey struct {
		p   float64
		pol string
		rep int
	}
	by := map[key][]Result{}
	base := map[bkey]Result{}
	var order []key
	repOf := map[key][]int{}
	for ri, rs := range reps {
		for _, r := range rs {
			k := key{r.Pressure, r.Policy, r.Rule}
			if _, ok := by[k]; !ok {
				order = append(order, k)
			}
			by[k] = append(by[k], r)
			repOf[k] = append(repOf[k], ri)
			if r.Rule == baseline {
				base[bkey{r.Pressure, r.Policy, ri}] = r
			}
		}
	}
	var out []PublishSummary
	for _, k := range order {
		rs := by[k]
		col := func(f func(Result) float64) float64 { return medianOf(rs, f) }
		rcol := func(f func(Result) float64) float64 {
			var xs []float64
			for i, r := range rs {
				b, ok := base[bkey{k.p, k.pol, repOf[k][i]}]
				if ok && f(b) != 0 {
					xs = append(xs, f(r)/f(b))
				}
			}
			if len(xs) == 0 {
				return math.NaN()
			}
			return Median(xs)
		}
		s := PublishSummary{Pressure: k.p, Policy: k.pol, Rule: k.rule, Runs: len(rs)}
		s.HitRate = col(func(r Result) float64 { return r.HitRate })
		s.Throughput = col(func(r Result) float64 { return r.ThroughputModelled })
		s.Conv90 = col(func(r Result) float64 { return r.Conv90 })
		s.Moves = col(func(r Result) float64 { return r.Outcomes["moved"] + r.Outcomes["spilled"] })
		s.Publishes = col(func(r Result) float64 { return float64(r.Publishes) })
		s.PerReplica = perReplicaMedians(rs)
		s.RHitRate = rcol(func(r Result) float64 { return r.HitRate })
		s.RThroughput = rcol(func(r Result) float64 { return r.ThroughputModelled })
		s.RConv90 = rcol(func(r Result) float64 { return r.Conv90 })
		out = append(out, s)
	}
	return out
}

// WritePublishMarkdown writes the version-rule comparison, one table per
// pressure.
func WritePublishMarkdown(w io.Writer, ss []PublishSummary, baseline string) {
	for _, p := range pressures(ss, func(s PublishSummary) float64 { return s.Pressure }) {
		fmt.Fprintf(w, "\nKV pressure %s\n\n", PressureName(p))
		fmt.Fprintf(w, "| policy | version rule | prefix hit | hit ×%s | tok/s (modelled) | tok/s ×%s | conv p90 s (modelled) | conv p90 × | moved + spilled | publishes | requests per replica |\n", baseline, baseline)
		fmt.Fprintf(w, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n")
		for _, s := range ss {
			if s.Pressure != p {
				continue
			}
			fmt.Fprintf(w, "| %s | %s | %.1f %% | %.3f | %.0f | %.3f | %.1f | %.3f | %.0f | %.0f | %s |\n",
				s.Policy, s.Rule, s.HitRate*100, s.RHitRate, s.Throughput, s.RThroughput, s.Conv90, s.RConv90,
				s.Moves, s.Publishes, joinCounts(s.PerReplica))
		}
	}
}
