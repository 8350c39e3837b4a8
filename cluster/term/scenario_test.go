package term

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/asyncrl/asyncrl/internal/scenario"
)

// The core's scenarios live in testdata/*.txt, one story per file, in the
// style of etcd-io/raft's interaction tests: inputs in, the core's Ready
// out. `go test ./cluster/term -run TestScenarios -rewrite` rewrites the
// expected output after a deliberate change — then read the diff: it is
// the behaviour change. The commands:
//
//	new            a fresh core at 2026-12-01 00:00 UTC; the block's line
//	               sets Config fields over testConfig (node n1, run "run",
//	               10 steps, checkpoints, stall 1m, unhealthy 20s); prints
//	               "ok" or New's error
//	define         each line "name Type fields…" names a value for $name
//	step           each line is an Input; prints, for each input that
//	               produced something, "> Type" and its effects and events
//	tick <d>       moves the clock by d and ticks
//	state          the core's String, Holding, Quorate, Durable, Failing
//	remote <e>     whether engine e is a remote engine of the running term
//
// The value language of the lines is package internal/scenario's.
func TestScenarios(t *testing.T) {
	scenario.Walk(t, "testdata", func(t *testing.T, path string) {
		s := &scenarioRun{p: scenario.New(scenarioTypes)}
		datadriven.RunTest(t, path, s.run)
	})
}

var scenarioTypes = scenario.Registry{
	"Progress": Progress{}, "PromptAttempt": PromptAttempt{}, "GroupRef": GroupRef{}, "Member": Member{},
	"LeaseChanged": LeaseChanged{}, "QuorumChanged": QuorumChanged{}, "MembersChanged": MembersChanged{},
	"ProgressObserved": ProgressObserved{}, "Stop": Stop{}, "ProgressClaimed": ProgressClaimed{},
	"NodeRequeued": NodeRequeued{}, "StaleRequeued": StaleRequeued{}, "RouterListening": RouterListening{},
	"PipelineStarted": PipelineStarted{}, "StartPhase": StartPhase{}, "Failed": Failed{},
	"StepTrained": StepTrained{}, "CheckpointSaved": CheckpointSaved{}, "ProgressSaved": ProgressSaved{},
	"SaveFailed": SaveFailed{}, "PromptConsumed": PromptConsumed{}, "LedgerWrite": LedgerWrite{},
	"Probe": Probe{}, "RolloutStatus": RolloutStatus{}, "EngineTarget": EngineTarget{},
	"EngineServing": EngineServing{}, "Marked": Marked{},
}

type scenarioRun struct {
	p   *scenario.Parser
	c   *Core
	now time.Time
}

func (s *scenarioRun) run(t *testing.T, d *datadriven.TestData) string {
	if d.Cmd != "new" && d.Cmd != "define" && s.c == nil {
		d.Fatalf(t, "%s before new", d.Cmd)
	}
	var b strings.Builder
	switch d.Cmd {
	case "new":
		cfg := testConfig()
		if err := s.p.Fields(&cfg, d.Input); err != nil {
			d.Fatalf(t, "%v", err)
		}
		c, err := New(cfg)
		if err != nil {
			s.c = nil
			return "error: " + err.Error()
		}
		s.c, s.now = c, t0
		return "ok"
	case "define":
		for _, line := range scenario.Lines(d.Input) {
			if err := s.p.Define(line); err != nil {
				d.Fatalf(t, "%v", err)
			}
		}
		return ""
	case "step":
		for _, line := range scenario.Lines(d.Input) {
			v, err := s.p.Line(line)
			if err != nil {
				d.Fatalf(t, "%v", err)
			}
			in, ok := v.(Input)
			if !ok {
				d.Fatalf(t, "%s is not an Input", line)
			}
			s.c.Step(s.now, in)
			if r := s.ready(); r != "" {
				fmt.Fprintf(&b, "> %s\n%s", reflect.TypeOf(in).Name(), r)
			}
		}
	case "tick":
		dur, err := time.ParseDuration(arg(t, d))
		if err != nil {
			d.Fatalf(t, "%v", err)
		}
		s.now = s.now.Add(dur)
		s.c.Tick(s.now)
		b.WriteString(s.ready())
	case "state":
		tok, holding := s.c.Holding()
		p, ok := s.c.Durable()
		fmt.Fprintf(&b, "%s\nholding %v token %d quorate %v\n", s.c, holding, tok, s.c.Quorate())
		if ok {
			fmt.Fprintf(&b, "durable step %d version %d checkpoint %s\n", p.Step, p.Version, p.Checkpoint)
		}
		if f := s.c.Failing(); len(f) > 0 {
			fmt.Fprintf(&b, "failing %v\n", f)
		}
	case "remote":
		fmt.Fprintf(&b, "%v", s.c.Remote(arg(t, d)))
	default:
		d.Fatalf(t, "unknown command %s", d.Cmd)
	}
	return b.String()
}

func (s *scenarioRun) ready() string {
	r := s.c.Ready().String()
	s.c.Advance()
	return r
}

func arg(t *testing.T, d *datadriven.TestData) string {
	if len(d.CmdArgs) != 1 {
		d.Fatalf(t, "%s wants one argument", d.Cmd)
	}
	return d.CmdArgs[0].Key
}
