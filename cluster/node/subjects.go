package node

import (
	"github.com/asyncrl/asyncrl/transport"
)

// The run's subjects are its transport.Plan (transport/subjects.go
// documents the table); the node keeps the plan of its run (Node.subj) and
// the cluster agent of its term (cluster/agent) and builds no subject
// itself.

// nodeAck is where a one-process run's node acknowledges a version to a
// remote trainer (the engines of the node as one: transport.NodeEngine).
func nodeAck(p transport.RunPlan) (string, error) {
	return p.Engine(transport.NodeEngine, transport.EngineAck)
}
