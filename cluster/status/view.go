package status

import (
	"cmp"
	"maps"
	"slices"
	"time"

	"github.com/asyncrl/asyncrl/messages"
)

// DefaultStaleAfter is how long an engine or rollout node may stay silent
// before the view marks it stale: both announce once a second
// (cluster/enginehost, cluster/rollouthost), so three missed rounds mean
// it stopped, not that it is slow.
const DefaultStaleAfter = 3 * time.Second

// Member is one live node-name claim.
type Member struct {
	// Name is the node's --name.
	Name string
	// Instance is the claiming process (host:pid:start), as the node
	// wrote it.
	Instance string
}

// Lease is the trainer lease's key.
type Lease struct {
	// Holder is the holding node's name.
	Holder string
	// Token is the fencing token (the revision it was acquired at).
	Token uint64
}

// Progress is the fenced durable progress the trainer's holder saved.
type Progress struct {
	Step, Version int64
	Checkpoint    string
	Holder        string
	Token         uint64
}

// Term is the newest term announced.
type Term struct {
	// ID is the term's run id (<run>-t<token>): its subjects and streams.
	ID     string
	Token  uint64
	Holder string
	Router string
	Seen   time.Time
}

// Step is the last StepDone of the term.
type Step struct {
	Step, Version    int64
	Loss, RewardMean float64
	Seen             time.Time
}

// Engine is what one engine last announced.
type Engine struct {
	ID, Node, URL string
	// Serving is the version its last health or load announcement
	// carried; Acked the last version it acknowledged to the publisher
	// (-1 when none was seen).
	Serving, Acked                      int64
	Healthy, Paused, Updating, Draining bool
	Reason                              string
	Running, Waiting                    int32
	KVUsage                             float64
	Seen                                time.Time
	// Stale: nothing heard from it for StaleAfter.
	Stale bool
}

// Rollout is one rollout node's last report of its groups in flight.
type Rollout struct {
	Node   string
	Groups int
	Seen   time.Time
	Stale  bool
}

// Capacity is the term controller's last CapacityChanged.
type Capacity struct {
	Capacity, Running, Accepted, Filtered, Submitted, Step int64
	Seen                                                   time.Time
}

// Snapshot is the view at one moment; nil pointers mean "not seen".
type Snapshot struct {
	Run string
	At  time.Time
	// Members are sorted by name.
	Members  []Member
	Lease    *Lease
	Progress *Progress
	Term     *Term
	Last     *Step
	// Engines are sorted by id, Rollouts by node.
	Engines  []Engine
	Rollouts []Rollout
	Capacity *Capacity
	// Problems are what could not be read, one line each (sorted by
	// source), e.g. a bucket that does not exist yet.
	Problems []string
}

// View folds what the bus said into a Snapshot. The zero value is not
// usable; use NewView.
type View struct {
	run        string
	staleAfter time.Duration

	members  []Member
	lease    *Lease
	progress *Progress
	term     *Term
	last     *Step
	engines  map[string]*Engine
	rollouts map[string]*Rollout
	capacity *Capacity
	problems map[string]string
}

// NewView returns an empty view of run; staleAfter 0 means
// DefaultStaleAfter.
func NewView(run string, staleAfter time.Duration) *View {
	return &View{run: run, staleAfter: cmp.Or(staleAfter, DefaultStaleAfter),
		engines: map[string]*Engine{}, rollouts: map[string]*Rollout{}, problems: map[string]string{}}
}

// SetMembers records the live name claims.
func (v *View) SetMembers(ms []Member) {
	v.members = slices.SortedFunc(slices.Values(ms), func(a, b Member) int { return cmp.Compare(a.Name, b.Name) })
}

// SetLease records the trainer lease (nil: nobody holds it).
func (v *View) SetLease(l *Lease) { v.lease = clone(l) }

// SetProgress records the durable progress (nil: none saved yet).
func (v *View) SetProgress(p *Progress) { v.progress = clone(p) }

// SetProblem records (or, with an empty text, clears) why source could
// not be read.
func (v *View) SetProblem(source, text string) {
	if text == "" {
		delete(v.problems, source)
		return
	}
	v.problems[source] = source + ": " + text
}

// Term is the id of the term the view follows ("" before any
// announcement): the shell subscribes to its plan.
func (v *View) Term() string {
	if v.term == nil {
		return ""
	}
	return v.term.ID
}

// Observe feeds one message seen at now. It reports whether the view
// switched to a new term (the shell then moves its term subscriptions).
func (v *View) Observe(now time.Time, m messages.Message) (newTerm bool) {
	if ta, ok := m.(messages.TermAnnounce); ok {
		return v.announce(now, ta)
	}
	if v.term == nil || m.Head().RunID != v.term.ID {
		return false // before any term, or another (older) term's
	}
	switch m := m.(type) {
	case messages.StepDone:
		if v.last == nil || m.Step >= v.last.Step {
			v.last = &Step{Step: m.Step, Version: m.NewVersion, Loss: m.Loss, RewardMean: m.RewardMean, Seen: now}
		}
	case messages.CapacityChanged:
		v.capacity = &Capacity{Capacity: m.Capacity, Running: m.Running, Accepted: m.Accepted,
			Filtered: m.Filtered, Submitted: m.Submitted, Step: m.Step, Seen: now}
	case messages.RolloutStatus:
		if m.Sender != "" {
			v.rollouts[m.Sender] = &Rollout{Node: m.Sender, Groups: len(m.GroupIDs), Seen: now}
		}
	case messages.EngineHealth:
		e := v.engine(m.Engine, m.Header, m.URL, now)
		e.Healthy, e.Paused, e.Updating, e.Draining, e.Reason = m.Healthy, m.Paused, m.Updating, m.Draining, m.Reason
	case messages.EngineLoad:
		e := v.engine(m.Engine, m.Header, m.URL, now)
		e.Running, e.Waiting, e.KVUsage = m.Running, m.Waiting, m.KVUsage
	case messages.EngineVersionAck:
		if m.Engine != "" {
			e := v.engineEntry(m.Engine, now)
			e.Acked = max(e.Acked, m.Version)
			e.URL = cmp.Or(e.URL, m.URL)
		}
	}
	return false
}

// announce follows the term with the largest token; a newer one forgets
// the old term's live state.
func (v *View) announce(now time.Time, ta messages.TermAnnounce) bool {
	if ta.RunID != v.run || ta.Term == "" {
		return false
	}
	if v.term != nil && ta.Token < v.term.Token {
		return false // a deposed holder still announcing
	}
	switched := v.term == nil || ta.Term != v.term.ID
	if switched {
		v.last, v.capacity = nil, nil
		clear(v.engines)
		clear(v.rollouts)
	}
	v.term = &Term{ID: ta.Term, Token: ta.Token, Holder: ta.Sender, Router: ta.Router, Seen: now}
	return switched
}

// engine updates the engine an announcement names with its header.
func (v *View) engine(id string, h messages.Header, url string, now time.Time) *Engine {
	e := v.engineEntry(cmp.Or(id, url), now)
	e.Serving, e.Node, e.URL = h.Version, cmp.Or(h.Sender, e.Node), cmp.Or(url, e.URL)
	return e
}

func (v *View) engineEntry(id string, now time.Time) *Engine {
	e, ok := v.engines[id]
	if !ok {
		e = &Engine{ID: id, Serving: -1, Acked: -1}
		v.engines[id] = e
	}
	e.Seen = now
	return e
}

// Snapshot returns the view at now: engines and rollout nodes silent for
// StaleAfter are marked stale (kept, so an operator sees what died).
func (v *View) Snapshot(now time.Time) Snapshot {
	s := Snapshot{Run: v.run, At: now, Members: slices.Clone(v.members), Lease: clone(v.lease),
		Progress: clone(v.progress), Term: clone(v.term), Last: clone(v.last), Capacity: clone(v.capacity)}
	for _, id := range slices.Sorted(maps.Keys(v.engines)) {
		e := *v.engines[id]
		e.Stale = now.Sub(e.Seen) > v.staleAfter
		s.Engines = append(s.Engines, e)
	}
	for _, n := range slices.Sorted(maps.Keys(v.rollouts)) {
		r := *v.rollouts[n]
		r.Stale = now.Sub(r.Seen) > v.staleAfter
		s.Rollouts = append(s.Rollouts, r)
	}
	for _, src := range slices.Sorted(maps.Keys(v.problems)) {
		s.Problems = append(s.Problems, v.problems[src])
	}
	return s
}

func clone[T any](p *T) *T {
	if p == nil {
		return nil
	}
	c := *p
	return &c
}
