package agent

import (
	"fmt"
	"strings"
)

// soakScenarios are the soak's kill scenarios:
//
//   - holder, standby, n3: one SIGKILL of that node (the trainer lease's
//     holder, the other trainer node, the engine + rollout node) at a
//     drawn moment;
//   - two: two nodes killed one after another — the second while the
//     streams the first led elect their leaders (the first is restarted
//     then, or the cluster would be one server short of a quorum), or
//     after the first was restarted and rejoined;
//   - rejoin: a node killed, restarted, rejoined and killed again.
var soakScenarios = []string{"holder", "standby", "n3", "two", "rejoin"}

// The moments a kill can come at. Each but step and election holds the
// trainer lease's holder at a hook (--hold-file, the agent's Hold) until
// the victim is dead, so the kill lands inside that window:
//
//   - step: once the holder made a drawn step durable;
//   - checkpoint-write: a trainer checkpoint's files are uploaded, its
//     manifest (the commit) is not;
//   - save: a step is trained and checkpointed; its progress write is
//     outstanding;
//   - marks: a step's progress is durable, its prompts are not marked
//     trained yet;
//   - publish: a version's weights are in the term's bucket, the engines
//     are not told yet;
//   - election: (the second kill of two) right after the first kill, while
//     the streams the first victim's server led elect new leaders
//     (nats-server waits 4–9 s before it elects); with two of the three
//     servers dead the cluster has no quorum until the first victim is
//     back, which it is right after.
var (
	soakMoments     = []string{"step", "checkpoint-write", "save", "marks", "publish"}
	soakVictims     = []string{"holder", "standby", "n3"}
	soakHoldMoments = map[string]bool{"checkpoint-write": true, "save": true, "marks": true, "publish": true}
)

// soakKill is one kill of a plan.
type soakKill struct {
	// victim: holder, standby, n3, or "same" (the previous kill's node).
	victim string
	moment string
	// step: the moment comes once the run's durable step reached step.
	step int
	// restart: the victim is started again after the kill (and has
	// rejoined before the next kill, unless that kill's moment is
	// election, which comes first).
	restart bool
	// leads: the victim's server is made the leader of the durable
	// prompt ledger's stream first, so its death starts that stream's
	// leader election (4–9 s without writes, reads still answered).
	leads bool
}

func (k soakKill) String() string {
	s := fmt.Sprintf("kill %s at %s after step %d", k.victim, k.moment, k.step)
	if k.moment == "election" {
		// It comes right after the previous kill, whatever step is durable
		// then (soakRun.kill): its drawn step is not when it comes.
		s = fmt.Sprintf("kill %s at election (right after the previous kill)", k.victim)
	}
	if k.leads {
		s += " (it leads the ledger)"
	}
	if k.restart {
		s += ", restart"
	}
	return s
}

// soakPlan is one run: its kills, in order.
type soakPlan struct {
	scenario string
	seed     int64
	steps    int
	kills    []soakKill
}

func (p soakPlan) String() string {
	var ks []string
	for _, k := range p.kills {
		ks = append(ks, k.String())
	}
	return fmt.Sprintf("seed %d: %s", p.seed, strings.Join(ks, "; "))
}

// drawSoakPlan draws scenario's kills from seed. Steps are drawn so every
// kill leaves steps for the run to go on after it; the two-kill
// scenarios run 2.5 times as many steps (a restarted node takes tens of
// seconds to rejoin and catch up, and the second kill comes after).
func drawSoakPlan(scenario string, seed int64, steps int, moments []string) soakPlan {
	rng := soakRand(scenario, seed)
	if scenario == "two" || scenario == "rejoin" {
		steps = steps * 5 / 2
	}
	p := soakPlan{scenario: scenario, seed: seed, steps: steps}
	first := 2 + rng.Intn(max(1, steps/3))
	moment := func() string { return moments[rng.Intn(len(moments))] }
	switch scenario {
	case "holder", "standby", "n3":
		p.kills = []soakKill{{victim: scenario, moment: moment(), step: first}}
	case "two":
		a := soakKill{victim: soakVictims[rng.Intn(len(soakVictims))], moment: moment(), step: first, restart: true}
		b := soakKill{victim: soakVictims[rng.Intn(len(soakVictims))], moment: moment()}
		if rng.Intn(2) == 0 {
			b.moment = "election"
		}
		for b.victim == a.victim {
			b.victim = soakVictims[rng.Intn(len(soakVictims))]
		}
		b.step = first + 2 + rng.Intn(max(1, steps/4))
		p.kills = []soakKill{a, b}
	case "rejoin":
		a := soakKill{victim: soakVictims[rng.Intn(len(soakVictims))], moment: moment(), step: first, restart: true}
		b := soakKill{victim: "same", moment: moment(), step: first + 2 + rng.Intn(max(1, steps/4)), restart: rng.Intn(2) == 0}
		p.kills = []soakKill{a, b}
	default:
		panic("soak: unknown scenario " + scenario)
	}
	for i := range p.kills {
		p.kills[i].leads = rng.Intn(2) == 0
	}
	return p
}
