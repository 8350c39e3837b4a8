package rankhost

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/actors/trainer/bridge"
	"github.com/asyncrl/asyncrl/cluster/rankhost/fence"
	"github.com/asyncrl/asyncrl/transport"
)

// HostConfig configures a Host.
type HostConfig struct {
	// Node is this node's name; the host answers on Plan.RankHost(Node).
	Node string
	// Plan is the base run's plan.
	Plan transport.RunPlan
	// Spec is the rank command: trainer.exec and trainer.exec_env of this
	// node's configuration (never taken from a request).
	Spec bridge.Spec
	// Alive reports whether a node is a live member; a group whose owner
	// is not is killed (nil: never).
	Alive func(node string) bool
	// Every is how often owners are checked (default 1 s).
	Every  time.Duration
	Logger zerolog.Logger
}

// Host starts and serves this node's ranks of other nodes' groups.
type Host struct {
	cfg  HostConfig
	bus  transport.Bus
	sub  transport.Subscription
	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu     sync.Mutex
	fence  *fence.Rule       // the rule: which terms are served, which groups end
	groups map[string]*group // the ranks of each group fence holds
	closed bool
}

// group is one started group's ranks on this node.
type group struct {
	ranks map[int]*bridge.Child
}

func (g *group) kill() {
	var wg sync.WaitGroup
	for _, c := range g.ranks {
		wg.Go(c.Kill)
	}
	wg.Wait()
}

// StartHost subscribes to cfg.Plan.RankHost(cfg.Node) and watches the
// owners of its groups until Close.
func StartHost(bus transport.Bus, cfg HostConfig) (*Host, error) {
	subj, err := cfg.Plan.RankHost(cfg.Node)
	if err != nil {
		return nil, fmt.Errorf("rankhost: %w", err)
	}
	if len(cfg.Spec.Argv) == 0 {
		return nil, errors.New("rankhost: no rank command (trainer.exec)")
	}
	if cfg.Every <= 0 {
		cfg.Every = time.Second
	}
	ctx, stop := context.WithCancel(context.Background())
	h := &Host{cfg: cfg, bus: bus, ctx: ctx, stop: stop, fence: fence.NewRule(), groups: map[string]*group{}}
	// Requests are served each on its own goroutine: a frame waits for a
	// whole step while the group's other ranks' frames must run at once.
	h.sub, err = bus.Subscribe(subj, func(m *transport.Msg) {
		data := slices.Clone(m.Data)
		msg := &transport.Msg{Subject: m.Subject, Reply: m.Reply, Data: data}
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.closed {
			return // no new work once Close waits for the old
		}
		h.wg.Go(func() { h.serve(msg) })
	})
	if err != nil {
		stop()
		return nil, fmt.Errorf("rankhost: subscribe %s: %w", subj, err)
	}
	if cfg.Alive != nil {
		h.wg.Go(h.watch)
	}
	return h, nil
}

// Close stops serving and kills every rank it runs.
func (h *Host) Close() {
	_ = h.sub.Unsubscribe()
	h.stop()
	h.mu.Lock()
	h.closed = true
	gs := h.groups
	h.groups = map[string]*group{}
	h.mu.Unlock()
	for _, g := range gs {
		g.kill()
	}
	h.wg.Wait()
}

// Ranks is how many ranks the host runs now (tests, status).
func (h *Host) Ranks() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, g := range h.groups {
		n += len(g.ranks)
	}
	return n
}

// Pids are the process ids of the ranks the host runs now, sorted.
func (h *Host) Pids() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []int
	for _, g := range h.groups {
		for _, c := range g.ranks {
			out = append(out, c.Pid())
		}
	}
	slices.Sort(out)
	return out
}

func (h *Host) serve(m *transport.Msg) {
	var req request
	rep := reply{}
	if err := decode(m.Data, &req); err != nil {
		rep.Err = err.Error()
	} else {
		rep = h.handle(req)
	}
	out, err := encode(rep)
	if err == nil {
		err = h.bus.Respond(h.ctx, m, out)
	}
	if err != nil && h.ctx.Err() == nil {
		h.cfg.Logger.Warn().Err(err).Str("op", req.Op).Str("group", req.Group).Msg("rank host: answering")
	}
}

func (h *Host) handle(req request) reply {
	if err := h.admit(req); err != nil {
		return reply{Err: err.Error()}
	}
	switch req.Op {
	case opStart:
		pids, err := h.start(req)
		if err != nil {
			return reply{Err: err.Error()}
		}
		return reply{Pids: pids}
	case opFrame:
		return h.frame(req)
	case opKill:
		h.mu.Lock()
		var c *bridge.Child
		if g := h.groups[req.Group]; g != nil {
			c = g.ranks[req.Rank]
			delete(g.ranks, req.Rank)
			if len(g.ranks) == 0 {
				delete(h.groups, req.Group)
				h.fence.Remove(req.Group)
			}
		}
		h.mu.Unlock()
		if c != nil {
			c.Kill()
			h.cfg.Logger.Info().Str("group", req.Group).Int("rank", req.Rank).Str("owner", req.Owner).Msg("rank host: rank ended by its holder")
		}
		return reply{}
	}
	return reply{Err: fmt.Sprintf("rankhost: unknown op %q (start, frame, kill)", req.Op)}
}

// admit is fencing: a request of an older term than the newest seen is
// refused, and the first of a newer term kills every group of older
// ones before it is served.
func (h *Host) admit(req request) error {
	if !h.Fence(req.Token) {
		h.mu.Lock()
		defer h.mu.Unlock()
		return fmt.Errorf("rankhost: %s's term (token %d) was superseded by token %d: a deposed holder's group is not served", req.Owner, req.Token, h.fence.Token())
	}
	return nil
}

// Fence records that the term of token started (this node's own term,
// or a request of it) and kills, before returning, every group of an
// older term; false when a newer term was seen already.
func (h *Host) Fence(token uint64) bool {
	h.mu.Lock()
	ok, ended := h.fence.Observe(token)
	old := h.takeLocked(ended)
	h.mu.Unlock()
	for i, g := range old {
		h.cfg.Logger.Warn().Str("owner", ended[i].Owner).Uint64("token", ended[i].Token).Uint64("new_token", token).
			Msg("rank host: a newer term started; killing the deposed holder's ranks")
		g.kill()
	}
	return ok
}

// takeLocked removes the ranks of the groups fence ended (h.mu held).
func (h *Host) takeLocked(ended []fence.Ended) []*group {
	out := make([]*group, 0, len(ended))
	for _, e := range ended {
		g := h.groups[e.Group]
		delete(h.groups, e.Group)
		if g == nil {
			g = &group{}
		}
		out = append(out, g)
	}
	return out
}

func (h *Host) start(req request) ([]int, error) {
	if len(req.Ranks) == 0 {
		return nil, errors.New("rankhost: start without ranks")
	}
	g := &group{ranks: map[int]*bridge.Child{}}
	var pids []int
	for i, gr := range req.Ranks {
		spec := h.cfg.Spec
		spec.Env = append(slices.Clone(spec.Env), bridge.RankEnv(gr, i, len(req.Ranks))...)
		c, err := bridge.StartChild(spec, h.cfg.Logger.With().Int("rank", gr.Rank).Str("group", req.Group).Logger())
		if err != nil {
			g.kill()
			return nil, fmt.Errorf("rankhost: rank %d of %d on %s: %w", gr.Rank, gr.WorldSize, h.cfg.Node, err)
		}
		g.ranks[gr.Rank] = c
		pids = append(pids, c.Pid())
	}
	h.mu.Lock()
	ok, ended := h.fence.Register(req.Group, req.Owner, req.Token)
	if !ok || h.ctx.Err() != nil { // superseded (or closed) while starting
		if ok {
			h.fence.Remove(req.Group)
		}
		stale := h.takeLocked(ended)
		h.mu.Unlock()
		for _, o := range stale {
			o.kill()
		}
		g.kill()
		return nil, fmt.Errorf("rankhost: %s's term (token %d) was superseded while its ranks started", req.Owner, req.Token)
	}
	stale := h.takeLocked(ended)
	h.groups[req.Group] = g
	h.mu.Unlock()
	for _, o := range stale {
		h.cfg.Logger.Info().Str("owner", req.Owner).Str("group", req.Group).Msg("rank host: the holder started a new group; ending its previous ranks here")
		o.kill()
	}
	h.cfg.Logger.Info().Str("group", req.Group).Str("owner", req.Owner).Ints("pids", pids).Msg("rank host: ranks started")
	return pids, nil
}

func (h *Host) frame(req request) reply {
	h.mu.Lock()
	var c *bridge.Child
	if g := h.groups[req.Group]; g != nil {
		c = g.ranks[req.Rank]
	}
	h.mu.Unlock()
	if c == nil {
		return reply{Kind: "exited", Err: fmt.Sprintf("rank %d of group %s does not run on %s (killed, or its node restarted)", req.Rank, req.Group, h.cfg.Node)}
	}
	out, err := c.Relay(h.ctx, req.Body, time.Duration(req.TimeoutNS))
	if err != nil {
		return reply{Kind: bridge.RelayKind(err), Err: fmt.Sprintf("%s rank %d (%s): %v", h.cfg.Node, req.Rank, c, err)}
	}
	return reply{Body: out}
}

// watch kills the groups whose owner left the membership.
func (h *Host) watch() {
	t := time.NewTicker(h.cfg.Every)
	defer t.Stop()
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-t.C:
		}
		h.mu.Lock()
		ended := h.fence.Departed(h.cfg.Alive)
		gone := h.takeLocked(ended)
		h.mu.Unlock()
		for i, g := range gone {
			h.cfg.Logger.Warn().Str("owner", ended[i].Owner).Msg("rank host: the holder of a group left the cluster; killing its ranks")
			g.kill()
		}
	}
}
