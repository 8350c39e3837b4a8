package agent

import (
	"context"
	"sync"
	"time"

	"github.com/asyncrl/asyncrl/actors/loop"
	"github.com/asyncrl/asyncrl/cluster/lease"
	"github.com/asyncrl/asyncrl/cluster/lease/contender"
	"github.com/asyncrl/asyncrl/cluster/placement"
	"github.com/asyncrl/asyncrl/cluster/term"
	"github.com/asyncrl/asyncrl/cluster/termwatch"
)

// contend runs the trainer lease: while this node holds it (and its side
// has quorum) it runs the training pipeline; when the lease is lost, the
// side loses quorum or the term fails, the pipeline stops, the lease is
// given up and the node goes back to standby. It contends again after
// the wait the core's StepDown names (longer after failed terms in a row,
// term.Config.Recontend), carrying the count into the next core.
func (a *Agent) contend(ctx context.Context) {
	failed := 0
	for ctx.Err() == nil {
		wait := term.DefaultRecontend
		if a.quorate() {
			if down := a.contendOnce(ctx, failed); down != nil {
				wait, failed = down.Wait, down.FailedInARow
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// contention is one contention for the trainer lease (contendOnce): one
// term.Core, fed the elector's status (LeaseChanged), the quorum's verdict
// (QuorumChanged), Stop when ctx ends, and the inputs of the terms it
// runs. Its loop is the only goroutine that steps the core; it applies
// the core's Ready, the term's effects through the term that runs.
type contention struct {
	a    *Agent
	ctx  context.Context
	core *term.Core
	box  *inbox
	lp   *loop.Loop[term.Input, term.Ready] // built by loop()
	cur  *termRun                           // the term claimed, until it is over (nil: none)
	down *term.StepDown
	// mu guards cancel, the running term's: the elector's and the quorum
	// watch's goroutines end the term's I/O at once on a loss (the core
	// decides the rest when the loop steps the input).
	mu     sync.Mutex
	cancel context.CancelFunc
}

// contendOnce contends for the lease until ctx ends or the core gives the
// lease up (quorum lost, a minority won it, the term failed); failed seeds
// the core's count of failed terms. It returns the core's StepDown (nil:
// ctx ended first).
func (a *Agent) contendOnce(ctx context.Context, failed int) *term.StepDown {
	cfg := a.termConfig()
	cfg.FailedInARow = failed
	core, err := term.New(cfg)
	if err != nil {
		a.log.Error().Err(err).Msg("node: trainer lease")
		return nil
	}
	c := &contention{a: a, ctx: ctx, core: core, box: newInbox()}
	e, ok := c.elector()
	if !ok {
		return nil
	}
	// The elector outlives the loop until the pipeline stopped: resigning
	// while it still runs would let a standby start a term next to it.
	ectx, ecancel := context.WithCancel(context.Background())
	edone := make(chan struct{})
	go func() { defer close(edone); _ = e.Run(ectx) }()
	defer func() { ecancel(); <-edone }()
	defer c.closeTerm()
	qctx, qcancel := context.WithCancel(ctx)
	qdone := make(chan struct{})
	go func() { defer close(qdone); c.watchQuorum(qctx) }()
	defer func() { qcancel(); <-qdone }()
	c.run()
	return c.down
}

// elector opens the trainer lease's elector; false when ctx ended first.
func (c *contention) elector() (*lease.Elector, bool) {
	a := c.a
	lc := lease.DefaultConfig(a.cfg.Run.Run.ID+"-"+placement.Trainer, a.cfg.Name)
	lc.Timing, lc.Replicas, lc.Logger = contender.DefaultTiming(a.cfg.LeaseTTL), a.cfg.Replicas, a.log
	lc.OnChange = func(st contender.Status) {
		// The loss is in the inbox before the term's interrupted I/O can
		// report anything (the core then ignores those late inputs).
		c.box.push(term.LeaseChanged{Leader: st.Leader, Token: st.Token})
		if !st.Leader {
			c.interrupt()
		}
	}
	for {
		e, err := lease.New(c.ctx, a.bus.Conn(), lc)
		if err == nil {
			return e, true
		}
		a.log.Warn().Err(err).Msg("trainer lease: open bucket; retrying")
		select {
		case <-c.ctx.Done():
			return nil, false
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// watchQuorum feeds the core the quorum's verdict when it changes.
func (c *contention) watchQuorum(ctx context.Context) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	last := true // contend starts a contention only on a quorate side
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if q := c.a.quorate(); q != last {
			last = q
			c.box.push(term.QuorumChanged{Train: q})
			if !q {
				c.interrupt()
			}
		}
	}
}

// interrupt ends the running term's I/O, after its cause was pushed.
func (c *contention) interrupt() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancel != nil {
		c.cancel()
	}
}

// run steps the core and applies its Ready on the generic RawNode loop
// (actors/loop) until the core gives the lease up or ctx ends; then the
// node stops (stop).
func (c *contention) run() {
	if c.loop().Run(c.ctx) != nil {
		c.stop()
	}
}

// loop is the contention's RawNode loop: inbox, a tick every 100 ms (the
// running term's poll), Ready applied effect by effect (applyReady).
func (c *contention) loop() *loop.Loop[term.Input, term.Ready] {
	if c.lp == nil {
		c.lp = &loop.Loop[term.Input, term.Ready]{Core: c.core, Inbox: c.box.Inbox, Apply: c.applyReady,
			Every: 100 * time.Millisecond, Poll: c.poll, Done: func() bool { return c.down != nil }}
	}
	return c.lp
}

// stop: the node stops. A step the trainer finished while the pipeline
// stopped is trained: the core saves it (fenced: refused if a newer
// holder has claimed the progress meanwhile), then gives the lease up.
func (c *contention) stop() {
	now := time.Now()
	r := c.cur
	if r != nil {
		r.stopPipeline()
	}
	c.feed(now)
	if r != nil {
		r.feedSteps(now)
	}
	c.core.Step(now, term.Stop{})
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if r != nil {
		r.ctx = sctx
	}
	c.apply()
	// A saved step's marks are written before the next step is saved
	// (and before the core gives the lease up): feed their answers.
	for c.down == nil && sctx.Err() == nil {
		select {
		case <-sctx.Done():
		case <-c.box.Ready():
			c.feed(time.Now())
			c.apply()
		}
	}
	c.a.waitMarks(30 * time.Second) // before the lease is given up
}

// feed steps the core with what the other goroutines reported.
func (c *contention) feed(now time.Time) { c.loop().Feed(now) }

// poll feeds the inbox and the running term's inputs, and ticks the core.
func (c *contention) poll(now time.Time) {
	if c.cur != nil {
		c.cur.poll(now)
		return
	}
	c.feed(now)
	c.core.Tick(now)
}

// newTerm starts term token's shell (its claim is the core's first
// effect for it); the previous term's is closed.
func (c *contention) newTerm(token uint64) {
	c.closeTerm()
	tctx, cancel := context.WithCancel(c.ctx)
	c.mu.Lock()
	c.cancel = cancel
	c.mu.Unlock()
	c.cur = &termRun{a: c.a, token: token, core: c.core, box: c.box, ctx: tctx, applyAll: c.apply}
}

func (c *contention) closeTerm() {
	if c.cur != nil {
		c.cur.close()
		c.cur = nil
	}
	c.interrupt()
}

// apply applies the core's Ready until it has nothing more to say; the
// effects' answers are stepped as they come.
func (c *contention) apply() { c.loop().ApplyAll() }

// applyReady applies one Ready (the loop has advanced the core).
func (c *contention) applyReady(rd term.Ready) {
	for _, e := range rd.Events {
		c.say(e)
	}
	for _, e := range rd.Effects {
		c.do(e)
	}
}

// do applies one effect: the lease's here, the term's by its term.
func (c *contention) do(e term.Effect) {
	switch v := e.(type) {
	case term.StepDown:
		c.down = &v // contendOnce returns: the lease is given up
		return
	case term.ClaimProgress:
		c.newTerm(v.Token)
	}
	if c.cur == nil {
		c.a.log.Debug().Str("node", c.a.cfg.Name).Msgf("term: effect %T with no term", e)
		return
	}
	c.cur.do(c.cur.ctx, e)
	if _, stop := e.(term.StopPipeline); stop && !c.cur.holding() && !c.cur.starting {
		c.closeTerm() // the term is over: its prober and subscriptions go
	}
}

// say prints an event (the lines an operator and the tests read), counts
// the watch's step-downs and keeps the step gauge.
func (c *contention) say(e term.Event) {
	a := c.a
	switch {
	case e.Kind == term.Ignored:
		a.log.Debug().Str("node", a.cfg.Name).Msg("term: " + e.String())
		return
	case e.Kind == term.Resigned && (e.Reason == term.ReasonStopping || e.Reason == term.ReasonQuorum):
		return // a clean stop is no news; a quorum loss said so (QuorumLost)
	case e.Kind == term.TermFailed && e.Reason == term.ReasonStopping:
		a.log.Warn().Str("node", a.cfg.Name).Msg("term: while stopping: " + e.Err)
		return
	case e.Kind == term.LeaderMoved:
		e.Node = a.bus.ServerName()
	case e.Kind == term.Watch && e.Watch.Kind == termwatch.StepDown:
		a.stepdowns.WithLabelValues(string(e.Watch.Reason)).Inc()
	case e.Kind == term.StepDurable && c.cur != nil && c.cur.th != nil:
		c.cur.th.lastNs.Store(time.Now().UnixNano())
	}
	a.termEvent(e)
}
