package sim

import (
	"container/heap"
	"fmt"
	"math/rand"
	"runtime/debug"
	"slices"
	"time"

	"github.com/asyncrl/asyncrl/cluster/term"
)

// The failover scenario (issue 16): trainer nodes contending for the
// trainer lease, each deciding with the real cluster/term core and
// electing with the real lease core (failover_elect.go), over a
// simulated lease KV (fencing tokens, TTL on the virtual clock), a simulated
// durable progress store and prompt ledger, rollout nodes that pull
// groups, report RolloutStatus and host an engine that acks LoadWeights.
// The shell here answers each of the core's effects with the matching
// input, as cluster/node's agent does; the term's pipeline (controller,
// trainer, publisher) is modelled minimally inside StartPipeline and
// StopPipeline. Faults kill the holder, kill a rollout node with groups
// in flight, cut a node off the lease or the store, make a holder a
// zombie (its elector's loss notice comes late), and drop, duplicate or
// delay messages. It shares Config, Result and Violation with the other
// scenarios, but not their world: no controller core runs here.

// Timing of the failover world.
const (
	leaseTTL      = 2 * time.Second
	resignBackoff = 500 * msec // term.Config.Recontend: a stepped-down node's next elector contends after this (doubling after failed terms in a row)
	tickEvery     = 250 * msec
	observeEvery  = time.Second
	statusEvery   = 500 * msec
	storeRetry    = 250 * msec
	storeBudget   = 3 * time.Second // a store op fails after this long unreachable
	foTimeLimit   = 600 * time.Second
)

// fo is one failover run.
type fo struct {
	cfg   Config
	rng   *rand.Rand
	clock time.Duration
	tmrs  timerHeap
	tseq  uint64
	t0    time.Time

	batch, prompts int // groups per step; prompts in the run (steps × batch)
	// routeLag: the terms' trackers' MaxLag (drawRouteLag).
	routeLag int64
	trainers []*tnode
	rollouts []*rnode
	lease    foLease
	store    foStore
	ledger   map[string]*foPrompt // prompt → state
	queue    []string             // prompts waiting, in order
	// entries: the durable prompt ledger (failover_ledger.go), by
	// term-qualified prompt id; electing counts the elections of its
	// stream going on, electWait the writes waiting for a leader.
	entries   map[string]*foEntry
	electing  int
	electWait []func()
	elections []*election
	// startStalls counts the start-stall faults on: a term that starts
	// meanwhile never does (failover_check.go).
	startStalls   int
	faults        []*foFault
	injected      map[FaultKind]int
	active        int           // faults in progress
	quietSince    time.Duration // when the last fault ended (or 0)
	msgActive     int           // message faults in progress
	msgQuietSince time.Duration
	lastDurableAt time.Duration
	trained       int64
	requeued      int64
	// pubRetries counts the terms' trainers' publishes tried again,
	// giveUps their give-ups, gaveUp the newest (global) step given up
	// (failover_steprule.go).
	pubRetries, giveUps int
	gaveUp              int64
	// retryQuiet: when the last retry wait armed during a fault ends (the
	// progress oracle's clock starts there, failover_check.go).
	retryQuiet time.Duration
	bucketOut  int // weight-bucket-outages in progress
	// Issue 37's generators (failover_extra.go): the second stream's
	// draws, and what its faults hold now.
	x         foExtra
	outage    int           // stream-outages in progress
	moved     bool          // a stream recovered: its leader may have moved
	ckptLost  int           // checkpoint-losts in progress
	mirrorLag time.Duration // how late the ledger mirror hears its events (mirror-lag)
	kinds     map[term.Kind]int
	// ranks: the trainer group's rank model (failover_ranks.go).
	ranks foRanks
	// ro: the rollout groups' outcome model (failover_outcome.go).
	ro foRollout

	events int
	checks int64
	eventLog
	violation *Violation
	finished  bool
	done      bool
}

// foStore is the durable progress, fenced by the latest claim's token.
type foStore struct {
	prog      term.Progress
	claimed   uint64                         // the token of the latest claim
	history   map[int64][]term.PromptAttempt // accepted saves: step → prompts
	historyBy map[int64]uint64               // step → the token that saved it
}

// foPrompt is a prompt of the dataset: its last attempt, the term whose
// controller holds it (0: queued or trained) and the durable step that
// trained it. Its durable entries (one per term that took it) are
// w.entries.
type foPrompt struct {
	id           string
	attempt      int
	group        string // the last attempt's group id
	held         uint64
	trainedAt    int64 // durable step that trained it (0: not yet)
	trainedGroup string
}

// runFailover runs one failover seed.
func runFailover(cfg Config) (res Result, v *Violation) {
	w := newFailover(cfg)
	func() {
		defer func() {
			if r := recover(); r != nil {
				w.fail(InvProtocol, "panic: %v\n%s", r, firstLines(string(debug.Stack()), 12))
			}
		}()
		w.run()
	}()
	res = Result{Seed: cfg.Seed, Scenario: cfg.Scenario, Workload: w.workload(), Events: w.events,
		InvariantChecks: w.checks, VirtualTime: w.clock, StepsTrained: w.store.prog.Step, Faults: map[FaultKind]int{},
		Trained: w.trained, Requeued: w.requeued, PublishRetries: w.pubRetries, GaveUp: w.gaveUp, Rollouts: w.ro.RolloutFates, LogHash: hexsum(w.logHash)}
	if cfg.KeepLog {
		res.Log = w.full()
	}
	for k, n := range w.injected {
		res.Faults[k] = n
	}
	if w.violation != nil {
		v = w.violation
		for _, f := range w.faults {
			if f.enabled {
				v.Faults = append(v.Faults, f.String())
			}
		}
		v.OriginalFaults = len(w.faults)
		res.Violation = v
	}
	return res, v
}

func newFailover(cfg Config) *fo {
	w := &fo{cfg: cfg, rng: rand.New(rand.NewSource(cfg.Seed)), eventLog: newEventLog(cfg.TraceEvents), t0: time.Unix(1_700_000_000, 0),
		ledger: map[string]*foPrompt{}, entries: map[string]*foEntry{}, injected: map[FaultKind]int{}, ranks: newFoRanks(cfg.Seed), ro: newFoRollout(cfg.Seed),
		store: foStore{history: map[int64][]term.PromptAttempt{}, historyBy: map[int64]uint64{}}}
	nt, nr := 2+w.rng.Intn(2), 1+w.rng.Intn(2)
	w.batch = 2 + w.rng.Intn(3)
	w.prompts = cfg.Steps * w.batch // queued at the start; more are drawn as needed
	for i := range w.prompts {
		id := fmt.Sprintf("p%d", i)
		w.ledger[id] = &foPrompt{id: id}
		w.queue = append(w.queue, id)
	}
	for i := range nt {
		w.trainers = append(w.trainers, &tnode{w: w, name: fmt.Sprintf("n%d", i+1)})
	}
	for i := range nr {
		w.rollouts = append(w.rollouts, &rnode{w: w, name: fmt.Sprintf("r%d", i+1), slots: 1 + w.rng.Intn(2)})
	}
	w.faults = drawFailoverFaults(w.rng, cfg, nt, nr)
	var extra []*foFault
	w.x, extra = drawFailoverExtra(cfg, nt, nr, len(w.faults))
	w.faults = append(w.faults, extra...)
	w.faults = append(w.faults, drawBucketOutage(cfg, len(w.faults))...)
	w.routeLag = drawRouteLag(cfg.Seed)
	w.logf("start seed=%d scenario=%s %s faults=%d", cfg.Seed, cfg.Scenario, w.workload(), len(w.faults))
	for _, f := range w.faults {
		if f.enabled {
			w.after(f.at, "", func() { w.startFault(f) })
		}
	}
	for _, n := range w.trainers {
		n.boot()
	}
	for _, r := range w.rollouts {
		r.boot()
	}
	return w
}

func (w *fo) workload() string {
	return fmt.Sprintf("trainers=%d rollouts=%d batch=%d prompts=%d route-lag=%d", len(w.trainers), len(w.rollouts), w.batch, w.prompts, w.routeLag)
}

// now is the core's clock.
func (w *fo) now() time.Time { return w.t0.Add(w.clock) }

func (w *fo) after(d time.Duration, label string, fn func()) {
	w.tseq++
	heap.Push(&w.tmrs, &timer{at: w.clock + d, seq: w.tseq, label: label, fn: fn})
}

func (w *fo) afterRoutine(d time.Duration, fn func()) {
	w.tseq++
	heap.Push(&w.tmrs, &timer{at: w.clock + d, seq: w.tseq, routine: true, fn: fn})
}

// jitter draws a duration in [lo, hi].
func (w *fo) jitter(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(w.rng.Int63n(int64(hi-lo)+1))
}

func (w *fo) logf(format string, args ...any) { w.record(false, format, args...) }

func (w *fo) record(routine bool, format string, args ...any) {
	w.eventLog.add(w.clock, routine, format, args...)
}

func (w *fo) fail(inv Invariant, format string, args ...any) {
	if w.violation != nil {
		return
	}
	msg := fmt.Sprintf(format, args...)
	w.logf("VIOLATION %s: %s", inv, msg)
	w.violation = &Violation{Seed: w.cfg.Seed, Scenario: w.cfg.Scenario, Steps: w.cfg.Steps, Invariant: inv, Detail: msg,
		At: w.clock, Bugs: w.cfg.Bugs, Trace: w.trace(), Related: w.related(msg)}
}

func (w *fo) related(detail string) []string {
	keys := groupRe.FindAllString(detail, -1)
	if len(keys) == 0 {
		return nil
	}
	var out []string
	for _, l := range w.full() {
		for _, k := range keys {
			if containsWord(l, k) {
				out = append(out, l)
				break
			}
		}
	}
	if n := w.cfg.TraceEvents; len(out) > n {
		out = out[len(out)-n:]
	}
	return out
}

func containsWord(l, k string) bool { return slices.Contains(groupRe.FindAllString(l, -1), k) }

// run drives the loop until the run finishes or an invariant breaks.
func (w *fo) run() {
	for !w.done && w.violation == nil {
		if len(w.tmrs) == 0 {
			panic("sim: failover: no timers left")
		}
		t := heap.Pop(&w.tmrs).(*timer)
		w.clock = t.at
		if t.label != "" {
			w.eventLog.addStrings(w.clock, t.routine, t.label)
		}
		t.fn()
		w.events++
		if w.violation == nil {
			w.checkAll()
		}
	}
}

// plant is the term core's Plant for the configured bugs.
func (w *fo) plant() term.Plant {
	return term.Plant{
		ForgetDeadNodeGroups:  w.cfg.has(BugTermForgetsDeadNodeGroups),
		ForgetPrevHolder:      w.cfg.has(BugTermForgetsPrevHolder),
		RequeuePrevHolderOnly: w.cfg.has(BugTermRequeuesPrevHolderOnly),
		MarkBeforeDurable:     w.cfg.has(BugTermMarksBeforeDurable),
		IgnoreFencedSave:      w.cfg.has(BugTermIgnoresFencing),
		TwoSavesOutstanding:   w.cfg.has(BugTermTwoSaves),
		NeverResend:           w.cfg.has(BugTermNeverResends),
		SaveBeforeRecorded:    w.cfg.has(BugTermSavesBeforeRecorded),
		MarksUnordered:        w.cfg.has(BugTermMarksUnordered),
		NoStartBound:          w.cfg.has(BugTermNoStartBound),
		IgnoreQuorumLoss:      w.cfg.has(BugTermIgnoresQuorumLoss),
	}
}

// members is the live membership, as gossip will tell it.
func (w *fo) members() []term.Member {
	var ms []term.Member
	for _, n := range w.trainers {
		if n.alive {
			ms = append(ms, term.Member{Name: n.name})
		}
	}
	for _, r := range w.rollouts {
		if r.alive {
			m := term.Member{Name: r.name}
			if e := r.engine(); e != "" {
				m.Engines = map[string]string{e: fmt.Sprintf("http://%s/%d", r.name, r.inc)}
			}
			ms = append(ms, m)
		}
	}
	return ms
}

// gossip tells every live trainer node the membership as it is now,
// after a failure detector's delay (each node in order of what it heard).
func (w *fo) gossip(lo, hi time.Duration) {
	ms := w.members()
	for _, n := range w.trainers {
		if !n.alive {
			continue
		}
		at := max(w.clock+w.jitter(lo, hi), n.gossipAt)
		n.gossipAt = at
		inc := n.inc
		w.after(at-w.clock, "", func() {
			if n.alive && n.inc == inc {
				w.logf("%s: members %s", n.name, memberNames(ms))
				n.view = memberNames(ms)
				n.step(term.MembersChanged{Members: ms})
			}
		})
	}
}

func memberNames(ms []term.Member) []string {
	var s []string
	for _, m := range ms {
		s = append(s, m.Name)
	}
	return s
}

// holder is the trainer node the lease names now, or nil.
func (w *fo) holder() *tnode {
	for _, n := range w.trainers {
		if h, _ := w.lease.holding(w.clock); n.alive && h == n.name {
			return n
		}
	}
	return nil
}

// take pulls the next queued prompt for a term's rollout (fenced: only
// the term of the latest claim may take).
func (w *fo) take(p *pipe, r *rnode) (*foPrompt, bool) {
	if p.token != w.store.claimed {
		return nil, false
	}
	if len(w.queue) == 0 { // the prompt source is endless, as a dataset's epochs are
		id := fmt.Sprintf("p%d", len(w.ledger))
		w.ledger[id] = &foPrompt{id: id}
		w.queue = append(w.queue, id)
	}
	id := w.queue[0]
	w.queue = w.queue[1:]
	pr := w.ledger[id]
	pr.attempt++
	// The durable ledger qualifies a term's ids by its token (as
	// cluster/node's does): RequeueStale reads the token back.
	pr.held, pr.group = p.token, term.PromptID(p.token, fmt.Sprintf("%s#%d", id, pr.attempt))
	return pr, true
}

// finish: the durable progress reached the run's steps: heal, settle,
// final checks.
func (w *fo) finish() {
	if w.finished {
		return
	}
	w.finished = true
	w.healAll()
	if h := w.holder(); h != nil {
		w.dieAfterLast(h)
	}
	w.logf("all %d steps durable: faults healed, settling for %v", w.cfg.Steps, w.cfg.SyncBound+time.Second)
	w.after(w.cfg.SyncBound+time.Second, "final checks", func() {
		w.logKinds()
		w.logRankVerdicts()
		w.finalChecks()
		w.done = true
	})
}
