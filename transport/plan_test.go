package transport

import (
	"errors"
	"flag"
	"os"
	"reflect"
	"strings"
	"testing"
)

var updateDoc = flag.Bool("update", false, "rewrite the plan table in subjects.go from RunPlan.PlanEntries")

// TestPlanDoc: the table subjects.go documents is the one the code builds.
// A subject renamed in planOf without the doc fails here (and -update
// rewrites the doc).
func TestPlanDoc(t *testing.T) {
	const file = "subjects.go"
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(src), "\n")
	start := -1
	for i, l := range lines {
		if strings.HasPrefix(l, "//\tname ") || l == "//\tPLAN\n" {
			start = i
			break
		}
	}
	if start < 0 {
		t.Fatalf("%s: no plan table (a line starting \"//\\tname \") in the comment on Topic", file)
	}
	end := start
	for end < len(lines) && strings.HasPrefix(lines[end], "//\t") {
		end++
	}
	got, want := strings.Join(lines[start:end], ""), PlanTable("//\t")
	if got == want {
		return
	}
	if *updateDoc {
		out := strings.Join(lines[:start], "") + want + strings.Join(lines[end:], "")
		if err := os.WriteFile(file, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("%s documents a plan the code does not build; run `go test ./transport -run TestPlanDoc -update`.\ndoc:\n%s\ncode:\n%s", file, got, want)
}

// TestPlanNames: run r1's plan, name by name. These are wire names: a
// change here is a protocol change that nodes of different builds would
// not agree on, so it must be deliberate.
func TestPlanNames(t *testing.T) {
	p := MustPlan("r1")
	want := RunPlan{Run: "r1",
		Prompts: "asyncrl.r1.prompts", Trajectories: "asyncrl.r1.trajectories", Aborted: "asyncrl.r1.trajectories.aborted",
		GroupsAll: "asyncrl.r1.groups.>", Kept: "asyncrl.r1.groups.kept", Filtered: "asyncrl.r1.groups.filtered",
		Train: "asyncrl.r1.train", Steps: "asyncrl.r1.steps", Weights: "asyncrl.r1.weights", Capacity: "asyncrl.r1.capacity",
		Ledger: "asyncrl.r1.ledger", Settled: "asyncrl.r1.ledger.groups", LedgerAll: "asyncrl.r1.ledger.>",
		AcksAll: "asyncrl.r1.engines.*.ack", EnginesAll: "asyncrl.r1.engines.*.*", TurnResults: "asyncrl.r1.turns.results", TurnsAll: "asyncrl.r1.turns.*",
		TermAnnounce: "asyncrl.r1.control.term", RolloutStatusAll: "asyncrl.r1.control.rollouts.*",
		EngineControlAll: "asyncrl.r1.control.engines.*", Leaving: "asyncrl.r1.control.leaving",
		RankHostAll:  "asyncrl.r1.control.ranks.*",
		LedgerStream: "ledger-r1", GroupStream: "groups-r1", DurableGroups: "asyncrl-durable.r1.groups",
		DurableGroupStream: "asyncrl_r1_groupbuf", PromptsBucket: "asyncrl_r1_prompts", ProgressBucket: "asyncrl_r1_progress",
		CheckpointBucket: "asyncrl-ckpt-r1", WeightsBucket: "asyncrl-weights-r1"}
	if p != want {
		t.Fatalf("Plan(r1) =\n%+v\nwant\n%+v", p, want)
	}
	if MustPlan("r1") != p {
		t.Fatal("Plan(r1) differs between two calls")
	}
	for _, c := range []struct {
		got  func() (string, error)
		want string
	}{
		{func() (string, error) { return p.Engine("e0", EngineAck) }, "asyncrl.r1.engines.e0.ack"},
		{func() (string, error) { return p.Engine("e0", EngineHealth) }, "asyncrl.r1.engines.e0.health"},
		{func() (string, error) { return p.EngineControl("n2") }, "asyncrl.r1.control.engines.n2"},
		{func() (string, error) { return p.RolloutStatus("n2") }, "asyncrl.r1.control.rollouts.n2"},
		{func() (string, error) { return p.RankHost("n2") }, "asyncrl.r1.control.ranks.n2"},
		{func() (string, error) { return p.Turn("e3") }, "asyncrl.r1.turns.e3"},
	} {
		if s, err := c.got(); err != nil || s != c.want {
			t.Errorf("got %q, %v; want %q", s, err, c.want)
		}
	}
	if s := p.EngineKindAll(EngineHealth); s != "asyncrl.r1.engines.*.health" {
		t.Errorf("EngineKindAll(health) = %q", s)
	}
	if a := AnyRunPlan(); a.Leaving != "asyncrl.*.control.leaving" || a.Trajectories != "asyncrl.*.trajectories" {
		t.Errorf("AnyRunPlan: %+v", a)
	}
	if s, err := AnyRunPlan().RolloutStatus("*"); err != nil || s != "asyncrl.*.control.rollouts.*" {
		t.Errorf("AnyRunPlan().RolloutStatus(*) = %q, %v", s, err)
	}
}

// TestPlanEntriesDistinctAndValid: no two entries of a plan share a name
// (two messages on one subject would reach each other's subscribers),
// every entry's subject is a well-formed subject or pattern of the scheme,
// every RunPlan field is listed, and every pattern matches some subject.
func TestPlanEntriesDistinctAndValid(t *testing.T) {
	p := MustPlan("r1")
	entries := p.PlanEntries("n1", "e1")
	seen := map[string]bool{}
	for _, e := range entries {
		if seen[e.Name] {
			t.Errorf("%q appears twice in the plan", e.Name)
		}
		seen[e.Name] = true
		switch {
		case e.Kind == "stream name", strings.HasSuffix(e.Kind, "bucket"), e.Kind == "object store":
			if err := ValidToken(strings.ReplaceAll(e.Name, "_", "-")); err != nil {
				t.Errorf("%s %q: %v", e.Kind, e.Name, err)
			}
		case e.Kind == "pattern":
			if err := ValidatePattern(e.Name); err != nil || !strings.ContainsAny(e.Name, "*>") {
				t.Errorf("pattern %q: %v", e.Name, err)
			}
		case strings.HasPrefix(e.Name, DurableRoot+"."):
			if err := ValidateSubject(e.Name); err != nil {
				t.Errorf("%q: %v", e.Name, err)
			}
		default:
			if _, err := ParseSubject(e.Name); err != nil {
				t.Errorf("%q: %v", e.Name, err)
			}
		}
	}
	v := reflect.ValueOf(p)
	for i := range v.NumField() {
		name, val := v.Type().Field(i).Name, v.Field(i).String()
		if name != "Run" && !seen[val] {
			t.Errorf("RunPlan.%s (%q) is not in PlanEntries", name, val)
		}
	}
	// Every pattern matches at least one concrete subject of the plan: a
	// pattern matching nothing is a subscriber that hears nothing.
	for _, q := range entries {
		if q.Kind != "pattern" {
			continue
		}
		n := 0
		for _, e := range entries {
			if e.Kind != "pattern" && SubjectMatches(q.Name, e.Name) {
				n++
			}
		}
		if n == 0 {
			t.Errorf("pattern %q matches no subject of the plan", q.Name)
		}
	}
}

// TestPlanRefusesBadTokens: a run or node id that would change a
// subject's meaning is refused, with ErrBadSubject.
func TestPlanRefusesBadTokens(t *testing.T) {
	if _, err := Plan("a.b"); !errors.Is(err, ErrBadSubject) {
		t.Fatalf("Plan(a.b): %v", err)
	}
	if _, err := Plan("*"); !errors.Is(err, ErrBadSubject) {
		t.Fatalf("Plan(*): %v (AnyRunPlan is the way to patterns)", err)
	}
	p := MustPlan("r1")
	for _, f := range []func() (string, error){
		func() (string, error) { return p.Engine("e.1", EngineAck) },
		func() (string, error) { return p.Engine("*", EngineAck) },
		func() (string, error) { return p.Engine("e1", "status") },
		func() (string, error) { return p.EngineControl("n 1") },
		func() (string, error) { return p.RolloutStatus(">") },
		func() (string, error) { return p.Turn("") },
	} {
		if s, err := f(); !errors.Is(err, ErrBadSubject) {
			t.Errorf("got %q, %v; want ErrBadSubject", s, err)
		}
	}
}

// TestArchitectureSubjectsArePlanned: every subject ARCHITECTURE.md's
// message-flow table names is one of the plan's (with <term> a run: a
// term is a run of its own), so the document cannot name a subject the
// code does not use.
func TestArchitectureSubjectsArePlanned(t *testing.T) {
	doc, err := os.ReadFile("../ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	_, flow, ok := strings.Cut(string(doc), "## Message flow")
	if !ok {
		t.Fatal("ARCHITECTURE.md has no \"## Message flow\" section")
	}
	flow, _, _ = strings.Cut(flow, "\n## ")
	names := map[string]bool{}
	for _, e := range planOf("<run>").PlanEntries("<node>", "<id>") {
		names[e.Name] = true
	}
	n := 0
	for _, part := range strings.Split(flow, "`")[1:] {
		if !strings.HasPrefix(part, SubjectRoot+".<") {
			continue
		}
		n++
		if s := strings.ReplaceAll(part, "<term>", "<run>"); !names[s] {
			t.Errorf("ARCHITECTURE.md's message flow names %s, which is not in the plan (transport/subjects.go)", part)
		}
	}
	if n < 15 {
		t.Fatalf("found %d subjects in ARCHITECTURE.md's message flow; the table names over fifteen", n)
	}
}
