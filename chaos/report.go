package chaos

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/asyncrl/asyncrl/internal/report"
)

// FaultCount is how many faults of one kind were injected.
type FaultCount struct {
	Kind  string `json:"kind"`
	Count int    `json:"count"`
	// Hold is the total time faults of this kind lasted.
	Hold time.Duration `json:"hold_ns"`
	// Effect sums the faults' effects (Fault.Effect).
	Effect int64 `json:"effect"`
}

// effectUnit names what Effect counts for a kind.
func effectUnit(kind string) string {
	switch kind {
	case KindLatency:
		return "chunks delayed"
	case KindReset:
		return "connections reset"
	case KindBlackhole:
		return "connections blackholed + chunks held"
	case KindEngineKill:
		return "restarts on the same port"
	}
	return ""
}

// Report is a chaos session's outcome.
type Report struct {
	Seed     int64         `json:"seed"`
	Duration time.Duration `json:"duration_ns"`
	// Faults counts the injected faults per kind (Kinds() order, enabled kinds).
	Faults []FaultCount `json:"faults"`
	// Injected is every fault as played, in order.
	Injected []Fault `json:"injected"`
	// Invariants are the verdicts, in table order.
	Invariants []Invariant `json:"invariants"`
	// Summary is the run's summary (steps, groups, trajectories).
	Summary report.Summary `json:"summary"`
	// Wall is the whole session, start-up and stop included.
	Wall time.Duration `json:"wall_ns"`
	// Interrupted: the caller's context ended before Duration.
	Interrupted bool `json:"interrupted"`
}

// Total is the number of injected faults.
func (r Report) Total() int {
	n := 0
	for _, f := range r.Faults {
		n += f.Count
	}
	return n
}

// OK reports whether every invariant held.
func (r Report) OK() bool {
	for _, inv := range r.Invariants {
		if !inv.Held {
			return false
		}
	}
	return len(r.Invariants) > 0
}

// Violations lists the broken invariants.
func (r Report) Violations() []Invariant {
	var out []Invariant
	for _, inv := range r.Invariants {
		if !inv.Held {
			out = append(out, inv)
		}
	}
	return out
}

// WriteTable prints the faults injected and the invariants' verdicts.
func (r Report) WriteTable(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "chaos seed %d, %v of faults, %.1fs wall: %d steps (v%d), %d groups trained, %d trajectories (%d aborted)\n\n",
		r.Seed, r.Duration, r.Wall.Seconds(), r.Summary.Steps, r.Summary.FinalVersion, r.Summary.GroupsTrained,
		r.Summary.TrajectoriesStarted, r.Summary.TrajectoriesAborted)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FAULT\tINJECTED\tTOTAL HOLD\tEFFECT")
	for _, f := range r.Faults {
		eff := ""
		if u := effectUnit(f.Kind); u != "" && f.Count > 0 {
			eff = fmt.Sprintf("%d %s", f.Effect, u)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.1fs\t%s\n", f.Kind, f.Count, f.Hold.Seconds(), eff)
	}
	fmt.Fprintf(tw, "total\t%d\t\t\n", r.Total())
	_ = tw.Flush()
	b.WriteString("\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "INVARIANT\tHELD\tDETAIL")
	for _, inv := range r.Invariants {
		held := "yes"
		if !inv.Held {
			held = "NO"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", inv.Name, held, inv.Detail)
	}
	_ = tw.Flush()
	if r.Interrupted {
		b.WriteString("\ninterrupted before the end: progress and convergence were not waited for\n")
	} else if !r.OK() {
		fmt.Fprintf(&b, "\nVIOLATION — reproduce with: asyncrl chaos --seed %d --duration %v\n", r.Seed, r.Duration)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func countFaults(kinds []string, played []Fault) []FaultCount {
	out := make([]FaultCount, len(kinds))
	for i, k := range kinds {
		out[i].Kind = k
		for _, f := range played {
			if f.Kind == k {
				out[i].Count++
				out[i].Hold += f.Hold
				out[i].Effect += f.Effect
			}
		}
	}
	return out
}
