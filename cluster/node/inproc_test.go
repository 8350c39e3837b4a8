package node

import (
	"testing"

	"github.com/asyncrl/asyncrl/internal/inproc"
)

// The node's own hops — rollout actors → router → built-in engines — go
// in process (internal/inproc), without a socket per turn (issue 22); the
// engines and the router leave inproc.Default when the node stops.
func TestTurnsStayInProcess(t *testing.T) {
	cfg := smallConfig(t, 2)
	var engineURL string
	n, s := runNode(t, cfg, func(n *Node) {
		engineURL = n.EngineURLs()[0]
		if inproc.Default.Lookup(hostPort(engineURL)) == nil || inproc.Default.Lookup(hostPort(n.routerURL)) == nil {
			t.Error("engine or router not registered in process")
		}
	})
	if s.Steps != 2 || s.TrajectoriesLost != 0 {
		t.Fatalf("%d steps, %d lost", s.Steps, s.TrajectoriesLost)
	}
	ro, up := n.rolloutUp.Stats(), n.routerUp.Stats()
	if ro.Served == 0 || ro.Passed != 0 || up.Served == 0 || up.Passed != 0 {
		t.Errorf("rollout → router %+v, router → engines %+v: want every call in process", ro, up)
	}
	if inproc.Default.Lookup(hostPort(engineURL)) != nil || inproc.Default.Lookup(hostPort(n.routerURL)) != nil {
		t.Error("a stopped node's engine or router is still registered")
	}
}

func hostPort(u string) string { return u[len("http://"):] }
