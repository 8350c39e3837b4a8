package scale

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/asyncrl/asyncrl/actors"
	"github.com/asyncrl/asyncrl/actors/controller"
	"github.com/asyncrl/asyncrl/actors/filter"
	"github.com/asyncrl/asyncrl/actors/publisher"
	"github.com/asyncrl/asyncrl/actors/rollout"
	"github.com/asyncrl/asyncrl/actors/router/proxy"
	"github.com/asyncrl/asyncrl/actors/sampling"
	"github.com/asyncrl/asyncrl/actors/staleness"
	"github.com/asyncrl/asyncrl/actors/trainer"
	"github.com/asyncrl/asyncrl/actors/trainer/microbatch"
	"github.com/asyncrl/asyncrl/cluster/rollouthost"
	"github.com/asyncrl/asyncrl/engine"
	"github.com/asyncrl/asyncrl/engine/driver"
	"github.com/asyncrl/asyncrl/engine/latency"
	"github.com/asyncrl/asyncrl/internal/inproc"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/tasks"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/natsbus"
)

// The level's pipeline: start wires the real actors, router and
// engines of one level, with the stand-ins they run against (prompt
// source, no-op trainer, timing wrappers).

// source hands out total prompts of the task, then none.
type source struct {
	task  tasks.Task
	rng   *rand.Rand
	total int64
	n     atomic.Int64
}

func (s *source) Next() (controller.Prompt, bool) {
	if s.n.Load() >= s.total {
		return controller.Prompt{}, false
	}
	k := s.n.Add(1)
	p := s.task.Sample(s.rng)
	return controller.Prompt{ID: rollout.PromptID("p"+strconv.FormatInt(k, 10), p.Seed), Text: p.Text}, true
}

// noopStepper is a trainer that trains nothing: each step returns the same
// tiny model at the next version.
type noopStepper struct {
	m *model.Model
	v atomic.Int64
}

func (s *noopStepper) Version() int64 { return s.v.Load() }
func (s *noopStepper) Step(context.Context, trainer.Prepared) (model.StepStats, publisher.Weights, error) {
	s.v.Add(1)
	return model.StepStats{}, publisher.InMemory(s.m), nil
}

// noopPublisher publishes nothing (the engines keep version 0).
type noopPublisher struct{}

func (noopPublisher) Publish(context.Context, publisher.Weights, int64) error { return nil }

type startKey struct{}

// arrival is when the router got a request; timed marks the first
// upstream call (a retry is not a decision of the request's own).
type arrival struct {
	at    time.Time
	timed atomic.Bool
}

// timed stamps each router request with its arrival, so the engine-bound
// transport can time the router's decision (body read, session key,
// routing core) up to the upstream call.
func timed(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), startKey{}, &arrival{at: time.Now()})))
	})
}

type decisionTimer struct {
	base http.RoundTripper
	d    *durations
}

func (t decisionTimer) RoundTrip(r *http.Request) (*http.Response, error) {
	if a, ok := r.Context().Value(startKey{}).(*arrival); ok && !a.timed.Swap(true) {
		t.d.add(time.Since(a.at))
	}
	return t.base.RoundTrip(r)
}

// countingClient counts the router's non-200 answers to the rollout actors.
type countingClient struct {
	base http.RoundTripper
	l    *level
}

func (c countingClient) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(r)
	if strings.HasSuffix(r.URL.Path, "/completions") {
		c.l.turns.Add(1)
		if err != nil || resp.StatusCode != http.StatusOK {
			c.l.routerErrs.Add(1)
		}
	}
	return resp, err
}

// netTransport is the socket path: pooled, bounded per host.
func netTransport(maxConns int) *http.Transport {
	return &http.Transport{Proxy: nil, MaxIdleConns: maxConns, MaxIdleConnsPerHost: maxConns, MaxConnsPerHost: maxConns,
		DisableCompression: true, IdleConnTimeout: 90 * time.Second}
}

func (l *level) start(ctx context.Context) error {
	o := l.o
	// The level's subjects are the run's plan, as cluster/node's.
	s, err := transport.Plan(l.run)
	if err != nil {
		return fmt.Errorf("scale: %w", err)
	}
	bopts := natsbus.DefaultOptions()
	bopts.MaxPayload = 64 << 20
	bopts.Name = "asyncrl-" + l.run
	if l.bus, err = natsbus.Connect(ctx, bopts); err != nil {
		return fmt.Errorf("scale: bus: %w", err)
	}
	groups, err := l.bus.Stream(ctx, rollouthost.GroupStream(s, 1))
	if err != nil {
		return fmt.Errorf("scale: trajectory buffer: %w", err)
	}
	l.groups = groups
	if err := l.startEngines(); err != nil {
		return err
	}
	routerURL, err := l.startRouter()
	if err != nil {
		return err
	}
	// The start barrier closes before the controller admits the first
	// group: paused later, the first trajectories could finish before the
	// last started, and the level never came to be in flight at once
	// (seen under go test ./... load: held to the cap).
	if _, err := l.hold(ctx); err != nil {
		return err
	}
	l.reg = prometheus.NewRegistry()
	if l.sys, err = actors.NewSystem(actors.SystemConfig{Logger: o.Logger, RunID: l.run, Registerer: l.reg}); err != nil {
		return err
	}
	if err := l.observe(s); err != nil {
		return err
	}
	w := max(1, l.n/o.NSamples)
	b := max(1, w/64)
	fcfg := filter.Config{Mode: filter.ModeFilter, TrainBatchSize: b, NSamplesPerPrompt: o.NSamples, MaxSampleBatches: -1,
		MinReplaceRatio: 0.3, ZeroVarianceTol: 1e-6}
	// The shells as asyncrl run configures them (mailboxes of 1,024); a
	// refused message is counted in MailboxDrops.
	if l.smp, err = sampling.SpawnBuffer(l.sys, l.bus, actors.DefaultShellConfig("sampling-0", "sampling"),
		sampling.Config{Filter: fcfg, RunID: l.run, Sender: "sampling-0", Kept: s.Kept, Filtered: s.Filtered},
		sampling.Buffer{Stream: groups, Ledger: s.Ledger, Logger: o.Logger}); err != nil {
		return err
	}
	task, err := tasks.Get(o.Task)
	if err != nil {
		return err
	}
	pm, err := model.New(model.DefaultConfig(), 1)
	if err != nil {
		return err
	}
	if l.tr, err = trainer.StartStepper(l.bus, &noopStepper{m: pm}, noopPublisher{}, trainer.Config{RunID: l.run, Name: "trainer-0",
		NormStd: true, Microbatch: microbatch.DefaultConfig(), Logger: o.Logger,
		Subjects: trainer.Subjects{Train: s.Train, Steps: s.Steps, Weights: s.Weights},
		Batches:  trainer.StreamSource{Stream: groups.(transport.StoredReader), Name: groups.Name()}}); err != nil {
		return err
	}
	total := int64(o.Rounds * float64(w))
	l.src = &source{task: task, rng: rand.New(rand.NewPCG(uint64(l.n), 7)), total: total}
	ccfg := controller.Config{
		Staleness: staleness.Config{MaxStalenessSteps: int64(w/b - 1), NumParallelGenerationWorkers: int64(w), MiniBatchSize: int64(b),
			StalePolicy: staleness.PolicyRequeue},
		Sampling: fcfg, RunID: l.run, Sender: "controller-0", Task: task.Name(), NSamples: o.NSamples, ResendTrainAfter: time.Minute,
		Subjects: controller.Subjects{Prompts: s.Prompts, Train: s.Train, Capacity: s.Capacity, Ledger: s.Ledger, Settled: s.Settled},
	}
	return l.startRollouts(s, groups, task, routerURL, ccfg)
}

func (l *level) startRollouts(s transport.RunPlan, groups transport.Stream, task tasks.Task, routerURL string, ccfg controller.Config) error {
	o := l.o
	ecfg := rollout.DefaultEpisodeConfig()
	ecfg.MaxTurns = o.MaxTurns
	ecfg.MaxSeqLen = model.DefaultConfig().MaxSeqLen
	ecfg.TurnTimeout = o.Timeout // a turn may queue behind the whole level
	gen := &sessionCounter{Generator: &rollout.HTTPClient{BaseURL: routerURL, Model: "asyncrl-policy", Client: l.client}, live: map[string]struct{}{}}
	l.sessions = gen
	// Twice the slots of the level: prompts reach the actors through a
	// queue group, not evenly.
	const conc = 4096
	for i := range (2*l.n + conc - 1) / conc {
		a, err := rollout.Start(l.bus, gen, rollout.Config{RunID: l.run, Name: "rollout-" + strconv.Itoa(i), Task: task, Episode: ecfg,
			Concurrency: conc, Logger: o.Logger, GroupStream: timedStream{Stream: groups, l: l}, StoreConcurrency: o.StoreConcurrency,
			Subjects: rollout.Subjects{Prompts: s.Prompts, Groups: s.Trajectories, Aborted: s.Aborted}})
		if err != nil {
			return err
		}
		l.ros = append(l.ros, a)
	}
	var err error
	ctlShell := actors.DefaultShellConfig("controller-0", "controller")
	if o.ControllerMailbox > 0 {
		ctlShell.MailboxCapacity = o.ControllerMailbox
	}
	l.ctl, err = controller.Spawn(l.sys, l.bus, ctlShell, ccfg, controller.Inputs{Aborted: s.Aborted, Groups: s.GroupsAll, Steps: s.Steps}, func() controller.Source { return l.src })
	return err
}

func (l *level) startEngines() error {
	o := l.o
	count := o.Engines
	if count <= 0 {
		count = max(2, l.n/4096)
	}
	for i := range count {
		cfg := engine.DefaultConfig()
		cfg.TimeScale = o.TimeScaleFor(l.n)
		cfg.MaxModelLen = model.DefaultConfig().MaxSeqLen
		cfg.Seed = uint64(i)
		cfg.Latency = latency.DefaultConfig()
		cfg.Latency.MaxNumSeqs = o.SeqsPerEngine
		cfg.Latency.MaxWaiting = l.n + 1024 // every trajectory may queue on one engine
		e, err := engine.New(cfg, engine.NewHashModel(uint64(i)+1))
		if err != nil {
			return err
		}
		l.engs = append(l.engs, e)
	}
	return nil
}

// serve makes h reachable: in process under a fixed name, or on a
// loopback listener; it returns the base URL.
func (l *level) serve(name string, h http.Handler, reg *inproc.Registry) (string, error) {
	if l.o.Transport == "inproc" {
		u := "http://" + name + "." + l.run + ".inproc:80"
		reg.Register(u, h)
		return u, nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	l.srvs = append(l.srvs, srv)
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), nil
}

func (l *level) startRouter() (string, error) {
	reg := &inproc.Registry{}
	var urls []string
	for i, e := range l.engs {
		u, err := l.serve("engine-"+strconv.Itoa(i), e.Handler(), reg)
		if err != nil {
			return "", err
		}
		urls = append(urls, u)
	}
	rcfg := proxy.DefaultConfig()
	rcfg.Replicas = urls
	rcfg.Logger = l.o.Logger
	var engTr, cliTr http.RoundTripper = netTransport(1024), netTransport(4096)
	if l.o.Transport == "tcp" {
		// As before issue 22: pooled, but one connection per request in flight.
		engTr = &http.Transport{Proxy: nil, MaxIdleConns: 1024, MaxIdleConnsPerHost: 256, DisableCompression: true}
		cliTr = &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 256}
	}
	if l.o.Transport == "inproc" {
		l.engTr = &inproc.Transport{Registry: reg, Base: engTr}
		l.cliTr = &inproc.Transport{Registry: reg, Base: cliTr}
		engTr, cliTr = l.engTr, l.cliTr
	}
	rcfg.Transport = decisionTimer{base: engTr, d: &l.decisions}
	var err error
	if l.router, err = proxy.New(rcfg); err != nil {
		return "", err
	}
	u, err := l.serve("router", timed(l.router.Handler()), reg)
	if err != nil {
		return "", err
	}
	l.client = &http.Client{Transport: countingClient{base: cliTr, l: l}}
	// The engines' control calls get their own client, out of the turn
	// and request counts.
	ctlTr := http.RoundTripper(netTransport(len(urls)))
	if l.o.Transport == "inproc" {
		ctlTr = &inproc.Transport{Registry: reg, Base: ctlTr}
	}
	for _, eu := range urls {
		d, err := driver.New(driver.KindBuiltin, eu, driver.Options{Client: &http.Client{Transport: ctlTr}})
		if err != nil {
			return "", err
		}
		l.drivers = append(l.drivers, d)
	}
	return u, nil
}

// timedStream records when each group was stored in the trajectory buffer.
type timedStream struct {
	transport.Stream
	l *level
}

func (t timedStream) PublishMsgID(ctx context.Context, subject, id string, data []byte) (uint64, error) {
	p, ok := t.Stream.(interface {
		PublishMsgID(ctx context.Context, subject, id string, data []byte) (uint64, error)
	})
	var seq uint64
	var err error
	if ok {
		seq, err = p.PublishMsgID(ctx, subject, id, data)
	} else {
		seq, err = t.Stream.Publish(ctx, subject, data)
	}
	if err == nil {
		t.l.stored.Store(id, time.Now())
	}
	return seq, err
}

// observe times the filter's verdicts (stored → kept/filtered) and the
// controller's handling of filtered groups (GroupFiltered → its ledger
// entry), and counts admissions.
func (l *level) observe(s transport.RunPlan) error {
	verdict := func(counter *atomic.Int64, kept bool) transport.Handler {
		return func(m *transport.Msg) {
			var id string
			if kept {
				g, err := messages.DecodeAs[messages.GroupReady](m.Data)
				if err != nil {
					return
				}
				id = g.GroupID
			} else {
				g, err := messages.DecodeAs[messages.GroupFiltered](m.Data)
				if err != nil {
					return
				}
				id = g.GroupID
				l.verdict.Store(id, time.Now())
			}
			counter.Add(1)
			if at, ok := l.stored.LoadAndDelete(id); ok {
				l.filterLat.add(time.Since(at.(time.Time)))
			}
		}
	}
	ledger := func(m *transport.Msg) {
		pl, err := messages.DecodeAs[messages.PromptLedger](m.Data)
		if err != nil {
			return
		}
		switch pl.State {
		case messages.LedgerConsumed:
			l.admitted.Add(1)
			if pl.Attempt > 0 {
				l.reconsumed.Add(1)
			}
		case messages.LedgerRequeued:
			l.requeued.Add(1)
		case messages.LedgerFiltered:
			if at, ok := l.verdict.LoadAndDelete(pl.GroupID); ok {
				l.ctlLat.add(time.Since(at.(time.Time)))
			}
		}
	}
	for subj, h := range map[string]transport.Handler{s.Kept: verdict(&l.kept, true), s.Filtered: verdict(&l.filtered, false), s.Ledger: ledger} {
		sub, err := l.bus.Subscribe(subj, h)
		if err != nil {
			return err
		}
		l.subs = append(l.subs, sub)
	}
	return nil
}
