package node

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/asyncrl/asyncrl/actors/controller"
	"github.com/asyncrl/asyncrl/actors/publisher"
	"github.com/asyncrl/asyncrl/actors/rollout"
	"github.com/asyncrl/asyncrl/actors/trainer"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/engine"
	"github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/tasks"
	"github.com/asyncrl/asyncrl/transport"
)

// countingStepper trains nothing: each step hands back the same model at
// the next version, and counts.
type countingStepper struct {
	m *model.Model
	v atomic.Int64
}

func (s *countingStepper) Version() int64 { return s.v.Load() }
func (s *countingStepper) Step(context.Context, trainer.Prepared) (model.StepStats, publisher.Weights, error) {
	s.v.Add(1)
	return model.StepStats{}, publisher.InMemory(s.m), nil
}

// versionsPublisher records the versions it was asked to publish.
type versionsPublisher struct {
	mu       sync.Mutex
	versions []int64
}

func (p *versionsPublisher) Publish(_ context.Context, _ publisher.Weights, v int64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.versions = append(p.versions, v)
	return nil
}

// fixedSource hands out total prompts of the task, then none.
type fixedSource struct {
	task     tasks.Task
	rng      *rand.Rand
	n, total int
}

func (s *fixedSource) Next() (controller.Prompt, bool) {
	if s.n >= s.total {
		return controller.Prompt{}, false
	}
	s.n++
	p := s.task.Sample(s.rng)
	return controller.Prompt{ID: rollout.PromptID("fixed"+strconv.Itoa(s.n), p.Seed), Text: p.Text}, true
}

type countRT struct {
	base http.RoundTripper
	n    *atomic.Int64
}

func (c countRT) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.base.RoundTrip(r)
}

type countGen struct {
	rollout.Generator
	n *atomic.Int64
}

func (g countGen) Generate(ctx context.Context, req rollout.TurnRequest) (rollout.TurnOutput, error) {
	g.n.Add(1)
	return g.Generator.Generate(ctx, req)
}

type countStream struct {
	transport.Stream
	n *atomic.Int64
}

func (s countStream) Publish(ctx context.Context, subject string, data []byte) (uint64, error) {
	s.n.Add(1)
	return s.Stream.Publish(ctx, subject, data)
}

func (s countStream) PublishMsgID(ctx context.Context, subject, id string, data []byte) (uint64, error) {
	s.n.Add(1)
	return s.Stream.(interface {
		PublishMsgID(context.Context, string, string, []byte) (uint64, error)
	}).PublishMsgID(ctx, subject, id, data)
}

// The swapped parts are the ones that run: the caller's stepper trains
// and its publisher hears every version, the caller's source is the only
// source of prompts, the caller's hash-model engines serve every turn, and
// each wrapper sees the traffic it wraps; the readers see the run.
func TestSwappedParts(t *testing.T) {
	cfg := smallConfig(t, 2)
	cfg.Filter.Mode = config.FilterNone // the hash model's rewards may all be equal
	pm, err := model.New(model.DefaultConfig(), 1)
	if err != nil {
		t.Fatal(err)
	}
	var engs []*engine.Engine
	for i := range 2 {
		ec := engine.DefaultConfig()
		ec.TimeScale = 0.02
		ec.MaxModelLen = model.DefaultConfig().MaxSeqLen
		e, err := engine.New(ec, engine.NewHashModel(uint64(i)+1))
		if err != nil {
			t.Fatal(err)
		}
		engs = append(engs, e)
	}
	st := &countingStepper{m: pm}
	pub := &versionsPublisher{}
	task, err := tasks.Get(cfg.Rollout.Task)
	if err != nil {
		t.Fatal(err)
	}
	src := &fixedSource{task: task, rng: rand.New(rand.NewPCG(1, 2)), total: 64}
	var upstream, handled, client, turns, stored atomic.Int64
	opts := Options{InMemoryBus: true, Stepper: &Stepper{Stepper: st, Publisher: pub}, Engines: engs, ControllerMailbox: 64,
		Source:          func() controller.Source { return src },
		RouterTransport: func(rt http.RoundTripper) http.RoundTripper { return countRT{rt, &upstream} },
		RouterHandler: func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handled.Add(1); h.ServeHTTP(w, r) })
		},
		RolloutClient: func(rt http.RoundTripper) http.RoundTripper { return countRT{rt, &client} },
		Generator:     func(g rollout.Generator) rollout.Generator { return countGen{g, &turns} },
		GroupStream:   func(s transport.Stream) transport.Stream { return countStream{s, &stored} },
	}
	var msgs, held uint64
	var heldErr error
	n, s := runNodeWith(t, cfg, opts, func(n *Node) {
		msgs, held, heldErr = n.GroupStreamHeld(context.Background())
	})
	if s.Steps != 2 || st.Version() < 2 {
		t.Fatalf("summary steps %d, stepper at version %d: want 2 steps taken by the caller's stepper", s.Steps, st.Version())
	}
	pub.mu.Lock()
	if len(pub.versions) < 2 || pub.versions[0] != 1 || pub.versions[1] != 2 {
		t.Errorf("published versions %v, want 1, 2, ...", pub.versions)
	}
	pub.mu.Unlock()
	if src.n == 0 || src.n > src.total {
		t.Errorf("the caller's source handed out %d prompts (of %d)", src.n, src.total)
	}
	if len(n.engines) != 2 || n.engines[0].E != engs[0] || n.engines[1].E != engs[1] {
		t.Errorf("the node serves %d engines, not the caller's", len(n.engines))
	}
	for name, c := range map[string]*atomic.Int64{"router transport": &upstream, "router handler": &handled,
		"rollout client": &client, "generator": &turns, "group stream": &stored} {
		if c.Load() == 0 {
			t.Errorf("%s wrapper saw nothing", name)
		}
	}
	if upstream.Load() < turns.Load() {
		t.Errorf("router upstream calls %d < turns %d: turns went around the wrapped transport", upstream.Load(), turns.Load())
	}
	var finished int64
	for _, r := range n.RolloutStats() {
		finished += r.Finished
	}
	if finished == 0 || stored.Load() == 0 {
		t.Errorf("rollout stats: %d trajectories finished, %d groups stored", finished, stored.Load())
	}
	if n.StepCount() != 2 || n.RolloutGroupsInFlight() != 0 {
		t.Errorf("step count %d, groups in flight after stop %d", n.StepCount(), n.RolloutGroupsInFlight())
	}
	if n.ControllerCore() == nil {
		t.Error("no controller core")
	}
	if len(n.EngineDrivers()) != 2 || n.SlowConsumerDrops() != 0 || n.BusOutMsgs() == 0 {
		t.Errorf("drivers %d, slow-consumer drops %d, bus messages %d", len(n.EngineDrivers()), n.SlowConsumerDrops(), n.BusOutMsgs())
	}
	if mfs, err := n.Gatherer().Gather(); err != nil || len(mfs) == 0 {
		t.Errorf("metrics: %d families, %v", len(mfs), err)
	}
	if heldErr != nil || held < msgs {
		t.Errorf("trajectory buffer held %d msgs, %d bytes: %v", msgs, held, heldErr)
	}
}

// Swapped parts the run cannot honour are refused before anything starts.
func TestSwappedPartsRefused(t *testing.T) {
	cfg := smallConfig(t, 1)
	st := &Stepper{Stepper: &countingStepper{}, Publisher: &versionsPublisher{}}
	exec := cfg
	exec.Trainer.Backend = config.BackendRemote
	for name, c := range map[string]struct {
		cfg  config.Config
		opts Options
	}{
		"stepper without publisher": {cfg, Options{Stepper: &Stepper{Stepper: &countingStepper{}}}},
		"stepper with remote":       {exec, Options{Stepper: st}},
		"stepper with checkpoint":   {cfg, Options{Stepper: st, TrainerCheckpoint: "x"}},
		"engines without stepper":   {cfg, Options{Engines: []*engine.Engine{nil}}},
	} {
		if _, err := New(c.cfg, c.opts); err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "Options.") {
			t.Errorf("%s: %v, want ErrConfig naming the option", name, err)
		}
	}
}
