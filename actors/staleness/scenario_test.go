package staleness

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/internal/golden"
)

// TestScenarios replays testdata/*.scenario through a Controller and
// compares the transcript with the .golden file next to it. Commands (one
// per line, '#' comments; @T sets the time to T seconds):
//
//	config S W B policy [measure]                   (measure: scheduled by default)
//	acquire PROMPT @T        accept GROUP VERSION|- @T
//	filter GROUP @T          abort GROUP @T         check GROUP @T
//	step N @T                tick @T                metrics
func TestScenarios(t *testing.T) {
	golden.Run(t, "testdata/*.scenario", ".scenario", runScenario)
}

func runScenario(t *testing.T, path string) string {
	var out strings.Builder
	var c *Controller
	now := t0
	for _, cmd := range golden.Commands(t, path) {
		line, text, f := cmd.Line, cmd.Text, cmd.Fields
		if last := f[len(f)-1]; strings.HasPrefix(last, "@") {
			sec, err := strconv.Atoi(last[1:])
			if err != nil {
				t.Fatalf("line %d: bad time %q", line, last)
			}
			now = t0.Add(time.Duration(sec) * time.Second)
			f = f[:len(f)-1]
		}
		arg := func(i int) string {
			if i >= len(f) {
				t.Fatalf("line %d: %q needs %d arguments", line, text, i)
			}
			return f[i]
		}
		num := func(i int) int64 {
			n, err := strconv.ParseInt(arg(i), 10, 64)
			if err != nil {
				t.Fatalf("line %d: %v", line, err)
			}
			return n
		}
		fmt.Fprintf(&out, "> %s\n", text)
		var res string
		switch f[0] {
		case "config":
			var err error
			var m Measure
			if len(f) > 5 {
				m = Measure(f[5])
			}
			c, err = New(Config{MaxStalenessSteps: num(1), NumParallelGenerationWorkers: num(2), MiniBatchSize: num(3), StalePolicy: StalePolicy(arg(4)), Measure: m})
			res = fmt.Sprintf("err=%v", err)
		case "acquire":
			a, ok := c.TryAcquire(arg(1), now)
			res = fmt.Sprintf("ok=%t %+v", ok, a)
		case "accept":
			v := UnknownVersion
			if arg(2) != "-" {
				v = num(2)
			}
			res = fmt.Sprintf("err=%v", c.Accept(arg(1), v, now))
		case "filter":
			res = fmt.Sprintf("err=%v", c.Filter(arg(1), now))
		case "abort":
			res = fmt.Sprintf("err=%v", c.Abort(arg(1), now))
		case "check":
			d, err := c.CheckForTraining(arg(1), now)
			res = fmt.Sprintf("%v err=%v", d, err)
		case "step":
			ok, err := c.StepDone(num(1), now)
			res = fmt.Sprintf("advanced=%t err=%v", ok, err)
		case "tick":
			c.Tick(now)
		case "metrics":
			m := c.Metrics()
			res = fmt.Sprintf("step=%d version=%d submitted=%d running=%d accepted=%d filtered=%d aborted=%d stale=%d trained=%d violations=%d capacity=%d\n"+
				"  staleness mean=%.3f max=%d hist=%v engine_idle=%v engine_blocked=%v trainer_idle=%v",
				m.Step, m.Version, m.Submitted, m.Running, m.Accepted, m.Filtered, m.Aborted, m.StaleDropped, m.Trained, m.Violations, m.Capacity,
				m.StalenessMean, m.StalenessMax, m.StalenessHistogram, m.EngineIdle, m.EngineBlocked, m.TrainerIdle)
		default:
			t.Fatalf("line %d: unknown command %q", line, f[0])
		}
		if res != "" {
			fmt.Fprintf(&out, "%s\n", res)
		}
		if c != nil {
			for _, rq := range c.Drain() {
				fmt.Fprintf(&out, "  effect: %v\n", rq)
			}
		}
	}
	return out.String()
}
