package status

import (
	"strings"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/messages"
)

var t0 = time.Date(2026, 12, 6, 17, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func hdr(run, sender string, v int64) messages.Header {
	return messages.Header{RunID: run, Sender: sender, Version: v}
}

// A view fed a term's announcements renders every part with the values
// the messages carried; engines and rollout nodes that went silent are
// marked stale, not dropped.
func TestRenderRunningCluster(t *testing.T) {
	v := NewView("r1", 0)
	v.SetMembers([]Member{{Name: "n3"}, {Name: "n1", Instance: "h1:1:1"}, {Name: "n2"}})
	v.SetLease(&Lease{Holder: "n1", Token: 42})
	v.SetProgress(&Progress{Step: 7, Version: 7, Holder: "n1", Token: 42, Checkpoint: "v7-t42"})
	if !v.Observe(at(0), messages.TermAnnounce{Header: hdr("r1", "n1", 0), Term: "r1-t42", Token: 42, Router: "http://10.0.0.1:8000"}) {
		t.Fatal("first announcement did not switch the view to its term")
	}
	feed := []struct {
		at float64
		m  messages.Message
	}{
		{0.1, messages.EngineHealth{Header: hdr("r1-t42", "n2", 8), Engine: "n2-e0", URL: "http://n2:9000", Healthy: true}},
		{0.1, messages.EngineLoad{Header: hdr("r1-t42", "n2", 8), Engine: "n2-e0", URL: "http://n2:9000", Running: 3, Waiting: 1, KVUsage: 0.25}},
		{0.2, messages.EngineVersionAck{Header: hdr("r1-t42", "n2", 8), Engine: "n2-e0"}},
		{0.2, messages.EngineHealth{Header: hdr("r1-t42", "n3", 7), Engine: "n3-e0", Updating: true}},
		{4.0, messages.EngineHealth{Header: hdr("r1-t42", "n2", 8), Engine: "n2-e0", URL: "http://n2:9000", Healthy: true}},
		{4.0, messages.RolloutStatus{Header: hdr("r1-t42", "n2", 0), GroupIDs: []string{"g1", "g2"}, PromptIDs: []string{"p1", "p2"}}},
		{1.0, messages.RolloutStatus{Header: hdr("r1-t42", "n3", 0), GroupIDs: []string{"g3"}, PromptIDs: []string{"p3"}}},
		{4.1, messages.CapacityChanged{Header: hdr("r1-t42", "controller", 8), Capacity: 16, Running: 12, Accepted: 40, Filtered: 3, Submitted: 55, Step: 8}},
		{4.2, messages.StepDone{Header: hdr("r1-t42", "trainer", 7), Step: 8, NewVersion: 8, Loss: 0.125, RewardMean: 0.5}},
		// A late message of a deposed term changes nothing.
		{4.3, messages.StepDone{Header: hdr("r1-t41", "trainer", 7), Step: 99, NewVersion: 99}},
		{4.3, messages.EngineHealth{Header: hdr("r1-t41", "n9", 99), Engine: "ghost"}},
	}
	for _, f := range feed {
		if v.Observe(at(f.at), f.m) {
			t.Fatalf("%s switched the term", f.m)
		}
	}
	got := Render(v.Snapshot(at(4.5)))
	want := `asyncrl status: run r1 at 2026-12-06 17:00:04 UTC
members  3: n1, n2, n3
lease    trainer lease held by n1 (token 42)
term     r1-t42 (token 42) by n1, router http://10.0.0.1:8000, announced 4.5s ago
step     8 version 8 (loss 0.125, reward 0.5, 0.3s ago); durable step 7 version 7 by n1 (token 42), checkpoint v7-t42
groups   12 in flight (capacity 16, accepted 40, filtered 3, submitted 55; 0.4s ago); rollout nodes: n2 2, n3 1 (stale 3.5s ago)
engines  2
  ENGINE  NODE  SERVES  ACKED  STATE                RUNNING  WAITING  KV   SEEN
  n2-e0   n2    v8      v8     healthy              3        1        25%  0.5s ago
  n3-e0   n3    v7      -      stale, was updating  0        0        0%   4.3s ago
`
	if got != want {
		t.Errorf("render:\n%s\nwant:\n%s", got, want)
	}
}

// A newer term (larger token) replaces the old one and forgets its
// engines, steps and reports; an older term's announcement is ignored.
func TestNewTermForgetsOldState(t *testing.T) {
	v := NewView("r1", 0)
	v.Observe(at(0), messages.TermAnnounce{Header: hdr("r1", "n1", 0), Term: "r1-t5", Token: 5})
	v.Observe(at(0), messages.EngineHealth{Header: hdr("r1-t5", "n2", 3), Engine: "e0", Healthy: true})
	v.Observe(at(0), messages.StepDone{Header: hdr("r1-t5", "trainer", 2), Step: 3, NewVersion: 3})
	if !v.Observe(at(1), messages.TermAnnounce{Header: hdr("r1", "n2", 0), Term: "r1-t9", Token: 9}) {
		t.Fatal("a larger token did not switch the term")
	}
	if v.Observe(at(2), messages.TermAnnounce{Header: hdr("r1", "n1", 0), Term: "r1-t5", Token: 5}) || v.Term() != "r1-t9" {
		t.Fatalf("a deposed holder's announcement moved the view to %s", v.Term())
	}
	// Another run's announcement on a shared bus is not this run's.
	v.Observe(at(2), messages.TermAnnounce{Header: hdr("r2", "x", 0), Term: "r2-t99", Token: 99})
	s := v.Snapshot(at(2))
	if s.Term.ID != "r1-t9" || s.Term.Holder != "n2" || len(s.Engines) != 0 || s.Last != nil {
		t.Fatalf("after the switch: term %+v, engines %v, last %v", s.Term, s.Engines, s.Last)
	}
	out := Render(s)
	for _, line := range []string{"lease    trainer lease held by nobody", "step     none trained yet", "groups   no report yet", "engines  0"} {
		if !strings.Contains(out, line+"\n") {
			t.Errorf("render lacks %q:\n%s", line, out)
		}
	}
}

// Before any announcement nothing of a term counts, and problems are
// listed (and cleared once the source reads again).
func TestNothingYet(t *testing.T) {
	v := NewView("r1", 0)
	v.Observe(at(0), messages.StepDone{Header: hdr("r1-t1", "trainer", 0), Step: 1})
	v.SetProblem("lease", "bucket asyncrl_leases does not exist")
	v.SetProblem("members", "bucket asyncrl_names does not exist")
	out := Render(v.Snapshot(at(1)))
	want := "term     none announced\n"
	if !strings.Contains(out, want) || !strings.Contains(out, "members  none claimed a name\n") ||
		!strings.HasSuffix(out, "problems\n  lease: bucket asyncrl_leases does not exist\n  members: bucket asyncrl_names does not exist\n") {
		t.Errorf("render:\n%s", out)
	}
	v.SetProblem("lease", "")
	if s := v.Snapshot(at(1)); len(s.Problems) != 1 || s.Last != nil {
		t.Errorf("problems %v, last %v", s.Problems, s.Last)
	}
}
