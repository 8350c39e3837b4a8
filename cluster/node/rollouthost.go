package node

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/actors/rollout"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/internal/wiring"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/tasks"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/natsbus"
)

// rolloutHost is the rollout role of asyncrl node on a node that does not
// hold the trainer lease: rollout actors that join the current term's
// prompt queue group, send their turns to the term's router and store
// their groups in the term's trajectory buffer, like the holder's own. The
// term comes from the holder's TermAnnounce (the largest token wins; a
// node's own term is skipped: its pipeline runs its own actors). The host
// reports its groups in flight on every take and once a second
// (RolloutStatus), so the holder requeues them if this node dies.
type rolloutHost struct {
	node    string
	baseRun string
	// replicas of the term's trajectory buffer (the agent's --replicas:
	// the holder creates it with as many).
	replicas int
	cfg      config.Config
	task     tasks.Task
	bus      *natsbus.Bus
	log      zerolog.Logger
	event    func(format string, args ...any)
	sub      transport.Subscription
	httpc    *http.Client
	terms    chan messages.TermAnnounce

	mu     sync.Mutex
	token  uint64
	term   string
	actors []*rollout.Actor
	// retry: following term failed (its trajectory buffer or actors could
	// not start, e.g. while JetStream elects a leader); its next
	// announcement tries again instead of being skipped as already known.
	retry bool

	// reportMu orders the reports: they come from the ticker and from
	// every actor's take at once, and one whose snapshot is older must
	// not reach the holder after a newer one (the holder keeps the last,
	// so a group taken in between would not be requeued if the node died).
	reportMu sync.Mutex

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startRolloutHost(cfg config.Config, node string, replicas int, bus *natsbus.Bus, log zerolog.Logger, event func(string, ...any)) (*rolloutHost, error) {
	task, err := buildTask(cfg)
	if err != nil {
		return nil, err
	}
	subj, err := termAnnounceSubject(cfg.Run.ID)
	if err != nil {
		return nil, fmt.Errorf("%w: run.id: %w", ErrAgentConfig, err)
	}
	h := &rolloutHost{node: node, baseRun: cfg.Run.ID, cfg: cfg, task: task, bus: bus, replicas: replicas,
		log: log.With().Str("component", "rollout-host").Logger(), event: event,
		httpc: &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 256}},
		terms: make(chan messages.TermAnnounce, 16)}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	if h.sub, err = bus.Subscribe(subj, h.onTerm); err != nil {
		return nil, fmt.Errorf("node: rollout host: %w", err)
	}
	h.wg.Go(h.loop)
	return h, nil
}

func (h *rolloutHost) onTerm(m *transport.Msg) {
	ta, err := messages.DecodeAs[messages.TermAnnounce](m.Data)
	if err != nil || ta.RunID != h.baseRun || ta.Term == "" || ta.Router == "" {
		return
	}
	h.mu.Lock()
	newer := ta.Token > h.token || ta.Token == h.token && h.retry
	h.mu.Unlock()
	if !newer {
		return // the announcement of the term it follows (once a second), or a deposed holder's
	}
	select {
	case h.terms <- ta:
	default:
	}
}

// loop switches to each newer term and reports the groups in flight.
func (h *rolloutHost) loop() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-h.ctx.Done():
			return
		case ta := <-h.terms:
			h.follow(ta)
		case <-t.C:
			h.report()
		}
	}
}

// follow stops the actors of the previous term (their running episodes
// are reported aborted to it) and, unless this node is the new holder,
// starts actors for the new one.
func (h *rolloutHost) follow(ta messages.TermAnnounce) {
	h.mu.Lock()
	if ta.Token < h.token || ta.Token == h.token && !h.retry {
		h.mu.Unlock()
		return
	}
	retrying := ta.Token == h.token
	old := h.actors
	h.actors, h.token, h.term, h.retry = nil, ta.Token, ta.Term, false
	h.mu.Unlock()
	h.stopActors(old)
	if ta.Sender == h.node {
		return // this node's pipeline runs its own rollout actors
	}
	tcfg := h.cfg
	tcfg.Run.ID = ta.Term
	s, err := subjectsFor(ta.Term)
	if err != nil {
		h.cannotFollow(ta, retrying, err)
		return
	}
	ctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
	defer cancel()
	groups, err := h.bus.Stream(ctx, groupStreamConfig(ta.Term, s, h.replicas))
	if err != nil {
		h.cannotFollow(ta, retrying, err)
		return
	}
	count, ecfg, supportK := rolloutSetup(tcfg, 0)
	vocab, err := wiring.Vocabulary(tcfg.Engines)
	if err != nil {
		h.cannotFollow(ta, retrying, err)
		return
	}
	ecfg.Vocab = vocab
	gen := &rollout.HTTPClient{BaseURL: ta.Router, Model: h.cfg.Engines.ServedModelName, Client: h.httpc}
	var actors []*rollout.Actor
	for i := range count {
		name := h.node + "-rollout-" + strconv.Itoa(i)
		a, err := startRolloutActor(h.bus, gen, tcfg, h.task, name, ecfg, supportK, s, groups, h.log, h.reportOnTake)
		if err != nil {
			h.stopActors(actors)
			h.cannotFollow(ta, retrying, err)
			return
		}
		actors = append(actors, a)
	}
	h.mu.Lock()
	if h.term == ta.Term {
		h.actors = actors
		actors = nil
	}
	h.mu.Unlock()
	h.stopActors(actors) // a newer term arrived meanwhile
	h.event("rollouts follow term %s (%d actors, router %s)", ta.Term, count, ta.Router)
}

// cannotFollow reports that the actors could not join ta's term (once,
// not on every retry) and lets its next announcement try again.
func (h *rolloutHost) cannotFollow(ta messages.TermAnnounce, retrying bool, err error) {
	h.mu.Lock()
	if h.token == ta.Token {
		h.retry = true
	}
	h.mu.Unlock()
	if !retrying && h.ctx.Err() == nil {
		h.event("rollouts cannot follow term %s: %v (trying again on its next announcement)", ta.Term, err)
	}
}

// reportOnTake reports at once when an actor takes a group.
func (h *rolloutHost) reportOnTake(string, string) { h.report() }

// report publishes the groups in flight on the followed term.
func (h *rolloutHost) report() {
	h.reportMu.Lock()
	defer h.reportMu.Unlock()
	h.mu.Lock()
	term, actors := h.term, h.actors
	h.mu.Unlock()
	if term == "" || len(actors) == 0 {
		return
	}
	st := messages.RolloutStatus{Header: messages.Header{RunID: term, Sender: h.node}}
	for _, a := range actors {
		g, p := a.InFlight()
		st.GroupIDs, st.PromptIDs = append(st.GroupIDs, g...), append(st.PromptIDs, p...)
	}
	subj, err := rolloutStatusSubject(term, h.node)
	if err != nil {
		return
	}
	data, err := messages.Encode(st)
	if err == nil {
		ctx, cancel := context.WithTimeout(h.ctx, 2*time.Second)
		err = h.bus.Publish(ctx, subj, data)
		cancel()
	}
	if err != nil && h.ctx.Err() == nil {
		h.log.Debug().Err(err).Msg("rollout host: status not sent")
	}
}

func (h *rolloutHost) stopActors(as []*rollout.Actor) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for _, a := range as {
		if err := a.Stop(ctx); err != nil {
			h.log.Warn().Err(err).Msg("rollout host: actor stop")
		}
	}
}

// stop stops the actors (their running episodes are reported aborted to
// the term) and the subscription. Idempotent.
func (h *rolloutHost) stop() {
	if h.sub != nil {
		_ = h.sub.Unsubscribe()
	}
	h.cancel()
	h.wg.Wait()
	h.mu.Lock()
	as := h.actors
	h.actors = nil
	h.mu.Unlock()
	h.stopActors(as)
	h.httpc.CloseIdleConnections()
}
