package rollout

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/actors"
	"github.com/asyncrl/asyncrl/actors/rollout/outcome"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/tasks"
	"github.com/asyncrl/asyncrl/transport"
)

// ErrInvalidConfig is wrapped by every error Config.Validate returns.
var ErrInvalidConfig = errors.New("rollout: invalid config")

// Subjects are the rollout actor's subjects.
type Subjects struct {
	// Prompts carries PromptAssigned; the actor joins queue group
	// "rollout", so each prompt goes to one actor.
	Prompts string
	// Groups receives GroupReady (to the sampling actor).
	Groups string
	// Aborted receives EpisodeAborted (to the controller).
	Aborted string
}

// Config configures one rollout actor.
type Config struct {
	// RunID: prompts of other runs are ignored; outgoing headers carry it.
	RunID string
	// Name is the actor's id (message Sender).
	Name string
	// Task plays the episodes.
	Task tasks.Task
	// Episode configures every episode.
	Episode EpisodeConfig
	// Concurrency is how many trajectories this actor drives at once.
	Concurrency int
	// SupportK > 0 packs sample support sets of K ids per token (pad −1);
	// use it when top-k/top-p is active. 0 omits them.
	SupportK int
	Subjects Subjects
	// GroupStream, when set, stores every GroupReady durably (the
	// trajectory buffer): Publish returns once JetStream has it, and the
	// sampling actor acks it only after judging it. nil publishes plainly.
	GroupStream transport.Stream
	// StoreRetry bounds one store of a group in GroupStream (default 5s,
	// outcome.DefaultStoreRetry); a failed store is retried every
	// StoreRetry/10 until StoreFor (default 60s, outcome.DefaultStoreFor)
	// has passed, then the group is reported aborted (requeued), never
	// dropped.
	StoreRetry, StoreFor time.Duration
	// StoreConcurrency bounds this actor's stores waiting on GroupStream at
	// once (default 32). A group waits for a slot untimed (up to StoreFor),
	// so StoreRetry times the stream, not the queue in front of it: at
	// 131,072 trajectories thousands of groups finished within seconds and
	// their stores, all sent at once, timed out behind each other and were
	// sent again (issue 22).
	StoreConcurrency int
	// Logger gets one line per aborted episode (rate-limited by the caller's level).
	Logger zerolog.Logger
	// OnTake, when set, is called (on the bus's delivery goroutine) each
	// time the actor takes a group, before it runs: a cluster node reports
	// its groups in flight at once, so none is unaccounted if it dies.
	OnTake func(groupID, promptID string)
	// OnReport, when set, is called once per group the actor publishes, on
	// the group's goroutine just before the outcome goes out: ready true for
	// GroupReady, false for EpisodeAborted. A cluster node keeps the groups
	// whose fate it has not seen yet, so that at stop it waits for them
	// (the actor itself keeps nothing per group once it is published).
	OnReport func(groupID string, ready bool)
}

// Validate names the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.Task == nil:
		return fmt.Errorf("%w: Task must be set", ErrInvalidConfig)
	case c.Concurrency < 1:
		return fmt.Errorf("%w: Concurrency must be ≥ 1, got %d", ErrInvalidConfig, c.Concurrency)
	case c.Episode.MaxSeqLen < 2:
		return fmt.Errorf("%w: Episode.MaxSeqLen must be ≥ 2, got %d", ErrInvalidConfig, c.Episode.MaxSeqLen)
	case c.Episode.TurnTimeout <= 0:
		return fmt.Errorf("%w: Episode.TurnTimeout must be > 0, got %v", ErrInvalidConfig, c.Episode.TurnTimeout)
	case c.SupportK < 0:
		return fmt.Errorf("%w: SupportK must be ≥ 0, got %d", ErrInvalidConfig, c.SupportK)
	case c.Episode.Routes != (RouteSpec{}) && (!c.Episode.Routes.On() || c.Episode.Routes.TopK > c.Episode.Routes.NumExperts):
		return fmt.Errorf("%w: Episode.Routes %+v: want layers, top_k > 0 and top_k ≤ num_experts", ErrInvalidConfig, c.Episode.Routes)
	case c.Subjects.Prompts == "" || c.Subjects.Groups == "" || c.Subjects.Aborted == "":
		return fmt.Errorf("%w: Subjects.Prompts, Groups and Aborted must be set", ErrInvalidConfig)
	}
	return nil
}

// Actor is a rollout actor: it takes prompts from the bus, plays a group
// of episodes per prompt through a Generator (the router) and publishes
// the packed group, or the aborted episodes so the prompt is requeued.
type Actor struct {
	bus transport.Bus
	gen Generator
	cfg Config
	sem chan struct{}
	// stores holds a slot per store waiting on GroupStream.
	stores chan struct{}
	// limited rate-limits the store-retry warning (one per storeLogEvery,
	// with the count suppressed in between).
	limited *actors.LimitedLogger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	sub    transport.Subscription
	c      counters

	mu sync.Mutex
	// running maps the groups taken and not yet published (ready or
	// aborted) to their prompts: the actor's only per-group state, so it
	// is bounded by the groups in flight (a run of any length holds no
	// record of its finished groups here; OnReport hands them out).
	running map[string]string
	// envPace waits before a group's episodes after groups its chat
	// environment failed (the outcome core's rule).
	envPace outcome.EnvBackoff
}

// Start subscribes the actor to cfg.Subjects.Prompts.
func Start(bus transport.Bus, gen Generator, cfg Config) (*Actor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.StoreRetry <= 0 {
		cfg.StoreRetry = outcome.DefaultStoreRetry
	}
	if cfg.StoreFor <= 0 {
		cfg.StoreFor = outcome.DefaultStoreFor
	}
	if cfg.StoreConcurrency <= 0 {
		cfg.StoreConcurrency = 32
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &Actor{bus: bus, gen: gen, cfg: cfg, sem: make(chan struct{}, cfg.Concurrency), stores: make(chan struct{}, cfg.StoreConcurrency),
		ctx: ctx, cancel: cancel, limited: actors.NewLimitedLogger(cfg.Logger, actors.RealClock{}, storeLogEvery),
		running: map[string]string{}}
	sub, err := bus.QueueSubscribe(cfg.Subjects.Prompts, "rollout", a.onPrompt)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("rollout: subscribe %s: %w", cfg.Subjects.Prompts, err)
	}
	a.sub = sub
	return a, nil
}

// Stats returns a snapshot of the counters.
func (a *Actor) Stats() Stats {
	return Stats{Started: a.c.started.Load(), Finished: a.c.finished.Load(), Aborted: a.c.aborted.Load(),
		GroupsReady: a.c.groupsReady.Load(), GroupsAborted: a.c.groupsAborted.Load(),
		Tokens: a.c.tokens.Load(), Generated: a.c.generated.Load(), Resubmits: a.c.resubmits.Load(),
		MixedVersions: a.c.mixed.Load(), BadPrompts: a.c.badPrompts.Load(),
		StoreRetries: a.c.storeRetries.Load(), GroupsUnstored: a.c.groupsUnstored.Load(),
		EnvErrors: a.c.envErrors.Load(), EnvTimeouts: a.c.envTimeouts.Load(),
		ToolCalls: a.c.toolCalls.Load(), MalformedCalls: a.c.malformedCalls.Load(),
		ToolTimeouts: a.c.toolTimeouts.Load(), ToolCallEpisodes: a.c.toolCallEpisodes.Load(),
		EnvBackoffs: a.c.envBackoffs.Load(), EnvBackoffMs: a.c.envBackoffMs.Load()}
}

// InFlight lists the groups the actor took and has not published yet
// (parallel slices, sorted by group id). A cluster node reports them, so
// that the trainer's holder can requeue them if the node dies.
func (a *Actor) InFlight() (groups, prompts []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	groups = make([]string, 0, len(a.running))
	for g := range a.running {
		groups = append(groups, g)
	}
	slices.Sort(groups)
	prompts = make([]string, len(groups))
	for i, g := range groups {
		prompts[i] = a.running[g]
	}
	return groups, prompts
}

func (a *Actor) report(group string, ready bool) {
	if a.cfg.OnReport != nil {
		a.cfg.OnReport(group, ready)
	}
}

// Stop unsubscribes, cancels running episodes (each is reported aborted
// with reason "shutdown", so its prompt is requeued, never silently lost)
// and waits for them.
func (a *Actor) Stop(ctx context.Context) error {
	err := a.sub.Unsubscribe()
	a.cancel()
	done := make(chan struct{})
	go func() { a.wg.Wait(); close(done) }()
	select {
	case <-done:
		return err
	case <-ctx.Done():
		return errors.Join(err, fmt.Errorf("rollout: stop: %w", ctx.Err()))
	}
}

func (a *Actor) onPrompt(m *transport.Msg) {
	pa, err := messages.DecodeAs[messages.PromptAssigned](m.Data)
	if err != nil || pa.RunID != a.cfg.RunID || pa.NSamples < 1 {
		a.c.badPrompts.Add(1)
		return
	}
	if a.ctx.Err() != nil {
		return // stopping: the controller sees the group as running at stop
	}
	a.mu.Lock()
	a.running[pa.GroupID] = pa.PromptID
	a.mu.Unlock()
	if a.cfg.OnTake != nil {
		a.cfg.OnTake(pa.GroupID, pa.PromptID)
	}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		// In flight until its outcome is published, not just decided.
		defer func() {
			a.mu.Lock()
			delete(a.running, pa.GroupID)
			a.mu.Unlock()
		}()
		a.runGroup(pa)
	}()
}

// result is one episode's outcome.
type result struct {
	ep  Episode
	err error
}

func (a *Actor) runGroup(pa messages.PromptAssigned) {
	_, seed := ParsePromptID(pa.PromptID)
	prompt := tasks.Prompt{ID: pa.PromptID, Text: pa.Text, Seed: seed}
	n := int(pa.NSamples)
	a.paceEnv()
	res := make([]result, n)
	var wg sync.WaitGroup
	for i := range n {
		id := pa.GroupID + "/" + strconv.Itoa(i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i] = a.episode(prompt, id)
		}()
	}
	wg.Wait()
	// The group's fate is the outcome core's (the simulator steps it
	// too); this shell packs, stores and sends what it decides.
	g := outcome.New(n)
	eps := make([]outcome.Episode, n)
	for i, r := range res {
		_, _ = g.Ended(i, errText(r.err)) // each index once, in range: never refused
		eps[i] = outcome.Episode{Err: errText(r.err), Env: errors.Is(r.err, ErrEnvFailed) || errors.Is(r.err, ErrEnvTimeout)}
	}
	a.mu.Lock()
	a.envPace.Ended(eps)
	a.mu.Unlock()
	var gr messages.GroupReady
	if g.Stage() == outcome.Packing {
		var err error
		if gr, err = a.pack(pa, res); err != nil {
			a.cfg.Logger.Error().Err(err).Str("group", pa.GroupID).Msg("cannot pack group; reported aborted")
		}
		_, _ = g.Packed(errText(err), a.cfg.GroupStream != nil)
	}
	if g.Stage() == outcome.Storing {
		data, err := messages.Encode(gr)
		if err == nil {
			err = a.storeGroup(pa.GroupID, data)
		}
		_, _ = g.Stored(errText(err))
	}
	a.settle(pa, g, gr)
}

// paceEnv waits (until the actor stops) the delay the outcome core's
// EnvBackoff asks for after groups whose environment failed.
func (a *Actor) paceEnv() {
	a.mu.Lock()
	d := a.envPace.Delay()
	a.mu.Unlock()
	if d <= 0 {
		return
	}
	a.c.envBackoffs.Add(1)
	a.c.envBackoffMs.Add(d.Milliseconds())
	_ = sleep(a.ctx, d) // a stop cuts it short: the episodes then abort and the group is requeued
}

// settle counts, reports and sends a decided group: GroupReady when it
// was not stored (stored groups are out already), else the core's
// EpisodeAborted reports so the controller requeues the prompt.
func (a *Actor) settle(pa messages.PromptAssigned, g *outcome.Group, gr messages.GroupReady) {
	// A fresh context: a store's retries may have spent the group's time.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if g.Stage() == outcome.Ready {
		a.c.groupsReady.Add(1)
		a.report(pa.GroupID, true)
		if a.cfg.GroupStream == nil {
			a.publish(ctx, a.cfg.Subjects.Groups, gr)
		}
		return
	}
	a.c.groupsAborted.Add(1)
	a.report(pa.GroupID, false)
	aborts := g.Aborts()
	if g.Unstored() {
		// Not stored: nobody would ever judge the group, and the
		// controller would hold its slot for good (the stall of issue
		// 20). Reported aborted so the controller requeues the prompt.
		a.c.groupsUnstored.Add(1)
		a.cfg.Logger.Error().Str("group", pa.GroupID).Str("reason", aborts[0].Reason).Msg("group not stored in the trajectory buffer; reported aborted")
	}
	h := messages.Header{RunID: a.cfg.RunID, Sender: a.cfg.Name, Version: pa.Version}
	for _, ab := range aborts {
		m := messages.EpisodeAborted{Header: h, PromptID: pa.PromptID, GroupID: pa.GroupID, Reason: ab.Reason}
		if ab.Index >= 0 {
			m.TrajectoryID = pa.GroupID + "/" + strconv.Itoa(ab.Index)
		}
		a.publish(ctx, a.cfg.Subjects.Aborted, m)
	}
}

// errText is err's message, "" for nil.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// idPublisher is a stream that drops a message whose id it stored within
// its duplicate window (JetStream's Nats-Msg-Id): a retried store after a
// lost ack lands once.
type idPublisher interface {
	PublishMsgID(ctx context.Context, subject, id string, data []byte) (uint64, error)
}

// storeGroup stores a finished group in the trajectory buffer, retrying a
// failed store (a clustered stream electing a new leader after its server
// died takes 4–9 s) every StoreRetry/10 until StoreFor has passed or the
// actor stops (the outcome core's store schedule, store.go there). The group id is the message id where the stream
// de-duplicates, so a retry whose first try did land is dropped.
func (a *Actor) storeGroup(groupID string, data []byte) error {
	began := time.Now()
	wait := time.NewTimer(a.cfg.StoreFor)
	select {
	case a.stores <- struct{}{}:
		wait.Stop()
	case <-a.ctx.Done():
		wait.Stop()
		return fmt.Errorf("rollout: storing group %s: %w", groupID, transport.ErrClosed)
	case <-wait.C:
		return fmt.Errorf("rollout: storing group %s: no store slot free within %v", groupID, a.cfg.StoreFor)
	}
	defer func() { <-a.stores }()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), a.cfg.StoreRetry)
		var err error
		if p, ok := a.cfg.GroupStream.(idPublisher); ok {
			_, err = p.PublishMsgID(ctx, a.cfg.Subjects.Groups, groupID, data)
		} else {
			_, err = a.cfg.GroupStream.Publish(ctx, a.cfg.Subjects.Groups, data)
		}
		cancel()
		if err == nil || errors.Is(err, transport.ErrClosed) || errors.Is(err, transport.ErrPayloadTooLarge) || outcome.StoreGivesUp(began, time.Now(), a.cfg.StoreFor) {
			return err
		}
		n := a.c.storeRetries.Add(1)
		a.limited.Warn("store-retry").Err(err).Str("group", groupID).Int64("retries_so_far", n).
			Msg("trajectory buffer store failed; retrying (logged at most once per 10s)")
		select {
		case <-a.ctx.Done():
			return err
		case <-time.After(outcome.StoreRetryWait(a.cfg.StoreRetry)):
		}
	}
}

// storeLogEvery is the least time between two logged store retries.
const storeLogEvery = 10 * time.Second

func (a *Actor) publish(ctx context.Context, subject string, m messages.Message) {
	data, err := messages.Encode(m)
	if err == nil {
		err = a.bus.Publish(ctx, subject, data)
	}
	if err != nil {
		a.cfg.Logger.Error().Err(err).Str("subject", subject).Str("msg", m.String()).Msg("publish failed")
	}
}

// episode runs one trajectory under the actor's concurrency limit and
// releases its router session whatever happens.
func (a *Actor) episode(p tasks.Prompt, id string) result {
	select {
	case a.sem <- struct{}{}:
	case <-a.ctx.Done():
		a.c.started.Add(1)
		a.c.aborted.Add(1)
		return result{err: fmt.Errorf("%w: shutdown before start", ErrAborted)}
	}
	defer func() { <-a.sem }()
	a.c.started.Add(1)
	ep, err := RunEpisode(a.ctx, a.gen, a.cfg.Task, p, id, a.cfg.Episode)
	fctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_ = a.gen.FinishSession(fctx, id)
	cancel()
	if err != nil {
		a.c.aborted.Add(1)
		if a.ctx.Err() != nil {
			err = fmt.Errorf("%w: shutdown", ErrAborted)
		} else {
			a.countEnvFailure(err)
			a.cfg.Logger.Warn().Err(err).Str("traj", id).Msg("episode aborted; its prompt will be requeued")
		}
		return result{err: err}
	}
	a.c.finished.Add(1)
	a.c.tokens.Add(int64(len(ep.Tokens)))
	a.c.generated.Add(int64(ep.Generated))
	a.c.resubmits.Add(int64(ep.Resubmits))
	a.c.toolCalls.Add(int64(ep.ToolCalls))
	a.c.malformedCalls.Add(int64(ep.MalformedCalls))
	a.c.toolTimeouts.Add(int64(ep.ToolTimeouts))
	if ep.ToolCalls > ep.MalformedCalls {
		a.c.toolCallEpisodes.Add(1)
	}
	if ep.mixed() {
		a.c.mixed.Add(1)
	}
	return result{ep: ep}
}

func (e *Episode) mixed() bool {
	v := int32(-1)
	for i, m := range e.LossMask {
		if m == 1 {
			if v >= 0 && e.Versions[i] != v {
				return true
			}
			v = e.Versions[i]
		}
	}
	return false
}

// pack builds the group's GroupReady with its Arrow token batch inline:
// the message the trajectory buffer stores (and the trainer fetches by
// reference), or, without a buffer, the one published as it is.
func (a *Actor) pack(pa messages.PromptAssigned, res []result) (messages.GroupReady, error) {
	rs := a.cfg.Episode.Routes
	tb, err := messages.NewTokenBatch(messages.BatchSpec{Vocab: a.cfg.Episode.vocab().Size(), SupportK: int32(a.cfg.SupportK),
		RouteLayers: int32(rs.Layers), RouteTopK: int32(rs.TopK), NumExperts: int32(rs.NumExperts)})
	if err != nil {
		return messages.GroupReady{}, err
	}
	gr := messages.GroupReady{GroupID: pa.GroupID, PromptID: pa.PromptID, OldestVersion: -1, ScheduledStep: pa.Version + 1}
	for _, r := range res {
		ep := r.ep
		t := messages.Trajectory{ID: ep.ID, GroupID: pa.GroupID, Reward: float32(ep.Reward), PromptLen: int32(ep.PromptLen),
			TokenIDs: ep.Tokens, Logprobs: ep.Logprobs, LossMask: ep.LossMask, PolicyVersions: ep.Versions}
		if a.cfg.Episode.SupportLogprobs {
			t.Logprobs = ep.SupportLogprobs
		}
		if a.cfg.SupportK > 0 {
			t.Support = padSupport(ep.Support, a.cfg.SupportK)
		}
		if rs.On() {
			t.Routes = ep.Routes
		}
		if err := tb.Append(t); err != nil {
			return messages.GroupReady{}, err
		}
		gr.TrajectoryIDs = append(gr.TrajectoryIDs, ep.ID)
		gr.Rewards = append(gr.Rewards, ep.Reward)
		gr.TrainedTokens = append(gr.TrainedTokens, messages.TrainedTokens(ep.LossMask))
		if o := ep.OldestVersion(); o >= 0 && (gr.OldestVersion < 0 || o < gr.OldestVersion) {
			gr.OldestVersion = o
		}
	}
	data, err := messages.EncodeTokenBatch(tb)
	if err != nil {
		return messages.GroupReady{}, err
	}
	gr.Header = messages.Header{RunID: a.cfg.RunID, Sender: a.cfg.Name, Version: gr.OldestVersion}
	// Size and checksum travel with the reference the sampling actor makes
	// of the stored group, so the trainer can tell the batch it fetched is
	// this one.
	gr.Batch = messages.InlineRef(data)
	gr.Tokens = int64(tb.NumTokens())
	return gr, nil
}

// padSupport flattens per-token support rows to [len, k] with −1 padding
// (a row longer than k is cut: k must cover the sampler's filters).
func padSupport(rows [][]int32, k int) []int32 {
	out := make([]int32, 0, len(rows)*k)
	for _, r := range rows {
		for j := range k {
			if j < len(r) {
				out = append(out, r[j])
			} else {
				out = append(out, -1)
			}
		}
	}
	return out
}

// PromptID joins a prompt's unique id and its task seed: PromptAssigned
// has no seed field, and tasks such as guess hide their answer in it.
func PromptID(base string, seed int64) string { return base + "~" + strconv.FormatInt(seed, 10) }

// ParsePromptID splits an id made by PromptID; an id without a seed
// suffix has seed 0.
func ParsePromptID(id string) (base string, seed int64) {
	i := strings.LastIndexByte(id, '~')
	if i < 0 {
		return id, 0
	}
	s, err := strconv.ParseInt(id[i+1:], 10, 64)
	if err != nil {
		return id, 0
	}
	return id[:i], s
}
