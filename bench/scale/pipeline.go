package scale

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asyncrl/asyncrl/actors/controller"
	"github.com/asyncrl/asyncrl/actors/publisher"
	"github.com/asyncrl/asyncrl/actors/rollout"
	"github.com/asyncrl/asyncrl/actors/trainer"
	"github.com/asyncrl/asyncrl/cluster/node"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/engine"
	"github.com/asyncrl/asyncrl/engine/latency"
	"github.com/asyncrl/asyncrl/internal/inproc"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/tasks"
	"github.com/asyncrl/asyncrl/transport"
)

// The level's pipeline: start runs cluster/node's pipeline with the
// stand-ins the level runs against (prompt source, no-op trainer,
// hash-model engines) and the timing wrappers.

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

// closeIdle closes rt's idle connections, if it keeps any (the
// pipeline's Stop asks the router's and the rollout client's transports
// to; through a wrapper the ask reaches the wrapped transport).
func closeIdle(rt http.RoundTripper) {
	if c, ok := rt.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

func (t decisionTimer) CloseIdleConnections()  { closeIdle(t.base) }
func (c countingClient) CloseIdleConnections() { closeIdle(c.base) }

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

// start runs the level on the pipeline's face (cluster/node): the run's
// config carries the level's staleness, filter and rollout settings; the
// swapped parts are the stand-ins (a stepper that trains nothing, a
// source that ends, hash-model engines) and the timing wrappers.
func (l *level) start(ctx context.Context) error {
	o := l.o
	task, err := tasks.Get(o.Task)
	if err != nil {
		return err
	}
	pm, err := model.New(model.DefaultConfig(), 1)
	if err != nil {
		return err
	}
	if err := l.buildEngines(); err != nil {
		return err
	}
	// The start barrier closes before the controller admits the first
	// group: paused later, the first trajectories could finish before the
	// last started, and the level never came to be in flight at once
	// (seen under go test ./... load: held to the cap).
	if _, err := l.hold(ctx); err != nil {
		return err
	}
	w := max(1, l.n/o.NSamples)
	b := max(1, w/64)
	cfg, err := l.config(w, b)
	if err != nil {
		return err
	}
	s, err := transport.Plan(l.run)
	if err != nil {
		return fmt.Errorf("scale: %w", err)
	}
	var obsErr error
	var observeOnce sync.Once
	total := int64(o.Rounds * float64(w))
	l.src = &source{task: task, rng: rand.New(rand.NewPCG(uint64(l.n), 7)), total: total}
	// Twice the slots of the level: prompts reach the actors through a
	// queue group, not evenly.
	actorsN := (2*l.n + rolloutConcurrency - 1) / rolloutConcurrency
	l.node, err = node.New(cfg, node.Options{Logger: o.Logger, InMemoryBus: true, ResendTrainAfter: time.Minute,
		RolloutActors: actorsN, ControllerMailbox: o.ControllerMailbox, StoreConcurrency: o.StoreConcurrency,
		Stepper: &node.Stepper{Stepper: &noopStepper{m: pm}, Publisher: noopPublisher{}},
		// The observers subscribe before the controller takes its first
		// prompt (the source is made for the controller's start), so
		// they see every admission.
		// (once: the controller makes a source per incarnation of its core).
		Source: func() controller.Source {
			observeOnce.Do(func() { obsErr = l.observe(s) })
			return l.src
		},
		Engines:         l.engs,
		RouterTransport: l.routerTransport, RouterHandler: timed, RolloutClient: l.rolloutClient,
		Generator: func(g rollout.Generator) rollout.Generator {
			l.sessions = &sessionCounter{Generator: g, live: map[string]struct{}{}}
			return l.sessions
		},
		GroupStream: func(s transport.Stream) transport.Stream { return timedStream{Stream: s, l: l} },
	})
	if err != nil {
		return fmt.Errorf("scale: %w", err)
	}
	l.owned = true // the node closes the engines from here on
	if err := l.node.Start(ctx); err != nil {
		return fmt.Errorf("scale: %w", err)
	}
	l.started = true
	return obsErr
}

// rolloutConcurrency is each rollout actor's episodes at once.
const rolloutConcurrency = 4096

// config is the level's run: staleness bound W/B−1 steps with requeue,
// DAPO filtering without a sample-batch bound, n samples per prompt on
// the task's multi-turn episodes; a turn may queue behind the whole level.
func (l *level) config(w, b int) (config.Config, error) {
	o := l.o
	c := config.Default()
	c.Run.ID = l.run
	c.Run.Steps = 1 << 30 // the level ends when the source is spent, not after steps
	dir, err := os.MkdirTemp("", "asyncrl-scale-")
	if err != nil {
		return c, err
	}
	l.dataDir = dir
	c.Run.DataDir, c.Run.ReportDir = dir, filepath.Join(dir, "report")
	c.Bus.MaxPayloadBytes = 64 << 20
	c.Engines.Count = len(l.engs)
	c.Rollout.Task, c.Rollout.NSamplesPerPrompt, c.Rollout.MaxTurns = o.Task, o.NSamples, o.MaxTurns
	c.Rollout.Concurrency, c.Rollout.TurnTimeout = rolloutConcurrency, o.Timeout
	c.Trainer.MiniBatchSize, c.Trainer.NumParallelGenerationWorkers, c.Trainer.MaxStalenessSteps = b, w, w/b-1
	c.Trainer.StalePolicy = config.StaleRequeue
	c.Filter.Mode, c.Filter.MaxSampleBatches = config.FilterFilter, -1
	c.Filter.MinReplaceRatio, c.Filter.ZeroVarianceTol = 0.3, 1e-6
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("scale: level %d: %w", l.n, err)
	}
	return c, nil
}

func (l *level) buildEngines() error {
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

// routerTransport is the router's transport to the engines for the
// level's Transport: in process (the pipeline's engines are registered in
// inproc.Default), or sockets; wrapped in the decision timer.
func (l *level) routerTransport(http.RoundTripper) http.RoundTripper {
	var engTr http.RoundTripper = netTransport(1024)
	switch l.o.Transport {
	case "tcp":
		// As before issue 22: pooled, but one connection per request in flight.
		engTr = &http.Transport{Proxy: nil, MaxIdleConns: 1024, MaxIdleConnsPerHost: 256, DisableCompression: true}
	case "inproc":
		l.engTr = &inproc.Transport{Registry: inproc.Default, Base: engTr}
		engTr = l.engTr
	}
	return decisionTimer{base: engTr, d: &l.decisions}
}

// rolloutClient is the rollout actors' transport to the router, counting
// its answers.
func (l *level) rolloutClient(http.RoundTripper) http.RoundTripper {
	var cliTr http.RoundTripper = netTransport(4096)
	switch l.o.Transport {
	case "tcp":
		cliTr = &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 256}
	case "inproc":
		l.cliTr = &inproc.Transport{Registry: inproc.Default, Base: cliTr}
		cliTr = l.cliTr
	}
	return countingClient{base: cliTr, l: l}
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
		sub, err := l.node.Bus().Subscribe(subj, h)
		if err != nil {
			return err
		}
		l.subs = append(l.subs, sub)
	}
	return nil
}
