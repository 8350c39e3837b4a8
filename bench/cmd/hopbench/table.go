package main

import (
	"fmt"
	"slices"
	"strings"
)

// Table renders the cells as markdown: per connection count and target,
// medians over repetitions of req/s, latency added over direct (p50 /
// p99, each taken within a repetition), the proxy's CPU seconds per 10^5
// requests (for direct: the backend's, a Go net/http server alone), and
// the ratios to the first HAProxy target present
// (haproxy_stick, else haproxy_chash), each taken within a repetition.
func Table(cells []Cell, targets []string, conns []int) string {
	base := ""
	for _, t := range []string{"haproxy_stick", "haproxy_chash"} {
		if slices.Contains(targets, t) {
			base = t
			break
		}
	}
	type key struct {
		rep, conns int
		target     string
	}
	byKey := map[key]Cell{}
	reps := 0
	for _, c := range cells {
		byKey[key{c.Rep, c.Conns, c.Target}] = c
		reps = max(reps, c.Rep+1)
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "| conns | target | req/s | added p50 / p99 µs | proxy CPU s per 10^5 req | req/s ÷ %s | CPU/req ÷ %s | errors |\n", base, base)
	sb.WriteString("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, n := range conns {
		for _, t := range targets {
			var rps, a50, a99, cpu, rr, cr []float64
			var errs int64
			for rep := range reps {
				c, ok := byKey[key{rep, n, t}]
				if !ok {
					continue
				}
				errs += c.Errors
				rps = append(rps, c.RPS())
				if d, ok := byKey[key{rep, n, "direct"}]; ok && t != "direct" {
					a50 = append(a50, float64(c.P50us-d.P50us))
					a99 = append(a99, float64(c.P99us-d.P99us))
				}
				cpu = append(cpu, c.CPUPer1e5())
				if b, ok := byKey[key{rep, n, base}]; ok && base != "" {
					rr = append(rr, c.RPS()/b.RPS())
					if b.CPUPer1e5() > 0 {
						cr = append(cr, c.CPUPer1e5()/b.CPUPer1e5())
					}
				}
			}
			if len(rps) == 0 {
				continue
			}
			added, cpuS, rrS, crS := "—", "—", "—", "—"
			if len(a50) > 0 {
				added = fmt.Sprintf("%.0f / %.0f", Median(a50), Median(a99))
			}
			if len(cpu) > 0 {
				cpuS = fmt.Sprintf("%.2f", Median(cpu))
			}
			if len(rr) > 0 {
				rrS = fmt.Sprintf("%.2f", Median(rr))
			}
			if len(cr) > 0 {
				crS = fmt.Sprintf("%.2f", Median(cr))
			}
			fmt.Fprintf(&sb, "| %d | %s | %.0f | %s | %s | %s | %s | %d |\n", n, t, Median(rps), added, cpuS, rrS, crS, errs)
		}
	}
	return sb.String()
}

// Median of xs (the mean of the middle two for an even count).
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
