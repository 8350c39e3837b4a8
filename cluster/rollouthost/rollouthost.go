// Package rollouthost is the rollout role of asyncrl node on a node that
// does not hold the trainer lease: rollout actors that follow the
// holder's term. It also builds the rollout actors of a run for the
// holder's own pipeline (Setup, StartActor, GroupStream).
package rollouthost

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
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/tasks"
	"github.com/asyncrl/asyncrl/tasks/chatenv"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/natsbus"
	"github.com/asyncrl/asyncrl/wiring"
)

// Host is the rollout role of asyncrl node on a node that does not
// hold the trainer lease: rollout actors that join the current term's
// prompt queue group, send their turns to the term's router and store
// their groups in the term's trajectory buffer, like the holder's own. The
// term comes from the holder's TermAnnounce (the largest token wins; a
// node's own term is skipped: its pipeline runs its own actors). The host
// reports its groups in flight on every take and once a second
// (RolloutStatus), so the holder requeues them if this node dies.
type Host struct {
	c       Config
	node    string
	baseRun string
	cfg     config.Config
	task    tasks.Task
	vocab   rollout.Vocabulary
	chat    rollout.ChatFormat // rollout.chat_template (nil = plain text episodes)
	bus     *natsbus.Bus
	log     zerolog.Logger
	event   func(format string, args ...any)
	sub     transport.Subscription
	httpc   *http.Client
	terms   chan messages.TermAnnounce

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

// Config configures a Host.
type Config struct {
	// Run is the cluster run's config (Run.ID its base id); Task its task.
	Run  config.Config
	Task tasks.Task
	// Node is this node's name. (The host binds the trajectory buffer the
	// holder made with the agent's --replicas, so it needs no count.)
	Node   string
	Bus    *natsbus.Bus
	Logger zerolog.Logger
	// Event receives one line per notable event.
	Event func(format string, args ...any)
}

// The host's subjects are the plans' (transport.Plan): the holder's
// TermAnnounce on the base run's, a term's actors and this node's
// RolloutStatus on the term's.

// Start subscribes to the term announcements; the actors start with the
// first term of another node.
func Start(c Config) (*Host, error) {
	h := &Host{c: c, node: c.Node, baseRun: c.Run.Run.ID, cfg: c.Run, task: c.Task, bus: c.Bus,
		log: c.Logger.With().Str("component", "rollout-host").Logger(), event: c.Event,
		// At most 1,024 connections to the term's router: turns beyond them
		// wait for a free one instead of each taking a socket (issue 22).
		httpc: &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 256, MaxConnsPerHost: 1024}},
		terms: make(chan messages.TermAnnounce, 16)}
	// The model's vocabulary is the run's, whichever term follows: read
	// once, and a bad tokenizer fails the start, not every term.
	// A Hugging Face model's run (model section) tokenises with the
	// model's tokenizer, as the holder's own rollouts do
	// (wiring.RunTokenizer): the checkpoint directory is found or
	// written from the run's seed like on every other node.
	modelDir, _, err := wiring.ModelDir(c.Run)
	if err != nil {
		return nil, fmt.Errorf("node: rollout host: %w", err)
	}
	tokDir := wiring.RunTokenizer(c.Run, modelDir)
	if h.vocab, err = wiring.VocabularyFrom(tokDir); err != nil {
		return nil, fmt.Errorf("node: rollout host: %w", err)
	}
	if h.chat, err = wiring.ChatFormat(c.Run.Rollout, tokDir); err != nil {
		return nil, fmt.Errorf("node: rollout host: %w", err)
	}
	base, err := transport.Plan(c.Run.Run.ID)
	if err != nil {
		return nil, fmt.Errorf("node: rollout host: run.id: %w", err)
	}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	if h.sub, err = c.Bus.Subscribe(base.TermAnnounce, h.onTerm); err != nil {
		return nil, fmt.Errorf("node: rollout host: %w", err)
	}
	h.wg.Go(h.loop)
	return h, nil
}

// Actors are the rollout actors of the term the host follows.
func (h *Host) Actors() []*rollout.Actor {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*rollout.Actor(nil), h.actors...)
}

func (h *Host) onTerm(m *transport.Msg) {
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
func (h *Host) loop() {
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
func (h *Host) follow(ta messages.TermAnnounce) {
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
	s, err := transport.Plan(ta.Term)
	if err != nil {
		h.cannotFollow(ta, retrying, err)
		return
	}
	ctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
	defer cancel()
	// Bind, never create or update: the holder made the buffer (with its
	// duplicate window), and a rollout node's bus user may not touch
	// streams (cluster/access).
	groups, err := h.bus.BindStream(ctx, s.GroupStream)
	if err != nil {
		h.cannotFollow(ta, retrying, err)
		return
	}
	count, ecfg, supportK := Setup(tcfg, 0)
	ecfg.Vocab = h.vocab
	ecfg.Chat = h.chat
	proto, err := Protocol(h.cfg.Engines)
	if err != nil {
		h.cannotFollow(ta, retrying, err)
		return
	}
	gen := &rollout.HTTPClient{BaseURL: ta.Router, Model: h.cfg.Engines.ServedModelName, Client: h.httpc,
		SupportFromLogprobs: h.cfg.Rollout.SupportFromLogprobs, Protocol: proto}
	var actors []*rollout.Actor
	for i := range count {
		name := h.node + "-rollout-" + strconv.Itoa(i)
		a, err := StartActor(h.bus, gen, tcfg, h.task, name, ecfg, supportK, s, groups, h.log, h.reportOnTake, nil)
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
func (h *Host) cannotFollow(ta messages.TermAnnounce, retrying bool, err error) {
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
func (h *Host) reportOnTake(string, string) { h.report() }

// report publishes the groups in flight on the followed term.
func (h *Host) report() {
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
	p, err := transport.Plan(term)
	var subj string
	if err == nil {
		subj, err = p.RolloutStatus(h.node)
	}
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

func (h *Host) stopActors(as []*rollout.Actor) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for _, a := range as {
		if err := a.Stop(ctx); err != nil {
			h.log.Warn().Err(err).Msg("rollout host: actor stop")
		}
	}
}

// Stop stops the actors (their running episodes are reported aborted to
// the term) and the subscription. Idempotent.
func (h *Host) Stop() {
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

// StartActor starts one rollout actor of the run in cfg (its plan s),
// sending its turns through gen; onTake and onReport (rollout.Config's
// OnTake and OnReport) may be nil.
func StartActor(bus transport.Bus, gen rollout.Generator, cfg config.Config, task tasks.Task, name string,
	ecfg rollout.EpisodeConfig, supportK int, s transport.RunPlan, groups transport.Stream, log zerolog.Logger,
	onTake func(group, prompt string), onReport func(group string, ready bool)) (*rollout.Actor, error) {
	return rollout.Start(bus, gen, ActorConfig(cfg, task, name, ecfg, supportK, s, groups, log, onTake, onReport))
}

// ActorConfig is the rollout.Config StartActor starts an actor with, for
// a caller that sets a field the run's config does not carry (cluster/node's
// Options.StoreConcurrency) before rollout.Start.
func ActorConfig(cfg config.Config, task tasks.Task, name string, ecfg rollout.EpisodeConfig, supportK int,
	s transport.RunPlan, groups transport.Stream, log zerolog.Logger,
	onTake func(group, prompt string), onReport func(group string, ready bool)) rollout.Config {
	return rollout.Config{RunID: cfg.Run.ID, Name: name, Task: task, Episode: ecfg,
		Concurrency: cfg.Rollout.Concurrency, SupportK: supportK, Logger: log.With().Str("actor", name).Logger(),
		Subjects:    rollout.Subjects{Prompts: s.Prompts, Groups: s.Trajectories, Aborted: s.Aborted},
		GroupStream: groups, OnTake: onTake, OnReport: onReport}
}

// groupMaxAge: see GroupStream.
const groupMaxAge = 24 * time.Hour

// GroupStream is the run's trajectory buffer: finished groups wait in
// JetStream until the sampling actor has judged them, and a kept group
// stays there until its step is trained — the control messages carry a
// reference to it and the trainer fetches it (issue 31). Limits retention,
// not a work queue: an acked group must stay readable. The sampling actor
// deletes each group once the controller's ledger settled it (trained,
// filtered, requeued), so the buffer holds the groups in flight, not
// every group judged. MaxAge only reclaims a deletion that was lost (a
// full deletion queue, a restarted sampling actor), and it is also the
// longest a kept group may wait for its step: a day, far beyond any
// staleness bound times a step's time (an hour was within reach of slow
// steps on large models: 10-minute steps at bound 4 wait 40 minutes, and
// a group past it fails its step with trainer.ErrBatchMissing). In memory: it
// only has to outlive a restart of the actors, not of every server; on a
// clustered bus it has replicas copies (--replicas), so the loss of the
// server that led it costs a leader election, not the buffer. Rollout
// hosts on other nodes bind it as the holder made it (never create or
// update it: their bus users may not). Made while a server
// is down, it has the copies the servers up can hold (MinReplicas).
func GroupStream(p transport.RunPlan, replicas int) transport.StreamConfig {
	return transport.StreamConfig{Name: p.GroupStream, Subjects: []string{p.Trajectories}, MaxAge: groupMaxAge, Memory: true,
		Replicas: max(1, replicas), MinReplicas: 1}
}

// Setup is what every rollout actor of a run shares: how many
// actors (override, or enough for W groups of n trajectories at once:
// ceil(W·n/concurrency)), the episode config and the support size.
func Setup(cfg config.Config, override int) (count int, ecfg rollout.EpisodeConfig, supportK int) {
	ro := cfg.Rollout
	count = override
	if count <= 0 {
		want := cfg.Trainer.NumParallelGenerationWorkers * ro.NSamplesPerPrompt
		count = max(1, (want+ro.Concurrency-1)/ro.Concurrency)
	}
	ecfg = rollout.DefaultEpisodeConfig()
	ecfg.MaxTurns, ecfg.MaxTokens = ro.MaxTurns, ro.MaxTokens
	ecfg.MaxSeqLen = model.DefaultConfig().MaxSeqLen
	if cfg.Engines.MaxModelLen > 0 {
		ecfg.MaxSeqLen = min(ecfg.MaxSeqLen, cfg.Engines.MaxModelLen)
	}
	ecfg.Temperature, ecfg.TopP, ecfg.TopK = ro.Temperature, ro.TopP, ro.TopK
	ecfg.TurnTimeout = ro.TurnTimeout
	ecfg.ToolFormat, ecfg.EnvTimeout = chatenv.ToolFormat(ro.Env.ToolFormat), ro.Env.StepTimeout
	// The trainer normalises over the support set; the rollout logprobs it
	// compares against must be normalised the same way (the engine's
	// output_support_logprobs).
	ecfg.SupportLogprobs = cfg.Trainer.NormalizeOverSupport
	if r := ro.RoutedExperts; r.Enabled {
		ecfg.Routes = rollout.RouteSpec{Layers: r.Layers, TopK: r.TopK, NumExperts: r.NumExperts}
	}
	if ro.TopP < 1 || ro.TopK > 0 {
		supportK = model.DefaultConfig().VocabSize
		if ro.TopK > 0 {
			supportK = min(supportK, ro.TopK)
		}
		// sets rebuilt from logprob rows hold up to that many ids (the
		// sampled one may take the last slot): never cut them
		supportK = max(supportK, ro.SupportFromLogprobs)
	}
	return count, ecfg, supportK
}
