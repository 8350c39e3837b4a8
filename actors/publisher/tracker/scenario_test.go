package tracker

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/asyncrl/asyncrl/internal/scenario"
)

// The tracker's stories are scenario files in testdata/ (like cluster/term's
// and actors/controller's): calls in, what each returned and the state out.
// `go test ./actors/publisher/tracker -run TestScenarios -rewrite` rewrites
// the expected output after a deliberate change; the diff is the change.
// One command per call:
//
//	new [base=B] [maxlag=L]          New(Config{BaseBytes: B, MaxLag: L})
//	publish v=V [delta=D] [full=F] [nodelta] [await]
//	                                 Publish (PublishAwait with await); prints
//	                                 the commands or the error
//	await v=V                        Await
//	failed e=E v=V                   Failed
//	ready                            Ready (then Advance): the router's new
//	                                 minimum and the settled publishes
//	join e=E from=V                  Join (from=-1: no weights); its command
//	fetching e=E v=V                 Fetching
//	ack e=E v=V                      Ack: "applied", "ignored" or the error
//	leave e=E                        Leave
//	full v=V bytes=N                 AddFull
//	plan e=E                         Plan
//	state                            target, min routable, router min,
//	                                 ignored acks, and
//	                                 each engine's status
func TestScenarios(t *testing.T) {
	scenario.Walk(t, "testdata", func(t *testing.T, path string) {
		var tr *Tracker
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd == "new" {
				var cfg Config
				d.MaybeScanArgs(t, "base", &cfg.BaseBytes)
				d.MaybeScanArgs(t, "maxlag", &cfg.MaxLag)
				var err error
				if tr, err = New(cfg); err != nil {
					return "error: " + err.Error()
				}
				return "ok"
			}
			if tr == nil {
				d.Fatalf(t, "%s before new", d.Cmd)
			}
			return call(t, d, tr)
		})
	})
}

// call runs one command on tr and prints its outcome.
func call(t *testing.T, d *datadriven.TestData, tr *Tracker) string {
	var e string
	var v int64
	d.MaybeScanArgs(t, "e", &e)
	d.MaybeScanArgs(t, "v", &v)
	switch d.Cmd {
	case "publish":
		in := VersionInfo{Version: v, NoDelta: d.HasArg("nodelta")}
		d.MaybeScanArgs(t, "delta", &in.DeltaBytes)
		d.MaybeScanArgs(t, "full", &in.FullBytes)
		publish := tr.Publish
		if d.HasArg("await") {
			publish = tr.PublishAwait
		}
		cmds, err := publish(in)
		return commands(cmds, err)
	case "await":
		return outcome("ok", tr.Await(v))
	case "failed":
		return outcome("ok", tr.Failed(e, v))
	case "ready":
		rd := tr.Ready()
		tr.Advance()
		return rd.String()
	case "join":
		var from int64
		d.ScanArgs(t, "from", &from)
		cmd, err := tr.Join(e, from)
		return commands([]Command{cmd}, err)
	case "fetching":
		return outcome("ok", tr.Fetching(e, v))
	case "ack":
		ok, err := tr.Ack(e, v)
		return outcome(map[bool]string{true: "applied", false: "ignored"}[ok], err)
	case "leave":
		tr.Leave(e)
		return "ok"
	case "full":
		var n int64
		d.ScanArgs(t, "bytes", &n)
		return outcome("ok", tr.AddFull(v, n))
	case "plan":
		p, err := tr.Plan(e)
		return outcome(p.String(), err)
	case "state":
		return state(tr)
	}
	d.Fatalf(t, "unknown command %s", d.Cmd)
	return ""
}

func outcome(ok string, err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	return ok
}

func commands(cmds []Command, err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	var b strings.Builder
	for _, c := range cmds {
		fmt.Fprintf(&b, "%s: %s\n", c.Engine, c.Plan)
	}
	if b.Len() == 0 {
		return "no commands"
	}
	return b.String()
}

func state(tr *Tracker) string {
	var b strings.Builder
	fmt.Fprintf(&b, "target %d min routable %d router min %d ignored acks %d\n", tr.Target(), tr.MinRoutable(), tr.RouterMin(), tr.IgnoredAcks())
	for _, st := range tr.Engines() {
		fmt.Fprintf(&b, "%s serving %d fetching %d routable %v\n", st.Engine, st.Serving, st.Fetching, st.Routable)
	}
	return b.String()
}
