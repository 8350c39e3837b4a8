package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/asyncrl/asyncrl/cluster/term"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport"
)

// The holder announces its term on the base run's plan (TermAnnounce:
// asyncrl.<run>.control.term); rollout nodes report their groups in flight
// on the term's (RolloutStatus: asyncrl.<term>.control.rollouts.<node>).

// The agent's terms (termRun) leave these decisions to the term core:
// the pipeline hands it its router's URL (TermEngines.RouterListening), the
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
