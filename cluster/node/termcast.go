package node

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/asyncrl/asyncrl/cluster/term"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport"
)

// The holder announces its term on the base run's plan (TermAnnounce:
// asyncrl.<run>.control.term); rollout nodes report their groups in flight
// on the term's (RolloutStatus: asyncrl.<term>.control.rollouts.<node>).

// termCast is the holder's side of the nodes that run rollout actors for
// its term: it announces the term (run id, token, router URL) once per
// tick, remembers what every other node last said it holds in flight, and
// when such a node leaves membership reports those groups aborted, so the
// controller requeues them (a dead node cannot report its own aborts).
type termCast struct {
	n     *Node
	node  string
	token uint64
	tick  time.Duration
	sub   transport.Subscription

	mu     sync.Mutex
	status map[string][]groupRef // node -> groups it last reported in flight
	// seen: nodes this holder's membership listed at some point. A node
	// that reports before the holder's gossip has heard of it (it joined
	// through another member) has not left: its groups are not aborted.
	seen map[string]bool
	// requeued counts the groups reported aborted for nodes that left.
	requeued prometheus.Counter
}

type groupRef struct{ group, prompt string }

// startTermCast subscribes to the term's rollout reports and starts the
// announcements.
func (n *Node) startTermCast(ctx context.Context) error {
	rc := n.opts.Remote
	tc := &termCast{n: n, node: rc.Node, token: termToken(rc.BaseRun, n.cfg.Run.ID), tick: time.Second,
		status: map[string][]groupRef{}, seen: map[string]bool{},
		requeued: prometheus.NewCounter(prometheus.CounterOpts{Name: "asyncrl_node_dead_node_groups_requeued_total",
			Help: "Groups a node had in flight when it left the cluster, reported aborted by the trainer's holder so they are requeued."})}
	if err := n.reg.Register(tc.requeued); err != nil {
		return fmt.Errorf("node: term metrics: %w", err)
	}
	sub, err := n.bus.Subscribe(n.subj.RolloutStatusAll, tc.onStatus)
	if err != nil {
		return fmt.Errorf("node: rollout reports: %w", err)
	}
	tc.sub = sub
	for _, m := range rc.Members() {
		tc.seen[m.Name] = true
	}
	n.termCast = tc
	tc.announce(ctx)
	n.remoteWG.Go(func() { tc.run(ctx) })
	return nil
}

func (tc *termCast) onStatus(m *transport.Msg) {
	st, err := messages.DecodeAs[messages.RolloutStatus](m.Data)
	if err != nil || st.RunID != tc.n.cfg.Run.ID || st.Sender == "" || len(st.GroupIDs) != len(st.PromptIDs) {
		return
	}
	refs := make([]groupRef, len(st.GroupIDs))
	for i := range st.GroupIDs {
		refs[i] = groupRef{st.GroupIDs[i], st.PromptIDs[i]}
	}
	tc.mu.Lock()
	tc.status[st.Sender] = refs
	tc.mu.Unlock()
}

func (tc *termCast) run(ctx context.Context) {
	t := time.NewTicker(tc.tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			tc.announce(ctx)
			tc.reconcile()
		}
	}
}

func (tc *termCast) announce(ctx context.Context) {
	base, err := transport.Plan(tc.n.opts.Remote.BaseRun)
	if err != nil {
		return
	}
	subj := base.TermAnnounce
	data, err := messages.Encode(messages.TermAnnounce{Header: messages.Header{RunID: tc.n.opts.Remote.BaseRun, Sender: tc.node},
		Term: tc.n.cfg.Run.ID, Token: tc.token, Router: tc.n.routerURL})
	if err == nil {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err = tc.n.bus.Publish(cctx, subj, data)
		cancel()
	}
	if err != nil && ctx.Err() == nil {
		tc.n.opts.Logger.Debug().Err(err).Msg("node: term announcement not sent")
	}
}

// reconcile reports the groups of every node that reported some and is no
// longer a member as aborted.
func (tc *termCast) reconcile() {
	live := map[string]bool{}
	for _, m := range tc.n.opts.Remote.Members() {
		live[m.Name] = true
	}
	tc.mu.Lock()
	for node := range live {
		tc.seen[node] = true
	}
	var gone []string
	lost := map[string][]groupRef{}
	for node, refs := range tc.status {
		if !live[node] && tc.seen[node] {
			gone = append(gone, node)
			lost[node] = refs
			delete(tc.status, node)
		}
	}
	tc.mu.Unlock()
	slices.Sort(gone)
	for _, node := range gone {
		tc.abort(node, lost[node])
	}
}

// abort publishes one EpisodeAborted per group (the controller requeues a
// group on its first abort and ignores the rest, and a group whose
// GroupReady reached the buffer first is accepted or filtered as usual).
func (tc *termCast) abort(node string, refs []groupRef) {
	if len(refs) == 0 {
		return
	}
	tc.requeued.Add(float64(len(refs)))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, r := range refs {
		data, err := messages.Encode(messages.EpisodeAborted{Header: messages.Header{RunID: tc.n.cfg.Run.ID, Sender: tc.node},
			PromptID: r.prompt, GroupID: r.group, Reason: "node " + node + " left the cluster"})
		if err == nil {
			err = tc.n.bus.Publish(ctx, tc.n.subj.Aborted, data)
		}
		if err != nil {
			tc.n.opts.Logger.Warn().Err(err).Str("group", r.group).Msg("node: a dead node's group not reported aborted")
		}
	}
	if ev := tc.n.opts.Remote.Event; ev != nil {
		ev("requeued %d groups %s had in flight", len(refs), node)
	}
}

func (tc *termCast) close() {
	if tc.sub != nil {
		_ = tc.sub.Unsubscribe()
	}
}

// The agent's terms (termRun) leave these decisions to the term core:
// the pipeline hands it its router's URL (RemoteEngines.Cast), the
// rollout reports and the membership are the core's inputs
// (RolloutStatus, MembersChanged), and its Announce and AbortGroups are
// applied here.

// subscribeRollouts feeds the core the rollout nodes' reports of term.
func (r *termRun) subscribeRollouts(termName string, token uint64) (transport.Subscription, error) {
	tp, err := transport.Plan(termName)
	if err != nil {
		return nil, fmt.Errorf("node: rollout reports: %w", err)
	}
	sub, err := r.a.bus.Subscribe(tp.RolloutStatusAll, func(m *transport.Msg) {
		st, err := messages.DecodeAs[messages.RolloutStatus](m.Data)
		if err != nil || st.RunID != termName || st.Sender == "" || len(st.GroupIDs) != len(st.PromptIDs) {
			return
		}
		refs := make([]term.GroupRef, len(st.GroupIDs))
		for i := range st.GroupIDs {
			refs[i] = term.GroupRef{Group: st.GroupIDs[i], Prompt: st.PromptIDs[i]}
		}
		r.box.push(term.RolloutStatus{Token: token, Node: st.Sender, Groups: refs})
	})
	if err != nil {
		return nil, fmt.Errorf("node: rollout reports: %w", err)
	}
	return sub, nil
}

// members feeds the core the live membership.
func (r *termRun) members(now time.Time) {
	ms := r.a.ms.Members()
	remote := r.remote() != nil
	out := make([]term.Member, 0, len(ms))
	for _, m := range ms {
		out = append(out, r.memberEngines(m, remote))
	}
	r.core.Step(now, term.MembersChanged{Members: out})
}

// announce applies Announce: the term (run id, token, router URL) on the
// run's term subject, for the engine and rollout hosts to follow.
func (r *termRun) announce(ctx context.Context, v term.Announce) {
	a := r.a
	subj := a.base().TermAnnounce
	data, err := messages.Encode(messages.TermAnnounce{Header: messages.Header{RunID: a.cfg.Run.Run.ID, Sender: a.cfg.Name},
		Term: v.Term, Token: v.Token, Router: v.Router})
	if err == nil {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err = a.bus.Publish(cctx, subj, data)
		cancel()
	}
	if err != nil && ctx.Err() == nil {
		a.log.Debug().Err(err).Msg("node: term announcement not sent")
	}
}

// abortGroups applies AbortGroups: one EpisodeAborted per group of a node
// that left (the controller requeues a group on its first abort and
// ignores the rest, and a group whose GroupReady reached the buffer first
// is accepted or filtered as usual).
func (r *termRun) abortGroups(v term.AbortGroups) {
	a := r.a
	if r.requeued != nil {
		r.requeued.Add(float64(len(v.Groups)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, g := range v.Groups {
		data, err := messages.Encode(messages.EpisodeAborted{Header: messages.Header{RunID: r.term, Sender: a.cfg.Name},
			PromptID: g.Prompt, GroupID: g.Group, Reason: "node " + v.Node + " left the cluster"})
		if err == nil {
			err = a.bus.Publish(ctx, r.subj.Aborted, data)
		}
		if err != nil {
			a.log.Warn().Err(err).Str("group", g.Group).Msg("node: a dead node's group not reported aborted")
		}
	}
}
