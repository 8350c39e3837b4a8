package status

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"
)

// Render is the text of s, one labelled line per part and a table of
// engines; what was not seen says so rather than being left out, so a
// script can grep for a fixed label ("lease", "term", "step", …).
func Render(s Snapshot) string {
	var b strings.Builder
	fmt.Fprintf(&b, "asyncrl status: run %s at %s\n", s.Run, s.At.UTC().Format(time.DateTime+" MST"))
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "members\t%s\n", membersLine(s))
	fmt.Fprintf(w, "lease\t%s\n", leaseLine(s))
	fmt.Fprintf(w, "term\t%s\n", termLine(s))
	fmt.Fprintf(w, "step\t%s\n", stepLine(s))
	fmt.Fprintf(w, "groups\t%s\n", groupsLine(s))
	fmt.Fprintf(w, "engines\t%d\n", len(s.Engines))
	_ = w.Flush()
	if len(s.Engines) > 0 {
		t := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(t, "  ENGINE\tNODE\tSERVES\tACKED\tSTATE\tRUNNING\tWAITING\tKV\tSEEN")
		for _, e := range s.Engines {
			fmt.Fprintf(t, "  %s\t%s\t%s\t%s\t%s\t%d\t%d\t%.0f%%\t%s\n", e.ID, dash(e.Node), version(e.Serving),
				version(e.Acked), engineState(e), e.Running, e.Waiting, 100*e.KVUsage, ago(s.At, e.Seen))
		}
		_ = t.Flush()
	}
	if len(s.Problems) > 0 {
		b.WriteString("problems\n")
		for _, p := range s.Problems {
			b.WriteString("  " + p + "\n")
		}
	}
	return b.String()
}

func membersLine(s Snapshot) string {
	if len(s.Members) == 0 {
		return "none claimed a name"
	}
	names := make([]string, len(s.Members))
	for i, m := range s.Members {
		names[i] = m.Name
	}
	return fmt.Sprintf("%d: %s", len(names), strings.Join(names, ", "))
}

func leaseLine(s Snapshot) string {
	if s.Lease == nil {
		return "trainer lease held by nobody"
	}
	return fmt.Sprintf("trainer lease held by %s (token %d)", s.Lease.Holder, s.Lease.Token)
}

func termLine(s Snapshot) string {
	t := s.Term
	if t == nil {
		return "none announced"
	}
	line := fmt.Sprintf("%s (token %d) by %s, router %s, announced %s", t.ID, t.Token, dash(t.Holder), dash(t.Router), ago(s.At, t.Seen))
	if s.Lease != nil && s.Lease.Token != t.Token {
		line += fmt.Sprintf("; the lease's token is %d (a new term is starting or this one is ending)", s.Lease.Token)
	}
	return line
}

func stepLine(s Snapshot) string {
	var parts []string
	if l := s.Last; l != nil {
		parts = append(parts, fmt.Sprintf("%d version %d (loss %.4g, reward %.4g, %s)", l.Step, l.Version, l.Loss, l.RewardMean, ago(s.At, l.Seen)))
	}
	if p := s.Progress; p != nil {
		d := fmt.Sprintf("durable step %d version %d by %s (token %d)", p.Step, p.Version, dash(p.Holder), p.Token)
		if p.Checkpoint != "" {
			d += ", checkpoint " + p.Checkpoint
		}
		parts = append(parts, d)
	}
	if len(parts) == 0 {
		return "none trained yet"
	}
	return strings.Join(parts, "; ")
}

func groupsLine(s Snapshot) string {
	var parts []string
	if c := s.Capacity; c != nil {
		parts = append(parts, fmt.Sprintf("%d in flight (capacity %d, accepted %d, filtered %d, submitted %d; %s)",
			c.Running, c.Capacity, c.Accepted, c.Filtered, c.Submitted, ago(s.At, c.Seen)))
	}
	if len(s.Rollouts) > 0 {
		nodes := make([]string, len(s.Rollouts))
		for i, r := range s.Rollouts {
			nodes[i] = fmt.Sprintf("%s %d", r.Node, r.Groups)
			if r.Stale {
				nodes[i] += " (stale " + ago(s.At, r.Seen) + ")"
			}
		}
		parts = append(parts, "rollout nodes: "+strings.Join(nodes, ", "))
	}
	if len(parts) == 0 {
		return "no report yet"
	}
	return strings.Join(parts, "; ")
}

func engineState(e Engine) string {
	var st string
	switch {
	case e.Draining:
		st = "draining"
	case e.Updating:
		st = "updating"
	case e.Paused:
		st = "paused"
	case e.Healthy:
		st = "healthy"
	default:
		st = "unhealthy"
		if e.Reason != "" {
			st += " (" + e.Reason + ")"
		}
	}
	if e.Stale {
		st = "stale, was " + st
	}
	return st
}

func version(v int64) string {
	if v < 0 {
		return "-"
	}
	return fmt.Sprintf("v%d", v)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// ago says how long before now t was, to a tenth of a second.
func ago(now, t time.Time) string {
	d := max(now.Sub(t), 0).Round(100 * time.Millisecond)
	return fmt.Sprintf("%.1fs ago", d.Seconds())
}
