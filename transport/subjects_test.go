package transport_test

import (
	"errors"
	"testing"

	"github.com/asyncrl/asyncrl/transport"
)

func TestSubjectBuilder(t *testing.T) {
	tests := []struct {
		run   string
		topic transport.Topic
		more  []string
		want  string
		bad   bool
	}{
		{run: "run-1", topic: transport.TopicPrompts, want: "asyncrl.run-1.prompts"},
		{run: "r_2", topic: transport.TopicTrajectories, more: []string{"shard-3"}, want: "asyncrl.r_2.trajectories.shard-3"},
		{run: "r", topic: transport.TopicEngines, more: []string{"e1", "health"}, want: "asyncrl.r.engines.e1.health"},
		{run: "", topic: transport.TopicSteps, bad: true},
		{run: "a.b", topic: transport.TopicSteps, bad: true},
		{run: "a b", topic: transport.TopicSteps, bad: true},
		{run: "r*", topic: transport.TopicSteps, bad: true},
		{run: "r>", topic: transport.TopicSteps, bad: true},
		{run: "r", topic: "nosuch", bad: true},
		{run: "r", topic: transport.TopicSteps, more: []string{""}, bad: true},
		{run: "r", topic: transport.TopicSteps, more: []string{"x.y"}, bad: true},
		{run: "r", topic: transport.TopicEngines, more: []string{"e1"}, bad: true},
		{run: "ré", topic: transport.TopicSteps, bad: true},
	}
	for _, tc := range tests {
		got, err := transport.Subject(tc.run, tc.topic, tc.more...)
		if tc.bad {
			if !errors.Is(err, transport.ErrBadSubject) {
				t.Errorf("Subject(%q, %q, %q) = %q, %v; want ErrBadSubject", tc.run, tc.topic, tc.more, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Subject(%q, %q, %q) = %q, %v; want %q", tc.run, tc.topic, tc.more, got, err, tc.want)
		}
		p, err := transport.ParseSubject(got)
		if err != nil || p.Run != tc.run || p.Topic != tc.topic || len(p.More) != len(tc.more) {
			t.Errorf("ParseSubject(%q) = %+v, %v; does not round-trip", got, p, err)
		}
	}
}

func TestEngineSubject(t *testing.T) {
	for _, k := range []transport.EngineTopic{transport.EngineHealth, transport.EngineLoad, transport.EngineAck} {
		s, err := transport.EngineSubject("r", "eng-0", k)
		if err != nil || s != "asyncrl.r.engines.eng-0."+string(k) {
			t.Errorf("EngineSubject(%s) = %q, %v", k, s, err)
		}
	}
	if _, err := transport.EngineSubject("r", "e", "restart"); !errors.Is(err, transport.ErrBadSubject) {
		t.Errorf("unknown engine topic accepted: %v", err)
	}
	if _, err := transport.ParseSubject("asyncrl.r.engines.e.restart"); !errors.Is(err, transport.ErrBadSubject) {
		t.Errorf("ParseSubject accepted an unknown engine topic: %v", err)
	}
}

func TestParseSubjectRejects(t *testing.T) {
	for _, s := range []string{"", "asyncrl", "asyncrl.r", "nats.r.steps", "asyncrl.r.nosuch", "asyncrl.r.steps.*", "asyncrl..steps"} {
		if _, err := transport.ParseSubject(s); !errors.Is(err, transport.ErrBadSubject) {
			t.Errorf("ParseSubject(%q) = %v, want ErrBadSubject", s, err)
		}
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		s            string
		subject, pat bool // valid as a publish subject, as a pattern
	}{
		{"asyncrl.r.steps", true, true},
		{"_INBOX.abc.1", true, true},
		{"a", true, true},
		{"a.*.c", false, true},
		{"a.>", false, true},
		{">", false, true},
		{"a.>.c", false, false},
		{"a..c", false, false},
		{".a", false, false},
		{"a.", false, false},
		{"a b", false, false},
		{"a\tb", false, false},
		{"a*b", false, false},
		{"", false, false},
	}
	for _, tc := range tests {
		if err := transport.ValidateSubject(tc.s); (err == nil) != tc.subject || (err != nil && !errors.Is(err, transport.ErrBadSubject)) {
			t.Errorf("ValidateSubject(%q) = %v, want valid=%v", tc.s, err, tc.subject)
		}
		if err := transport.ValidatePattern(tc.s); (err == nil) != tc.pat || (err != nil && !errors.Is(err, transport.ErrBadSubject)) {
			t.Errorf("ValidatePattern(%q) = %v, want valid=%v", tc.s, err, tc.pat)
		}
	}
}

func TestSubjectMatches(t *testing.T) {
	tests := []struct {
		pattern, subject string
		want             bool
	}{
		{"a.b.c", "a.b.c", true},
		{"a.b.c", "a.b", false},
		{"a.b", "a.b.c", false},
		{"a.*.c", "a.x.c", true},
		{"a.*.c", "a.x.y.c", false},
		{"a.*", "a", false},
		{"a.>", "a.b", true},
		{"a.>", "a.b.c.d", true},
		{"a.>", "a", false},
		{">", "a", true},
		{"*", "a", true},
		{"*", "a.b", false},
		{"asyncrl.*.engines.*.health", "asyncrl.r.engines.e1.health", true},
		{"asyncrl.*.engines.*.health", "asyncrl.r.engines.e1.load", false},
		{"a.b", "a.bc", false},
		{"a.bc", "a.b", false},
	}
	for _, tc := range tests {
		if got := transport.SubjectMatches(tc.pattern, tc.subject); got != tc.want {
			t.Errorf("SubjectMatches(%q, %q) = %v, want %v", tc.pattern, tc.subject, got, tc.want)
		}
	}
}

func TestRunWildcard(t *testing.T) {
	w, err := transport.RunWildcard("r1")
	if err != nil || w != "asyncrl.r1.>" {
		t.Fatalf("RunWildcard = %q, %v", w, err)
	}
	if !transport.SubjectMatches(w, transport.MustSubject("r1", transport.TopicGroups)) {
		t.Fatal("run wildcard does not match the run's subjects")
	}
	if transport.SubjectMatches(w, transport.MustSubject("r2", transport.TopicGroups)) {
		t.Fatal("run wildcard matches another run")
	}
	if _, err := transport.RunWildcard("a.b"); !errors.Is(err, transport.ErrBadSubject) {
		t.Fatal("RunWildcard accepted a dotted run id")
	}
}

func TestEngineWildcard(t *testing.T) {
	ack, err := transport.EngineWildcard("r1", transport.EngineAck)
	if err != nil || ack != "asyncrl.r1.engines.*.ack" {
		t.Fatalf("EngineWildcard(ack) = %q, %v", ack, err)
	}
	all, err := transport.EngineWildcard("r1", "")
	if err != nil || all != "asyncrl.r1.engines.*.*" {
		t.Fatalf("EngineWildcard(\"\") = %q, %v", all, err)
	}
	for _, p := range []string{ack, all} {
		if err := transport.ValidatePattern(p); err != nil {
			t.Errorf("%q is not a valid pattern: %v", p, err)
		}
	}
	e1ack, _ := transport.EngineSubject("r1", "e1", transport.EngineAck)
	e1health, _ := transport.EngineSubject("r1", "e1", transport.EngineHealth)
	r2ack, _ := transport.EngineSubject("r2", "e1", transport.EngineAck)
	switch {
	case !transport.SubjectMatches(ack, e1ack), transport.SubjectMatches(ack, e1health), transport.SubjectMatches(ack, r2ack):
		t.Errorf("%q matches wrongly: want only run r1's acks", ack)
	case !transport.SubjectMatches(all, e1ack), !transport.SubjectMatches(all, e1health), transport.SubjectMatches(all, r2ack):
		t.Errorf("%q matches wrongly: want every engine subject of run r1", all)
	}
	if _, err := transport.EngineWildcard("a.b", transport.EngineAck); !errors.Is(err, transport.ErrBadSubject) {
		t.Errorf("dotted run id accepted: %v", err)
	}
	if _, err := transport.EngineWildcard("r1", "restart"); !errors.Is(err, transport.ErrBadSubject) {
		t.Errorf("unknown engine topic accepted: %v", err)
	}
}

func TestTopicsAreValidTokens(t *testing.T) {
	for _, tp := range transport.Topics() {
		if err := transport.ValidToken(string(tp)); err != nil {
			t.Errorf("topic %q: %v", tp, err)
		}
	}
}
