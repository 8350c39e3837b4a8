package controller

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/asyncrl/asyncrl/actors/effect"
	"github.com/asyncrl/asyncrl/actors/filter"
	"github.com/asyncrl/asyncrl/actors/trainer/assemble"
	"github.com/asyncrl/asyncrl/internal/scenario"
	"github.com/asyncrl/asyncrl/messages"
)

// The controller's stories are scenario files in testdata/ (like
// cluster/term's): messages in, the core's sends, timers and logs out.
// `go test ./actors/controller -run TestScenarios -rewrite` rewrites the
// expected output after a deliberate change; the diff is the change. The
// commands:
//
//	new b=B w=W s=S [limit=N] [seed=N] [sampling=MODE]
//	               a fresh core: testConfig(B, W, S) (subjects P prompts,
//	               T train, C capacity, L ledger, S settled), a source of
//	               prompts p1, p2, … (limit: that many), Config.Rand from
//	               seed, dynamic sampling in MODE (filter.DefaultConfig,
//	               2 samples per prompt); the block's line sets further
//	               Config fields;
//	               prints "ok" or New's error
//	start          Core.Start
//	step           each line a message; GroupReady takes group, prompt,
//	               oldest, rewards and masks (one "011" string per
//	               trajectory, default 011) and carries a real Arrow
//	               batch of one trajectory per reward
//	tick <d> <name>   Core.Tick at d after the start for timer name
//	stats          Stats, InFlight and the staleness counters
//
// Each command prints the core's effects: "send <subject> <message>" (a
// message's batch references printed without their bytes, then each
// trajectory of the mini-batch the trainer assembles from a TrainBatch's
// references as "  traj <id> r=<reward> mask=<loss mask>"),
// "timer <name> at +<d>" or "timer <name> cancel", and "log <level>
// <rate key>: <message> <fields>". Metrics are left out.
func TestScenarios(t *testing.T) {
	scenario.Walk(t, "testdata", func(t *testing.T, path string) {
		s := &ctlScenario{p: scenario.New(ctlTypes)}
		datadriven.RunTest(t, path, s.run)
	})
}

// readyLine is how a scenario writes a GroupReady.
type readyLine struct {
	Group, Prompt string
	Oldest        int64
	Rewards       []float64
	Masks         []string
}

var ctlTypes = scenario.Registry{
	"GroupReady": readyLine{}, "GroupFiltered": messages.GroupFiltered{},
	"EpisodeAborted": messages.EpisodeAborted{}, "StepDone": messages.StepDone{},
}

type ctlScenario struct {
	p *scenario.Parser
	c *Core
}

func (s *ctlScenario) run(t *testing.T, d *datadriven.TestData) string {
	if d.Cmd != "new" && s.c == nil {
		d.Fatalf(t, "%s before new", d.Cmd)
	}
	switch d.Cmd {
	case "new":
		return s.new(t, d)
	case "start":
		s.c.Start(t0)
	case "step":
		var b strings.Builder
		for _, line := range scenario.Lines(d.Input) {
			m := s.message(t, d, line)
			s.c.Step(t0, m)
			if out := s.drain(t); out != "" {
				fmt.Fprintf(&b, "> %s\n%s", m.Kind(), out)
			}
		}
		return b.String()
	case "tick":
		if len(d.CmdArgs) != 2 {
			d.Fatalf(t, "tick wants <duration> <timer>")
		}
		dur, err := time.ParseDuration(d.CmdArgs[0].Key)
		if err != nil {
			d.Fatalf(t, "%v", err)
		}
		s.c.Tick(t0.Add(dur), d.CmdArgs[1].Key)
	case "stats":
		st, m := s.c.Stats(), s.c.Staleness()
		return fmt.Sprintf("stats %+v\nin flight %d\nstaleness %+v\n", st, s.c.InFlight(), m)
	default:
		d.Fatalf(t, "unknown command %s", d.Cmd)
	}
	return s.drain(t)
}

func (s *ctlScenario) new(t *testing.T, d *datadriven.TestData) string {
	var b, w, st, limit int64
	var seed uint64
	d.ScanArgs(t, "b", &b)
	d.ScanArgs(t, "w", &w)
	d.ScanArgs(t, "s", &st)
	d.MaybeScanArgs(t, "limit", &limit)
	cfg := testConfig(b, w, st)
	var mode string
	if d.MaybeScanArgs(t, "sampling", &mode) {
		cfg.Sampling = filter.DefaultConfig()
		cfg.Sampling.Mode, cfg.Sampling.NSamplesPerPrompt = filter.Mode(mode), 2
	}
	if err := s.p.Fields(&cfg, d.Input); err != nil {
		d.Fatalf(t, "%v", err)
	}
	if d.MaybeScanArgs(t, "seed", &seed) {
		cfg.Rand = rand.New(rand.NewPCG(seed, seed))
	}
	c, err := New(cfg, &seqSource{limit: int(limit)})
	s.c = c
	if err != nil {
		return "error: " + err.Error()
	}
	return "ok"
}

func (s *ctlScenario) message(t *testing.T, d *datadriven.TestData, line string) messages.Message {
	v, err := s.p.Line(line)
	if err != nil {
		d.Fatalf(t, "%v", err)
	}
	r, ok := v.(readyLine)
	if !ok {
		return v.(messages.Message)
	}
	masks := make([][]uint8, len(r.Rewards))
	for i := range masks {
		mask := "011"
		if i < len(r.Masks) {
			mask = r.Masks[i]
		}
		for _, c := range mask {
			masks[i] = append(masks[i], uint8(c-'0'))
		}
	}
	return groupReadyMasks(t, r.Group, r.Prompt, r.Oldest, masks, r.Rewards...)
}

// drain prints the core's effects.
func (s *ctlScenario) drain(t *testing.T) string {
	var b strings.Builder
	eff := s.c.Drain()
	for _, snd := range eff.Sends {
		fmt.Fprintf(&b, "send %s %s\n", snd.Subject, withoutBytes(snd.Msg))
		printBatch(t, &b, snd.Msg)
	}
	for _, tm := range eff.Timers {
		if tm.Cancel {
			fmt.Fprintf(&b, "timer %s cancel\n", tm.Name)
		} else {
			fmt.Fprintf(&b, "timer %s at +%s\n", tm.Name, tm.At.Sub(t0))
		}
	}
	for _, l := range eff.Logs {
		fmt.Fprintf(&b, "log %s %s: %s", levelName(l.Level), l.RateKey, l.Msg)
		for _, f := range l.Fields {
			fmt.Fprintf(&b, " %s=%v", f.Key, f.Value)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func levelName(l effect.LogLevel) string {
	return map[effect.LogLevel]string{effect.LevelDebug: "debug", effect.LevelInfo: "info", effect.LevelWarn: "warn", effect.LevelError: "error"}[l]
}

var batchRefType = reflect.TypeFor[messages.BatchRef]()

// withoutBytes is m's line with its batch references' bytes, sizes and
// checksums blanked: they depend on the Arrow encoding, not on the
// controller (printBatch prints what the bytes hold); the run and sender
// every message carries are left out.
func withoutBytes(m messages.Message) string {
	blank := func(r messages.BatchRef) messages.BatchRef { return messages.BatchRef{Subject: r.Subject, Seq: r.Seq} }
	if tb, ok := m.(messages.TrainBatch); ok {
		tb.Groups = slices.Clone(tb.Groups)
		for i := range tb.Groups {
			tb.Groups[i].Batch = blank(tb.Groups[i].Batch)
		}
		m = tb
	}
	v := reflect.New(reflect.TypeOf(m)).Elem()
	v.Set(reflect.ValueOf(m))
	for i := range v.NumField() {
		if f := v.Field(i); f.Type() == batchRefType {
			f.Set(reflect.ValueOf(blank(f.Interface().(messages.BatchRef))))
		}
	}
	return strings.Replace(fmt.Sprint(v.Interface()), `run="r" sender="ctl" `, "", 1)
}

// printBatch prints each trajectory of the mini-batch a TrainBatch's
// (inline) references assemble to — what the trainer trains, ZeroMask
// flags and replace mode's copies applied by the trainer's own assembly.
func printBatch(t *testing.T, b *strings.Builder, m messages.Message) {
	tb, ok := m.(messages.TrainBatch)
	if !ok || len(tb.Groups) == 0 {
		return
	}
	data := make([][]byte, len(tb.Groups))
	for i, g := range tb.Groups {
		p, err := g.Batch.Resolve(g.GroupID, nil)
		if err != nil {
			t.Fatalf("TrainBatch of step %d: %v", tb.Step, err)
		}
		data[i] = p
	}
	batch, _, err := assemble.Batch(tb, data)
	if err != nil {
		t.Fatalf("TrainBatch of step %d: %v", tb.Step, err)
	}
	for i := range batch.Len() {
		tr, err := batch.Trajectory(i)
		if err != nil {
			t.Fatal(err)
		}
		mask := make([]byte, len(tr.LossMask))
		for j, x := range tr.LossMask {
			mask[j] = '0' + x
		}
		fmt.Fprintf(b, "  traj %s r=%g mask=%s\n", tr.ID, tr.Reward, mask)
	}
}
