package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/asyncrl/asyncrl/cluster/internal/retry"
	"github.com/asyncrl/asyncrl/cluster/ledger"
	"github.com/asyncrl/asyncrl/cluster/term"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport"
)

// mirror copies one term's prompt ledger from the bus into the durable
// ledger, validated transition by transition, and tells the term's core
// which prompt attempt each group runs (PromptConsumed, so a trained step
// can name its prompts) and how each write went (LedgerWrite: for the
// term's watch, and — Consumed — so that no step names a prompt whose
// consumed transition is not durable yet).
type mirror struct {
	sub      transport.Subscription
	mu       sync.Mutex
	recorded int
	last     time.Time // when the last event was recorded
	busy     bool      // an event is being recorded
	once     sync.Once
	conn     interface{ FlushTimeout(time.Duration) error }
}

// mirrorWithin bounds the durable write of one pipeline event, retries
// included: above any leader election of the ledger's stream (4–9 s) on
// a loaded machine. The mirror records events one at a time, in order,
// so the events behind a write wait for it; a consumed transition that
// fails for good ends the term (its step could never be saved).
const mirrorWithin = time.Minute

// recordAttempt bounds one try of a durable-ledger write (a read and a
// compare-and-set): a request lost in a leader election is tried again.
const recordAttempt = 5 * time.Second

// stop waits until the ledger events still on the wire have been
// recorded (no event for quiet, at most 5s), then unsubscribes.
func (m *mirror) stop() {
	const quiet = 300 * time.Millisecond
	m.once.Do(func() {
		_ = m.conn.FlushTimeout(2 * time.Second)
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			m.mu.Lock()
			idle := !m.busy && time.Since(m.last) >= quiet
			m.mu.Unlock()
			if idle {
				break
			}
			time.Sleep(quiet / 4)
		}
		_ = m.sub.Unsubscribe()
	})
}

// wait blocks (at most within) until the event the mirror was recording
// when it stopped is recorded. The run's end sweeps what is still in
// flight: a write that outlasted stop (a stream's election) and landed
// after the sweep left its prompt in flight at the end (the soak,
// standby-06-seed1005: "in_flight 1").
func (m *mirror) wait(within time.Duration) {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		m.mu.Lock()
		busy := m.busy
		m.mu.Unlock()
		if !busy {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// mirrorLedger subscribes to the pipeline's PromptLedger subject (the
// term plan's Ledger). Prompt
// ids are qualified by the term ("t<token>/"): each term draws its prompts
// afresh, so the ids of two terms must not collide; the sender is this
// node, so a standby can requeue what it held in flight (RequeueNode).
func (a *Agent) mirrorLedger(subject string, token uint64, report func(term.Input)) (*mirror, error) {
	m := &mirror{conn: a.bus.Conn()}
	sub, err := a.bus.Subscribe(subject, func(msg *transport.Msg) {
		v, err := messages.Decode(msg.Data)
		if err != nil {
			return
		}
		ev, ok := v.(messages.PromptLedger)
		if !ok {
			return
		}
		m.mu.Lock()
		m.busy = true
		m.mu.Unlock()
		defer func() {
			m.mu.Lock()
			m.busy, m.last = false, time.Now()
			m.mu.Unlock()
		}()
		ev.PromptID = term.PromptID(token, ev.PromptID)
		ev.Sender = a.cfg.Name
		if ev.State == messages.LedgerTrained {
			// A prompt counts as trained only together with the durable
			// step that trained it: the holder marks a step's prompts after
			// its fenced SaveProgress (markTrained), and the next holder
			// does so for the last durable step. The controller's own
			// trained event comes before that write, so a holder deposed in
			// between would leave trained marks for a step no durable
			// weights hold, and the next term would train as many prompts
			// again (issue 20: "trained 100" for 24 steps × 4).
			return
		}
		consumed := ev.State == messages.LedgerConsumed
		if consumed {
			report(term.PromptConsumed{Token: token, Attempt: term.PromptAttempt{Prompt: ev.PromptID, Group: ev.GroupID, Attempt: ev.Attempt}})
		}
		ctx, cancel := context.WithTimeout(context.Background(), mirrorWithin)
		defer cancel()
		err = a.recordEvent(ctx, ev)
		w := term.LedgerWrite{Token: token}
		if consumed {
			w.Consumed = ev.GroupID
		}
		switch {
		case errors.Is(err, ledger.ErrIllegalTransition):
			a.refuse(ev, err) // the ledger answered: a refusal is not ill health
			w.Err, w.Refused = err.Error(), true
		case err != nil:
			a.log.Warn().Err(err).Str("prompt", ev.PromptID).Str("state", string(ev.State)).Msg("durable ledger write failed")
			w.Err = err.Error()
		}
		m.mu.Lock()
		m.recorded++
		m.mu.Unlock()
		report(w)
	})
	if err != nil {
		return nil, fmt.Errorf("node: ledger mirror: %w", err)
	}
	m.sub = sub
	if err := a.bus.Conn().Flush(); err != nil { // the server knows the subscription
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("node: ledger mirror: %w", err)
	}
	return m, nil
}

// LedgerCounts counts the durable ledger's prompts by state.
type LedgerCounts struct {
	Trained, Filtered, Requeued, InFlight int
	// Refused counts the transitions the durable ledger refused during the
	// run, on any node (ledger.Refusals; at least those this node saw):
	// pipeline events and trained marks alike. A run that lost nothing
	// refused none.
	Refused int
}

// refuse counts a transition the durable ledger refused and keeps it in
// the run's durable state, so the run's summary counts it whichever node
// finishes (issue 37: a refused trained mark left a trained prompt
// untrained and the summary said "refused 0").
func (a *Agent) refuse(ev messages.PromptLedger, err error) {
	a.refused.Add(1)
	a.log.Error().Err(err).Str("prompt", ev.PromptID).Str("state", string(ev.State)).Int32("attempt", ev.Attempt).
		Msg("the durable ledger refused a transition")
	a.event("ledger refused %s %s (attempt %d, group %s): %v", ev.PromptID, ev.State, ev.Attempt, ev.GroupID, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := ledger.RefusalOf(ev, a.cfg.Name, err, time.Now())
	if err := retry.Do(ctx, 30*time.Second, func() error { return a.led.RecordRefusal(ctx, r) }); err != nil {
		a.log.Warn().Err(err).Str("prompt", ev.PromptID).Msg("a refused transition not kept in the ledger (counted by this node only)")
	}
}

// reportLedger writes the durable ledger's final counts as an event.
func (a *Agent) reportLedger(ctx context.Context) error {
	all, err := a.led.Entries(ctx)
	if err != nil {
		return err
	}
	refusals, err := a.led.Refusals(ctx)
	if err != nil {
		return err
	}
	var c LedgerCounts
	for _, e := range all {
		switch e.State {
		case messages.LedgerTrained:
			c.Trained++
		case messages.LedgerFiltered:
			c.Filtered++
		case messages.LedgerRequeued:
			c.Requeued++
		case messages.LedgerConsumed:
			c.InFlight++
		}
	}
	c.Refused = max(len(refusals), int(a.refused.Load()))
	for _, r := range refusals {
		a.event("ledger refused by %s: %s %s (attempt %d, group %s): %s", r.Node, r.PromptID, r.State, r.Attempt, r.GroupID, r.Err)
	}
	a.event("ledger prompts %d trained %d filtered %d requeued %d in_flight %d refused %d",
		len(all), c.Trained, c.Filtered, c.Requeued, c.InFlight, c.Refused)
	a.mu.Lock()
	a.final = &c
	a.mu.Unlock()
	return nil
}

// FinalLedger returns the durable ledger's counts as this node saw them
// when it finished the run; ok is false unless this node finished it.
func (a *Agent) FinalLedger() (c LedgerCounts, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.final == nil {
		return LedgerCounts{}, false
	}
	return *a.final, true
}

// requeueAll requeues every prompt still in flight, whoever consumed it.
func (a *Agent) requeueAll(ctx context.Context) error {
	all, err := a.led.Entries(ctx)
	if err != nil {
		return err
	}
	senders := map[string]bool{}
	for _, e := range all {
		if e.State == messages.LedgerConsumed {
			senders[e.Sender] = true
		}
	}
	for s := range senders {
		if _, err := a.led.RequeueNode(ctx, s, a.cfg.Name); err != nil {
			return err
		}
	}
	return nil
}

// recordEvent records ev in the durable ledger. The pipeline's ledger
// events can arrive out of order when a publish was retried (a clustered
// stream electing a leader after a node died): a prompt's next attempt
// consumed before the previous attempt's requeue, and that requeue late.
// Both are repaired here, since the controller consumes attempt a+1 only
// after it requeued attempt a; anything else the ledger refuses stays an
// error (a second train among them).
func (a *Agent) recordEvent(ctx context.Context, ev messages.PromptLedger) error {
	// Transient failures (a stream electing its leader after a node died)
	// are retried until ctx ends (the caller's bound); the handler runs
	// events one at a time, so the order is kept. Each try is bounded: a
	// write sent while the stream had no leader was never answered, and
	// held the mirror for its whole 15 s (issue 37: that consumed
	// transition was lost, and every event behind it waited).
	for {
		actx, cancel := context.WithTimeout(ctx, recordAttempt)
		err := a.recordOnce(actx, ev)
		cancel()
		if err == nil || errors.Is(err, ledger.ErrIllegalTransition) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (a *Agent) recordOnce(ctx context.Context, ev messages.PromptLedger) error {
	_, _, err := a.led.Record(ctx, ev)
	if err == nil || !errors.Is(err, ledger.ErrIllegalTransition) {
		return err
	}
	cur, ok, gerr := a.led.Get(ctx, ev.PromptID)
	if gerr != nil {
		return gerr // transient: retried
	}
	if !ok {
		return err
	}
	switch {
	case ev.State == messages.LedgerRequeued && ev.Attempt < cur.Attempt:
		return nil // superseded: the repair below recorded it
	case ev.State == messages.LedgerConsumed && ev.Attempt <= cur.Attempt && cur.State != messages.LedgerConsumed:
		// A late copy of a consumed event (its publish was retried through
		// a stream's election): the attempt was settled since. Superseded,
		// not refused — a refused consumed transition ends the term.
		return nil
	case ev.State == messages.LedgerConsumed && cur.State == messages.LedgerConsumed && cur.Attempt < ev.Attempt:
		rq := cur
		rq.State, rq.Sender = messages.LedgerRequeued, a.cfg.Name
		if _, _, err := a.led.Record(ctx, rq); err != nil {
			return err
		}
		_, _, err = a.led.Record(ctx, ev)
		return err
	}
	return err
}

// markTrained records step's prompt attempts as trained in the durable
// ledger: the only writer of trained marks (the mirror drops the
// controller's), called once the step is durable. Marking twice (the
// holder and, after its death, the next holder) is a duplicate.
//
// A prompt whose mark the ledger refuses (it ended otherwise) does not
// stop the others; it is counted and kept as a refusal (refuse), and not
// retried. done, when set, skips the prompts already written by an
// earlier try and records those written by this one.
func (a *Agent) markTrained(ctx context.Context, step int64, prompts []ledger.PromptAttempt, done map[string]bool) error {
	for _, pa := range prompts {
		if done[pa.PromptID] {
			continue
		}
		ev := messages.PromptLedger{Header: messages.Header{Sender: a.cfg.Name}, PromptID: pa.PromptID,
			GroupID: pa.GroupID, State: messages.LedgerTrained, Step: step, Attempt: pa.Attempt}
		err := a.recordEvent(ctx, ev)
		switch {
		case errors.Is(err, ledger.ErrIllegalTransition):
			a.refuse(ev, err)
		case err != nil:
			return fmt.Errorf("prompt %s: %w", pa.PromptID, err)
		}
		if done != nil {
			done[pa.PromptID] = true
		}
	}
	return nil
}
