package node

import (
	"strings"
	"time"

	"github.com/asyncrl/asyncrl/cluster"
	"github.com/asyncrl/asyncrl/cluster/term"
)

// The term core decides the term's remote engines (remote.go): which
// members' engines are registered (MembersChanged → AddEngines,
// RemoveEngines), what LoadWeights each is sent (the publisher's dispatch
// → EngineTarget → SendLoadWeights) and when it is sent again (the
// publisher's acks → EngineServing; Tick → SendLoadWeights). The shell
// applies them to the pipeline's remoteSet.

// attachRemote hands the term loop the pipeline's remote set (startRemote
// calls it, on Start's goroutine).
func (r *termRun) attachRemote(rs *remoteSet) {
	r.rsMu.Lock()
	r.rs = rs
	r.rsMu.Unlock()
}

// remote is the pipeline's remote set; nil until it exists and once the
// pipeline stopped.
func (r *termRun) remote() *remoteSet {
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
			tm.Engines[hostedEngineName(m.Name, k)] = u
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
	for name, v := range rs.serving() {
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
			rs.add(v.Node, v.Engines)
		}
	case term.RemoveEngines:
		if rs != nil {
			for _, name := range v.Names {
				delete(r.acked, name)
			}
			rs.remove(v.Node, v.Names)
		}
	case term.SendLoadWeights:
		if rs != nil {
			rs.send(v.Node, v.Engine, v.Version)
		}
	default:
		return false
	}
	return true
}
