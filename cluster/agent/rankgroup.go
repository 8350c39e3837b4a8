package agent

import (
	"fmt"
	"slices"

	"github.com/asyncrl/asyncrl/actors/trainer/bridge"
	"github.com/asyncrl/asyncrl/cluster"
	"github.com/asyncrl/asyncrl/cluster/node"
	"github.com/asyncrl/asyncrl/cluster/placement"
	"github.com/asyncrl/asyncrl/cluster/rankhost"
	"github.com/asyncrl/asyncrl/config"
)

// A trainer group over several nodes (trainer.exec_nodes > 1,
// docs/protocol.md "Multi-node groups"): every trainer node runs a rank
// host; the term holder's pipeline starts its own exec_ranks ranks and
// the rest through the rank hosts of the other live trainer nodes, by
// name. The holder hosts rank 0 and the rendezvous on its gossip address
// (the address the other members reach it at).

// spansNodes: the run's trainer group spans nodes.
func spansNodes(c config.Config) bool {
	return c.Trainer.Backend == config.BackendExec && c.Trainer.ExecNodes > 1
}

// startRankHost starts this trainer node's rank host when the run's
// group spans nodes.
func (a *Agent) startRankHost() error {
	if !spansNodes(a.cfg.Run) || !a.cfg.has(placement.Trainer) {
		return nil
	}
	h, err := rankhost.StartHost(a.bus, rankhost.HostConfig{Node: a.cfg.Name, Plan: a.base(),
		Spec:  bridge.Spec{Argv: a.cfg.Run.Trainer.Exec, Env: a.cfg.Run.Trainer.ExecEnv},
		Alive: a.isMember, Logger: a.log.With().Str("component", "rank-host").Logger()})
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	a.rankHost = h
	return nil
}

// isMember: name is a live gossip member.
func (a *Agent) isMember(name string) bool {
	if a.ms == nil {
		return false
	}
	return slices.ContainsFunc(a.ms.Members(), func(m cluster.Member) bool { return m.Name == name })
}

// trainerPeers are the other live members with the trainer role, by
// name: the nodes a holder's group places its other ranks on. The
// standby is one of them: it is idle while it waits for the lease, and
// a takeover kills its hosted ranks (a newer token) before its own
// group starts.
func (a *Agent) trainerPeers() []string {
	if a.ms == nil {
		return nil
	}
	var out []string
	for _, m := range a.ms.Members() {
		if m.Name != a.cfg.Name && slices.ContainsFunc(m.Meta.Roles, func(r string) bool { return r == placement.Trainer || r == placement.All }) {
			out = append(out, m.Name)
		}
	}
	slices.Sort(out)
	return out
}

// setRankLinks gives a term's pipeline the other nodes' ranks.
func (a *Agent) setRankLinks(opts *node.Options, termID string, token uint64) {
	if !spansNodes(a.cfg.Run) {
		return
	}
	if a.rankHost != nil {
		// Ranks this node hosted for an earlier holder go first.
		a.rankHost.Fence(token)
	}
	opts.ExecRemote = rankhost.NewLinks(a.bus, rankhost.LinksConfig{Owner: a.cfg.Name, Token: token, Term: termID,
		Plan: a.base(), PerNode: a.cfg.Run.Trainer.ExecRanks, Pick: a.trainerPeers, Alive: a.isMember,
		Wait: a.cfg.Run.Trainer.ExecRendezvousTimeout})
	if host, _, err := a.cfg.gossipAddr(); err == nil {
		opts.ExecRendezvousAddr = host
	}
}
