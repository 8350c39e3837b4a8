package sim

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/asyncrl/asyncrl/cluster/ledger/transition"
	"github.com/asyncrl/asyncrl/cluster/term"
	"github.com/asyncrl/asyncrl/messages"
)

// The failover world's durable prompt ledger (issue 37), modelled as
// cluster/node writes it: one entry per term's prompt (the real ids are
// qualified by the term's token, "t<token>/<prompt>"), every transition
// validated by the real transition.Apply. Three writers, as in the agent:
//
//   - the term's mirror: the pipeline's consumed and requeued events, one
//     at a time in order (a subscription handler). It reports a consumed
//     event to the core (PromptConsumed) before its write, and the
//     write's outcome after it (LedgerWrite, Consumed naming the group);
//   - the trained marks (MarkTrained): read, validated, then written — a
//     transition the read refuses is refused at once (Record confirms
//     nothing for an entry it read as absent);
//   - the sweeps (RequeueStale, RequeueNode, Finish): every entry in
//     flight that matches, requeued.
//
// The ledger's stream can lose its leader (FaultLedgerElection, or a
// rollout node's kill when its server led it): for 4–9 s reads are still
// answered by followers (KV direct gets), writes wait for the new leader.
// A refused transition is a violation: it leaves a prompt neither trained
// nor in flight, or hides a second train.

// foEntry is one term's prompt in the durable ledger.
type foEntry struct {
	ent    messages.PromptLedger // its last legal transition
	token  uint64                // the term that consumed it
	prompt *foPrompt
}

func (e *foEntry) inFlight() bool { return e.ent.State == messages.LedgerConsumed }

func entryKey(token uint64, prompt string) string { return term.PromptID(token, prompt) }

// ledgerEvent is one event of a term's pipeline for its mirror.
type ledgerEvent struct {
	pr      *foPrompt
	token   uint64
	state   messages.LedgerState
	attempt int
	group   string
	why     string // a requeue's reason (the log)
}

// election is one leader election of the ledger's stream.
type election struct{ ended bool }

// apply validates ev against its entry with transition.Apply and stores it;
// a legal requeue returns the prompt to the queue (the term that held it
// let it go), a legal train settles it. by is the writer (the entry's
// Sender, as RequeueNode reads it).
func (w *fo) apply(ev ledgerEvent, by string) (transition.Outcome, error) {
	key := entryKey(ev.token, ev.pr.id)
	e := w.entries[key]
	var prev messages.PromptLedger
	if e != nil {
		prev = e.ent
	}
	next := messages.PromptLedger{Header: messages.Header{Sender: by}, PromptID: key, GroupID: ev.group, State: ev.state, Attempt: int32(ev.attempt)}
	got, out, err := transition.Apply(prev, e != nil, next)
	if err != nil || out == transition.Duplicate {
		return out, err
	}
	if e == nil {
		e = &foEntry{token: ev.token, prompt: ev.pr}
		w.entries[key] = e
	}
	e.ent = got
	if ev.state == messages.LedgerRequeued {
		w.requeued++
		w.logf("ledger: %s requeued (%s)", ev.group, ev.why)
		if pr := ev.pr; pr.held == ev.token && pr.attempt == ev.attempt {
			pr.held = 0
			w.queue = append(w.queue, pr.id)
		}
	}
	return out, nil
}

// refused is a violation: the durable ledger refused a transition the
// system asked for.
func (w *fo) refused(what string, ev ledgerEvent, err error) {
	w.fail(InvLedger, "the durable ledger refused %s: %s %s (attempt %d, term %d): %v", what, ev.group, ev.state, ev.attempt, ev.token, err)
}

// ledgerWrite lands fn's write after a round trip, or once the stream has
// a leader again; nothing lands for a node that died meanwhile (its
// request died with it).
func (w *fo) ledgerWrite(n *tnode, fn func()) {
	inc := n.inc
	w.after(w.jitter(msec, 20*msec), "", func() {
		if !n.alive || n.inc != inc {
			return
		}
		if w.electing > 0 {
			w.electWait = append(w.electWait, func() {
				if n.alive && n.inc == inc {
					fn()
				}
			})
			return
		}
		fn()
	})
}

// startElection: the ledger's stream has no leader for d.
func (w *fo) startElection(d time.Duration, why string) {
	el := &election{}
	w.elections = append(w.elections, el)
	w.electing++
	w.logf("ledger: stream leader lost (%s); electing for %v", why, d)
	w.after(d, "", func() { w.endElection(el) })
}

func (w *fo) endElection(el *election) {
	if el.ended {
		return
	}
	el.ended = true
	if w.electing--; w.electing > 0 {
		return
	}
	w.logf("ledger: stream leader elected; %d writes go through", len(w.electWait))
	wait := w.electWait
	w.electWait = nil
	for _, fn := range wait {
		w.after(w.jitter(msec, 20*msec), "", fn)
	}
}

// record hands a pipeline event to its term's mirror (after the bus hop).
// The mirror hears them in the order they were sent (one subscription),
// late while a mirror-lag fault lasts (failover_extra.go).
func (p *pipe) record(ev ledgerEvent) {
	n := p.node
	at := max(n.w.clock+n.w.mirrorDelay(), p.mirrorAt)
	p.mirrorAt = at
	n.later(at-n.w.clock, "", func() {
		p.mq = append(p.mq, ev)
		if !p.mbusy {
			p.mirrorNext()
		}
	})
}

// mirrorNext records the mirror's next event: a consumed one is reported
// to the core first, then written; the write's outcome goes to the core.
func (p *pipe) mirrorNext() {
	n, w := p.node, p.node.w
	if len(p.mq) == 0 {
		p.mbusy = false
		return
	}
	p.mbusy = true
	ev := p.mq[0]
	p.mq = p.mq[1:]
	consumed := ev.state == messages.LedgerConsumed
	if consumed {
		n.step(term.PromptConsumed{Token: ev.token, Attempt: term.PromptAttempt{Prompt: ev.pr.id, Group: ev.group, Attempt: int32(ev.attempt)}})
	}
	w.ledgerWrite(n, func() {
		in := term.LedgerWrite{Token: ev.token}
		if consumed {
			in.Consumed = ev.group
		}
		if _, err := w.apply(ev, n.name); err != nil {
			w.refused(n.name+"'s mirror write", ev, err)
			in.Err, in.Refused = err.Error(), errors.Is(err, transition.ErrIllegalTransition)
		}
		n.step(in)
		p.mirrorNext()
	})
}

// markTrained applies MarkTrained: only for a durable step; each prompt's
// entry is read (a follower answers, even while the stream elects) and
// the mark validated on the read, then written; a mark whose step a
// different step already trained is a second train. Once every mark is
// written the core hears Marked (term tok's).
func (w *fo) markTrained(n *tnode, v term.MarkTrained, tok uint64) {
	w.checks++
	saved, ok := w.store.history[v.Step]
	if !ok || fmt.Sprint(saved) != fmt.Sprint(v.Prompts) {
		w.fail(InvTrainedDurable, "%s marks step %d trained (%v) but the durable progress never held it (held: %v)", n.name, v.Step, groupsOf(v.Prompts), groupsOf(saved))
		return
	}
	by := w.store.historyBy[v.Step]
	left := len(v.Prompts)
	done := func() {
		if left--; left == 0 {
			n.step(term.Marked{Token: tok, Step: v.Step})
		}
	}
	for _, pa := range v.Prompts {
		pr := w.ledger[pa.Prompt]
		if pr.trainedAt != 0 && (pr.trainedAt != v.Step || pr.trainedGroup != pa.Group) {
			w.fail(InvTrainedTwice, "prompt %s trained at step %d (%s) and again at step %d (%s)", pr.id, pr.trainedAt, pr.trainedGroup, v.Step, pa.Group)
			return
		}
		ev := ledgerEvent{pr: pr, token: by, state: messages.LedgerTrained, attempt: int(pa.Attempt), group: pa.Group}
		if err := w.check(ev); err != nil {
			w.refused(fmt.Sprintf("%s's trained mark of step %d", n.name, v.Step), ev, err)
			return
		}
		step := v.Step
		n.marks++
		w.ledgerWrite(n, func() {
			defer n.markDone()
			out, err := w.apply(ev, n.name)
			if err != nil {
				w.refused(fmt.Sprintf("%s's trained mark of step %d", n.name, step), ev, err)
				return
			}
			if out == transition.Applied {
				pr.trainedAt, pr.trainedGroup, pr.held = step, pa.Group, 0
				w.trained++
				w.logf("ledger: %s trained by step %d", pa.Group, step)
			}
			done()
		})
	}
}

// check validates ev against its entry as read now, changing nothing.
func (w *fo) check(ev ledgerEvent) error {
	e := w.entries[entryKey(ev.token, ev.pr.id)]
	var prev messages.PromptLedger
	if e != nil {
		prev = e.ent
	}
	next := messages.PromptLedger{PromptID: entryKey(ev.token, ev.pr.id), GroupID: ev.group, State: ev.state, Attempt: int32(ev.attempt)}
	_, _, err := transition.Apply(prev, e != nil, next)
	return err
}

// sweep requeues every entry in flight that match accepts (RequeueStale,
// RequeueNode, Finish: the ledger's RequeueInFlight), recording by; what
// the dead terms took and never made durable goes back to the queue too
// (a term's prompts that never reached the ledger are no prompts of it).
func (w *fo) sweep(by, why string, match func(*foEntry) bool, stale func(tok uint64) bool) int {
	count := 0
	for _, key := range slices.Sorted(maps.Keys(w.entries)) {
		e := w.entries[key]
		if !e.inFlight() || !match(e) {
			continue
		}
		ev := ledgerEvent{pr: e.prompt, token: e.token, state: messages.LedgerRequeued, attempt: int(e.ent.Attempt), group: e.ent.GroupID, why: why}
		if _, err := w.apply(ev, by); err != nil {
			w.refused(by+"'s requeue sweep", ev, err)
			return count
		}
		count++
	}
	for _, id := range slices.Sorted(maps.Keys(w.ledger)) {
		if pr := w.ledger[id]; pr.held != 0 && stale(pr.held) && !w.inFlight(pr) {
			pr.held = 0
			w.queue = append(w.queue, pr.id)
		}
	}
	return count
}

// sweepStale is RequeueStale's sweep: every entry in flight whose
// qualified prompt id (PromptID) names a token older than token, as
// cluster/node's requeueStale reads it back with PromptTokenOf. An entry
// whose prompt id and group id name different tokens, or not the term
// that consumed it, is a protocol violation (ok false): the sweep would
// requeue the wrong term's prompts.
func (w *fo) sweepStale(by string, token uint64) (count int, ok bool) {
	for _, key := range slices.Sorted(maps.Keys(w.entries)) {
		e := w.entries[key]
		if !e.inFlight() {
			continue
		}
		pt, pok := term.PromptTokenOf(e.ent.PromptID)
		gt, gok := term.PromptTokenOf(e.ent.GroupID)
		if !pok || !gok || pt != gt || pt != e.token {
			w.fail(InvProtocol, "ledger: %s (group %s) in flight names token %d (%v) and %d (%v), consumed by token %d",
				e.ent.PromptID, e.ent.GroupID, pt, pok, gt, gok, e.token)
			return 0, false
		}
	}
	older := func(t uint64) bool { return t < token }
	count = w.sweep(by, fmt.Sprintf("terms before token %d", token), func(e *foEntry) bool {
		t, _ := term.PromptTokenOf(e.ent.PromptID)
		return older(t)
	}, older)
	return count, w.violation == nil
}

// inFlight reports whether some entry of pr is in flight.
func (w *fo) inFlight(pr *foPrompt) bool {
	for _, e := range w.entries {
		if e.prompt == pr && e.inFlight() {
			return true
		}
	}
	return false
}
