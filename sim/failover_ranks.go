package sim

import (
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"strings"
	"time"

	"github.com/asyncrl/asyncrl/cluster/rankhost/fence"
)

// The trainer's worker group over several nodes (issue 31), as
// cluster/agent's rankgroup.go places it: every trainer node runs a rank
// host stepping the real rank-host rule (cluster/rankhost/fence); the
// holder's term keeps rank 0 and starts one rank on each other trainer
// node its membership lists (Links: trainer.exec_nodes = the trainer
// nodes, exec_ranks 1), as a group named after the term
// (t<token>-g<seq>), and exchanges a frame with each rank every
// rankFrameEvery. The requests — start, frame, kill, each with the
// holder's name and its term's token — travel as messages: late,
// reordered and lost while message faults are on, and a request sent
// arrives even if its sender died meanwhile (a dead or deposed holder's
// late requests). The host does what cluster/rankhost's Host does with
// each: Observe the token first (refuse an older term; end the groups of
// older ones), then serve it — a start's ranks come up a moment later and
// Register (refused: they are killed), a frame finds its rank or answers
// that it exited, a kill ends a rank (Remove with the group's last) —
// and every rankWatchEvery it ends the groups whose holder is not in its
// membership (Departed). A node's term Observes its own token first (the
// agent's Fence in setRankLinks). A start that fails or times out, or a
// frame that does, kills the group's ranks and starts a new group, as the
// trainer's group restart does; a stopped pipeline kills its ranks.
//
// The draws of this model come from a stream of their own (foRanks.rng),
// so the rest of a seed's run — its faults, its lease, its terms — is the
// run it was before the model existed: only the model's own events join
// the log.
//
// The rank-fencing oracle (checkRanks, after every event) is the rule's
// invariant (cluster/rankhost/fence's doc): a host serves ranks of at
// most one group, and only of the newest term whose request it observed
// — a start's ranks between its Observe and its Register are not served
// (no frame reaches them) and are killed when Register refuses them. And
// every request a host observes carries a token the lease issued to the
// request's sender (a Create of that holder landed at that revision):
// a node that is not the holder never carries a token newer than the
// holder's (cluster/rankhost's doc says why).

// Timing of the rank model.
const (
	rankStartWait  = 3 * time.Second // a start call's timeout (Links: 30 s)
	rankFrameEvery = 500 * msec      // a frame to each rank (a step's exchange)
	rankFrameWait  = 2 * time.Second // a frame call's timeout (the step's)
	rankKillWait   = time.Second     // a kill call's timeout (Links: 10 s)
	rankWatchEvery = time.Second     // the host's owner check (HostConfig.Every)
	rankPickEvery  = 200 * msec      // Links.nodes polls membership
	rankRetry      = time.Second     // a failed group's restart
)

// Rank request ops (cluster/rankhost's wire.go).
const (
	rankOpStart = "start"
	rankOpFrame = "frame"
	rankOpKill  = "kill"
)

// The rule's verdicts, counted (foRanks.verdicts) and logged at the end.
const (
	verdictRefused    = "observe-refused"   // a request of an older term refused
	verdictTermEnded  = "observe-ended"     // groups of older terms ended by a newer one
	verdictRegRefused = "register-refused"  // a start superseded while its ranks started
	verdictReplaced   = "register-replaced" // a holder's new group ended its previous one
	verdictDeparted   = "departed"          // groups of a holder that left membership
	verdictRemoved    = "removed"           // a group's last rank killed by its holder
)

// foRanks is the rank model's state in the world.
type foRanks struct {
	rng      *rand.Rand
	verdicts map[string]int
}

func newFoRanks(seed int64) foRanks {
	return foRanks{rng: rand.New(rand.NewSource(seed ^ 0x72616e6b)), verdicts: map[string]int{}}
}

// rankHost is a trainer node's rank host: the rule, and the ranks it
// serves by group (the Host's groups).
type rankHost struct {
	rule   *fence.Rule
	groups map[string]*hostedGroup
}

type hostedGroup struct {
	owner string
	token uint64
	ranks map[int]bool
}

func newRankHost() *rankHost {
	return &rankHost{rule: fence.NewRule(), groups: map[string]*hostedGroup{}}
}

// rankReq is a request to a rank host.
type rankReq struct {
	op    string
	owner string
	token uint64
	group string
	rank  int
}

func (r rankReq) String() string {
	return fmt.Sprintf("%s %s rank %d of %s token %d", r.op, r.group, r.rank, r.owner, r.token)
}

// rankGroup is a holder's group: rank i+1 runs on nodes[i].
type rankGroup struct {
	id      string
	nodes   []string
	pending int  // starts not answered yet
	closed  bool // failed or closed: its kills went out
}

// rankJitter draws a duration in [lo, hi] from the model's stream.
func (w *fo) rankJitter(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(w.ranks.rng.Int63n(int64(hi-lo)+1))
}

// rankSend carries one rank-host message: late, and while message faults
// are on lost (one in four) or much later (one in four).
func (w *fo) rankSend(fn func()) {
	d := w.rankJitter(msec, 20*msec)
	if w.msgActive > 0 {
		switch w.ranks.rng.Intn(4) {
		case 0:
			return
		case 1:
			d += w.rankJitter(100*msec, 1500*msec)
		}
	}
	w.after(d, "", fn)
}

func (w *fo) trainerNamed(name string) *tnode {
	for _, n := range w.trainers {
		if n.name == name {
			return n
		}
	}
	return nil
}

// isMember: name is a member in this node's gossip view.
func (n *tnode) isMember(name string) bool {
	return slices.ContainsFunc(n.view, func(m string) bool { return m == name })
}

// rankPeers are the other trainer nodes of this node's membership, by
// name (the agent's trainerPeers).
func (n *tnode) rankPeers() []string {
	var out []string
	for _, m := range n.view {
		if m != n.name && n.w.trainerNamed(m) != nil {
			out = append(out, m)
		}
	}
	slices.Sort(out)
	return out
}

// rankCall sends req to node m's rank host and answers done once: with
// the host's error ("" served) if its answer comes back within wait, else
// "timed out".
func (n *tnode) rankCall(m string, req rankReq, wait time.Duration, done func(err string)) {
	w := n.w
	answered := false
	n.later(wait, "", func() {
		if !answered {
			answered = true
			done("timed out")
		}
	})
	inc := n.inc
	answer := func(err string) {
		w.rankSend(func() {
			if n.alive && n.inc == inc && !answered {
				answered = true
				done(err)
			}
		})
	}
	w.rankSend(func() {
		if h := w.trainerNamed(m); h != nil && h.alive {
			h.serveRank(req, answer)
		}
	})
}

// startRanks starts the term's group on the other trainer nodes, once
// membership lists enough of them.
func (n *tnode) startRanks(p *pipe) {
	if n.w.cfg.rankModelOff {
		return
	}
	w := n.w
	if n.closeIfStopped(p) || p.rg != nil {
		return
	}
	need, peers := len(w.trainers)-1, n.rankPeers()
	if len(peers) < need {
		n.later(rankPickEvery, "", func() { n.startRanks(p) })
		return
	}
	p.rgSeq++
	g := &rankGroup{id: fmt.Sprintf("t%d-g%d", p.token, p.rgSeq), nodes: peers[:need], pending: need}
	p.rg = g
	w.logf("%s: rank group %s starts ranks on %v (token %d)", n.name, g.id, g.nodes, p.token)
	for i, m := range g.nodes {
		req := rankReq{op: rankOpStart, owner: n.name, token: n.rankToken(p), group: g.id, rank: i + 1}
		n.rankCall(m, req, rankStartWait, func(err string) {
			if p.rg != g || g.closed {
				return
			}
			if err != "" {
				n.rankGroupFailed(p, g, fmt.Sprintf("start of rank %d on %s: %s", i+1, m, err))
				return
			}
			if g.pending--; g.pending == 0 {
				w.logf("%s: rank group %s up", n.name, g.id)
				n.rankFrames(p, g)
			}
		})
	}
}

// rankFrames exchanges a frame with each rank every rankFrameEvery while
// the group runs.
func (n *tnode) rankFrames(p *pipe, g *rankGroup) {
	n.later(rankFrameEvery, "", func() {
		if n.closeIfStopped(p) || p.rg != g || g.closed {
			return
		}
		for i, m := range g.nodes {
			req := rankReq{op: rankOpFrame, owner: n.name, token: n.rankToken(p), group: g.id, rank: i + 1}
			n.rankCall(m, req, rankFrameWait, func(err string) {
				if err != "" && p.rg == g && !g.closed {
					n.rankGroupFailed(p, g, fmt.Sprintf("frame to rank %d on %s: %s", i+1, m, err))
				}
			})
		}
		n.rankFrames(p, g)
	})
}

// rankGroupFailed kills the group's ranks and starts a new group.
func (n *tnode) rankGroupFailed(p *pipe, g *rankGroup, why string) {
	n.w.logf("%s: rank group %s failed (%s): its ranks are killed, a new group starts", n.name, g.id, why)
	n.killRanks(p, g)
	p.rg = nil
	n.later(rankRetry, "", func() { n.startRanks(p) })
}

// closeIfStopped kills the group of a pipeline that stopped (the
// Supervisor closes it); true when p no longer runs.
func (n *tnode) closeIfStopped(p *pipe) bool {
	if !p.stopped && n.pipe == p {
		return false
	}
	if g := p.rg; g != nil && !g.closed {
		n.w.logf("%s: rank group %s closed with its pipeline (token %d)", n.name, g.id, p.token)
		n.killRanks(p, g)
	}
	return true
}

// killRanks asks every node of g to kill its rank (Links' killLinks).
func (n *tnode) killRanks(p *pipe, g *rankGroup) {
	g.closed = true
	for i, m := range g.nodes {
		n.rankCall(m, rankReq{op: rankOpKill, owner: n.name, token: n.rankToken(p), group: g.id, rank: i + 1}, rankKillWait, func(string) {})
	}
}

// rankToken is the token the term's requests carry: its own (Links'
// LinksConfig.Token, the term's).
func (n *tnode) rankToken(p *pipe) uint64 {
	if l := &n.w.lease; n.w.cfg.has(BugRankLinksSendNewestToken) && l.lastCreate > p.token {
		return l.lastCreate // planted: the newest term the lease began, whoever's it is
	}
	return p.token
}

// fenceOwn: this node's term of token starts; its rank host ends the
// ranks it ran for earlier holders first (the agent's Fence).
func (n *tnode) fenceOwn(token uint64) {
	if n.w.cfg.rankModelOff {
		return
	}
	_, ended := n.host.rule.Observe(token)
	n.endGroups(ended, fmt.Sprintf("its own term of token %d started", token), verdictTermEnded)
}

// serveRank is the host's side of one request (Host.handle).
func (n *tnode) serveRank(req rankReq, answer func(err string)) {
	w, h := n.w, n.host
	w.checkRankToken(n, req)
	ok, ended := h.rule.Observe(req.token)
	n.endGroups(ended, fmt.Sprintf("a request of token %d arrived", req.token), verdictTermEnded)
	if !ok {
		w.ranks.verdicts[verdictRefused]++
		w.logf("%s: rank host refuses %s: superseded by token %d", n.name, req, h.rule.Token())
		answer("superseded")
		return
	}
	switch req.op {
	case rankOpStart:
		// The rank's process starts; Register once it is up.
		n.later(w.rankJitter(5*msec, 80*msec), "", func() { n.registerRank(req, answer) })
	case rankOpFrame:
		if g := h.groups[req.group]; g == nil || !g.ranks[req.rank] {
			answer("exited")
			return
		}
		answer("")
	case rankOpKill:
		if g := h.groups[req.group]; g != nil && g.ranks[req.rank] {
			delete(g.ranks, req.rank)
			if len(g.ranks) == 0 {
				delete(h.groups, req.group)
				h.rule.Remove(req.group)
				w.ranks.verdicts[verdictRemoved]++
				w.logf("%s: rank host: group %s ended by its holder %s", n.name, req.group, req.owner)
			}
		}
		answer("")
	}
}

// registerRank: a start's rank is up; the rule says whether it is served.
func (n *tnode) registerRank(req rankReq, answer func(err string)) {
	w, h := n.w, n.host
	ok, ended := h.rule.Register(req.group, req.owner, req.token)
	if !ok {
		w.ranks.verdicts[verdictRegRefused]++
		w.logf("%s: rank host kills the new rank of %s: token %d superseded while it started", n.name, req.group, h.rule.Token())
		answer("superseded while starting")
		return
	}
	n.endGroups(ended, req.owner+" started group "+req.group, verdictReplaced)
	g := h.groups[req.group]
	if g == nil {
		g = &hostedGroup{owner: req.owner, token: req.token, ranks: map[int]bool{}}
		h.groups[req.group] = g
	}
	g.ranks[req.rank] = true
	w.logf("%s: rank host runs rank %d of %s (%s, token %d)", n.name, req.rank, req.group, req.owner, req.token)
	answer("")
}

// rankWatch: every rankWatchEvery the host ends the groups whose holder
// left its membership.
func (n *tnode) rankWatch() {
	if n.w.cfg.rankModelOff {
		return
	}
	n.loop(rankWatchEvery, rankWatchEvery, func() {
		n.endGroups(n.host.rule.Departed(n.isMember), "its holder left the membership", verdictDeparted)
	})
}

// endGroups kills the ranks of the groups the rule ended.
func (n *tnode) endGroups(ended []fence.Ended, why, verdict string) {
	w, h := n.w, n.host
	for _, e := range ended {
		w.ranks.verdicts[verdict]++
		if verdict == verdictTermEnded && w.cfg.has(BugRankHostKeepsDeposed) {
			continue // planted: the deposed holder's ranks run on
		}
		if g := h.groups[e.Group]; g != nil {
			delete(h.groups, e.Group)
			w.logf("%s: rank host kills %d rank(s) of %s (%s, token %d): %s", n.name, len(g.ranks), e.Group, e.Owner, e.Token, why)
		}
	}
}

// checkRankToken: the request's token is one the lease issued to its
// sender (a Create of that holder landed at that revision).
func (w *fo) checkRankToken(n *tnode, req rankReq) {
	w.checks++
	if c, ok := w.lease.created[req.token]; !ok || c.Holder != req.owner {
		w.fail(InvRankFencing, "%s's rank host got %s: the lease issued token %d to %q (issued: %v)", n.name, req, req.token, c.Holder, ok)
	}
}

// checkRanks is the rule's invariant on a live node's rank host: it
// serves ranks of at most one group, of the newest term it observed.
func (w *fo) checkRanks(n *tnode) {
	w.checks++
	h := n.host
	newest, stale := h.rule.Token(), false
	for _, g := range h.groups {
		stale = stale || g.token < newest
	}
	if !stale && len(h.groups) <= 1 {
		return
	}
	ids := slices.Sorted(maps.Keys(h.groups))
	for _, id := range ids {
		if g := h.groups[id]; g.token < newest {
			w.fail(InvRankFencing, "%s's rank host serves rank(s) %v of group %s (%s, token %d), older than token %d whose request it served",
				n.name, slices.Sorted(maps.Keys(g.ranks)), id, g.owner, g.token, newest)
			return
		}
	}
	if len(ids) > 1 {
		var gs []string
		for _, id := range ids {
			gs = append(gs, fmt.Sprintf("%s (%s, token %d)", id, h.groups[id].owner, h.groups[id].token))
		}
		w.fail(InvRankFencing, "%s's rank host serves ranks of %d groups at once: %s", n.name, len(ids), strings.Join(gs, ", "))
	}
}

// logRankVerdicts is the run's count of the rule's verdicts.
func (w *fo) logRankVerdicts() {
	if w.cfg.rankModelOff {
		return
	}
	var b []byte
	for _, k := range slices.Sorted(maps.Keys(w.ranks.verdicts)) {
		b = fmt.Appendf(b, " %s=%d", k, w.ranks.verdicts[k])
	}
	w.logf("rank host verdicts:%s", b)
}
