package access

import (
	"slices"
	"testing"

	"github.com/asyncrl/asyncrl/cluster/placement"
	"github.com/asyncrl/asyncrl/transport"
)

// may reports whether p's publish rule lets subject through (allow
// matches, no deny matches), with NATS's token wildcards.
func may(allow, deny []string, subject string) bool {
	match := func(pats []string) bool {
		return slices.ContainsFunc(pats, func(p string) bool { return natsMatch(p, subject) })
	}
	return match(allow) && !match(deny)
}

// natsMatch is NATS subject matching ("*" one token, ">" the rest),
// including the $-prefixed system subjects transport.SubjectMatches does
// not parse.
func natsMatch(pattern, subject string) bool {
	p, s := split(pattern), split(subject)
	for i, t := range p {
		if t == ">" {
			return len(s) > i
		}
		if i >= len(s) || (t != "*" && t != s[i]) {
			return false
		}
	}
	return len(p) == len(s)
}

func split(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == '.' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return out
}

func TestEngineAndRolloutCannotPublishPipelineSubjects(t *testing.T) {
	run := "r1-t3"
	m := transport.MustSubject
	pipelineOnly := []string{m(run, transport.TopicTrain), m(run, transport.TopicSteps), m(run, transport.TopicWeights),
		m(run, transport.TopicLedger), m(run, transport.TopicPrompts), m(run, transport.TopicControl, "term"),
		m(run, transport.TopicControl, "engines", "n2"), "$KV.asyncrl_leases.trainer", "$JS.API.STREAM.DELETE.ledger-r1",
		"$JS.API.STREAM.PURGE.groups-r1-t3", "$O.asyncrl-weights-r1-t3.C.x"}
	for _, role := range []string{placement.Engine, placement.Rollout, placement.Bus, placement.Tinker} {
		p := Permissions([]string{role})
		for _, s := range pipelineOnly {
			if may(p.Publish.Allow, p.Publish.Deny, s) {
				t.Errorf("%s may publish %s", role, s)
			}
		}
	}
	eng := Permissions([]string{placement.Engine})
	for _, s := range []string{m(run, transport.TopicEngines, "n2-e0", "ack"), m(run, transport.TopicEngines, "n2-e0", "health"),
		"$KV.asyncrl_names.n2", "$JS.API.CONSUMER.CREATE.OBJ_x", m("r1", transport.TopicControl, "leaving")} {
		if !may(eng.Publish.Allow, eng.Publish.Deny, s) {
			t.Errorf("engine may not publish %s", s)
		}
	}
	ro := Permissions([]string{placement.Rollout})
	if !may(ro.Publish.Allow, ro.Publish.Deny, m(run, transport.TopicTrajectories)) || may(eng.Publish.Allow, eng.Publish.Deny, m(run, transport.TopicTrajectories)) {
		t.Error("trajectories: want rollout yes, engine no")
	}
}

// The tinker role writes its training futures and nothing of the run's.
func TestTinkerPermissions(t *testing.T) {
	p := Permissions([]string{placement.Tinker})
	if !may(p.Publish.Allow, p.Publish.Deny, "$KV.asyncrl_tinker_futures.n3.t-1a2b") || !may(p.Publish.Allow, p.Publish.Deny, "$JS.API.STREAM.CREATE.KV_asyncrl_tinker_futures") {
		t.Error("tinker may not write its futures")
	}
	if may(p.Publish.Allow, p.Publish.Deny, "$KV.asyncrl_leases.trainer") || may(p.Publish.Allow, p.Publish.Deny, transport.MustSubject("r", transport.TopicTrajectories)) {
		t.Error("tinker may publish pipeline or rollout subjects")
	}
	if got := UserName("n3", []string{placement.Tinker, placement.Engine}); got != "engine+tinker-n3" {
		t.Errorf("UserName = %q", got)
	}
}

func TestPermissionsUnion(t *testing.T) {
	both := Permissions([]string{placement.Engine, placement.Rollout})
	sub := transport.MustSubject("r", transport.TopicTrajectories)
	ack := transport.MustSubject("r", transport.TopicEngines, "e", "ack")
	if !may(both.Publish.Allow, both.Publish.Deny, sub) || !may(both.Publish.Allow, both.Publish.Deny, ack) {
		t.Error("engine+rollout lacks one role's subject")
	}
	if may(both.Publish.Allow, both.Publish.Deny, "$JS.API.STREAM.DELETE.x") {
		t.Error("engine+rollout may delete streams")
	}
	all := Permissions([]string{placement.Engine, placement.Trainer})
	if !may(all.Publish.Allow, all.Publish.Deny, "$JS.API.STREAM.DELETE.x") || !may(all.Publish.Allow, all.Publish.Deny, transport.MustSubject("r", transport.TopicTrain)) {
		t.Error("a trainer node lacks the pipeline's permissions")
	}
	if got := UserName("n2", []string{placement.Rollout, placement.Engine, placement.Engine}); got != "engine+rollout-n2" {
		t.Errorf("UserName = %q", got)
	}
}
