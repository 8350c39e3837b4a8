package agent

import (
	"strings"
	"time"

	"github.com/asyncrl/asyncrl/cluster"
	"github.com/asyncrl/asyncrl/cluster/discovery"
	"github.com/asyncrl/asyncrl/cluster/enginehost"
	"github.com/asyncrl/asyncrl/cluster/node"
	"github.com/asyncrl/asyncrl/cluster/term"
)

// The term core decides the term's remote engines (remote.go): which
// members' engines are registered (MembersChanged → AddEngines,
// RemoveEngines), what LoadWeights each is sent (the publisher's dispatch
// → EngineTarget → SendLoadWeights) and when it is sent again (the
// publisher's acks → EngineServing; Tick → SendLoadWeights). The shell
// applies them to the pipeline's node.EngineSet.

// termEngines is the term's side of its pipeline's remote engines
// (TermEngines): each call becomes an input of the core, pushed to the
// term's inbox, or an event line; none blocks.
type termEngines struct {
	r     *termRun
	token uint64
	// ready: the engines routable so far (RoutingChanged runs under the
	// discovery watcher's lock, one call at a time).
	ready map[string]bool
}

// Attach hands the term loop the pipeline's engine set (on Start's
// goroutine).
func (t *termEngines) Attach(rs *node.EngineSet) {
	t.r.rsMu.Lock()
	t.r.rs = rs
	t.r.rsMu.Unlock()
}

// RouterListening: the core announces the term (Announce) with the URL.
func (t *termEngines) RouterListening(url string) {
	t.r.box.push(term.RouterListening{Token: t.token, URL: url})
}

// Target: the publisher's target for engine, the core's EngineTarget.
func (t *termEngines) Target(engine string, version int64) {
	t.r.box.push(term.EngineTarget{Token: t.token, Engine: engine, Version: version})
}

// RoutingChanged prints every change to the router's table ("routing
// add http://…", "routing remove http://…"); health flips with every
// version an engine still has to load, so only the first time an engine
// becomes routable is printed ("routing ready http://…").
func (t *termEngines) RoutingChanged(ch discovery.Change) {
	switch {
	case ch.Op == discovery.OpAdd || ch.Op == discovery.OpRemove:
		delete(t.ready, ch.URL)
		t.r.a.event("routing %s", ch)
	case ch.Op == discovery.OpHealth && ch.Healthy && !t.ready[ch.URL]:
		t.ready[ch.URL] = true
		t.r.a.event("routing ready %s", ch.URL)
	}
}

// Event prints the engines' notable events (waiting for an engine).
func (t *termEngines) Event(format string, args ...any) { t.r.a.event(format, args...) }

// remote is the pipeline's remote set; nil until it exists and once the
// pipeline stopped.
func (r *termRun) remote() *node.EngineSet {
	if r.stopped {
		return nil
	}
	r.rsMu.Lock()
	defer r.rsMu.Unlock()
	return r.rs
}

// memberEngines is what the core knows of m: the engines its host
// advertises, under their cluster-wide names — none until the pipeline's
// remote set exists, so the core registers no engine the shell could not.
func (r *termRun) memberEngines(m cluster.Member, remote bool) term.Member {
	tm := term.Member{Name: m.Name}
	if !remote {
		return tm
	}
	for k, u := range m.Meta.Endpoints {
		if u != "" && strings.HasPrefix(k, "engine-") {
			if tm.Engines == nil {
				tm.Engines = map[string]string{}
			}
			tm.Engines[enginehost.EngineName(m.Name, k)] = u
		}
	}
	return tm
}

// feedServing steps the core with the engines' new acks.
func (r *termRun) feedServing(now time.Time) {
	rs := r.remote()
	if rs == nil {
		return
	}
	if r.acked == nil {
		r.acked = map[string]int64{}
	}
	for name, v := range rs.Serving() {
		if last, ok := r.acked[name]; !ok || v > last {
			r.acked[name] = v
			r.core.Step(now, term.EngineServing{Token: r.token, Engine: name, Version: v})
		}
	}
}

// doEngines applies the engines' effects; false for any other effect.
func (r *termRun) doEngines(e term.Effect) bool {
	rs := r.remote()
	switch v := e.(type) {
	case term.AddEngines:
		if rs != nil {
			for name := range v.Engines {
				delete(r.acked, name) // its new engine holds nothing yet
			}
			rs.Add(v.Node, v.Engines)
		}
	case term.RemoveEngines:
		if rs != nil {
			for _, name := range v.Names {
				delete(r.acked, name)
			}
			rs.Remove(v.Node, v.Names)
		}
	case term.SendLoadWeights:
		if rs != nil {
			rs.Send(v.Node, v.Engine, v.Version)
		}
	default:
		return false
	}
	return true
}
