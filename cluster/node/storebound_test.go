package node

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/actors/controller"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/engine"
	"github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/tasks"
	"github.com/asyncrl/asyncrl/transport"
)

// pairStream is the trajectory buffer as the rollout actors store into
// it, counting the stores in flight at once. Its first store is held
// until a second store is in flight beside it (or hold passed), so an
// actor whose bound admits two stores at once is seen doing so, and one
// bounded to a single store shows it by never getting past one.
type pairStream struct {
	transport.Stream
	hold time.Duration

	mu         sync.Mutex
	in, most   int
	stores     int
	held       bool
	pair       chan struct{} // closed once two stores are in flight at once
	pairClosed bool
}

func newPairStream(s transport.Stream, hold time.Duration) *pairStream {
	return &pairStream{Stream: s, hold: hold, pair: make(chan struct{})}
}

func (s *pairStream) PublishMsgID(ctx context.Context, subject, id string, data []byte) (uint64, error) {
	s.mu.Lock()
	s.in++
	s.most = max(s.most, s.in)
	if s.in >= 2 && !s.pairClosed {
		close(s.pair)
		s.pairClosed = true
	}
	first := !s.held
	s.held = true
	s.mu.Unlock()
	if first {
		t := time.NewTimer(s.hold)
		select {
		case <-s.pair:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	seq, err := s.Stream.(interface {
		PublishMsgID(context.Context, string, string, []byte) (uint64, error)
	}).PublishMsgID(ctx, subject, id, data)
	s.mu.Lock()
	s.in--
	s.stores++
	s.mu.Unlock()
	return seq, err
}

func (s *pairStream) counts() (most, stores int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.most, s.stores
}

// Options.StoreConcurrency reaches the rollout actors: with a bound of 1
// the one actor never has two stores in the trajectory buffer at once,
// though its first store waits for a second; with 0 (rollout's default,
// 32) the same run does have two at once — the control that shows the
// run overlaps stores, so the bound is what kept them apart.
func TestStoreConcurrencyReachesRolloutActors(t *testing.T) {
	for _, c := range []struct {
		bound   int
		overlap bool // two stores in flight at once
	}{{bound: 1, overlap: false}, {bound: 0, overlap: true}} {
		cfg := smallConfig(t, 2)
		cfg.Filter.Mode = config.FilterNone // the hash model's rewards may all be equal
		cfg.Rollout.Concurrency = 32        // every admitted group runs at once in the one actor
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
		task, err := tasks.Get(cfg.Rollout.Task)
		if err != nil {
			t.Fatal(err)
		}
		src := &fixedSource{task: task, rng: rand.New(rand.NewPCG(1, 2)), total: 64}
		var ps *pairStream
		opts := Options{InMemoryBus: true, RolloutActors: 1, StoreConcurrency: c.bound,
			Stepper: &Stepper{Stepper: &countingStepper{m: pm}, Publisher: &versionsPublisher{}}, Engines: engs,
			Source: func() controller.Source { return src },
			GroupStream: func(s transport.Stream) transport.Stream {
				ps = newPairStream(s, 3*time.Second)
				return ps
			},
		}
		runNodeWith(t, cfg, opts, nil)
		most, stores := ps.counts()
		if stores < 2 || (most > 1) != c.overlap || most < 1 {
			t.Errorf("StoreConcurrency %d: %d stores, at most %d at once; want two at once: %v", c.bound, stores, most, c.overlap)
		}
	}
}

// A negative store bound is refused before anything starts.
func TestStoreConcurrencyNegativeRefused(t *testing.T) {
	_, err := New(smallConfig(t, 1), Options{StoreConcurrency: -1})
	if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "Options.StoreConcurrency") {
		t.Fatalf("New: %v, want ErrConfig naming Options.StoreConcurrency", err)
	}
}
