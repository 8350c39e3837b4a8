package routerbench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/asyncrl/asyncrl/actors/publisher"
	"github.com/asyncrl/asyncrl/actors/publisher/tracker"
	"github.com/asyncrl/asyncrl/actors/router/policy"
	"github.com/asyncrl/asyncrl/actors/router/proxy"
	"github.com/asyncrl/asyncrl/engine"
)

// PublishConfig makes RunAgentic publish weight versions while the
// conversations run, as a fully async RL run does under delta sync: every
// Every a new version is published and the replicas acknowledge it one
// after another, Stagger apart, in a seeded random order (each engine
// fetches and loads on its own). An ack loads the version into the engine
// (engine.SetModel, which resets its prefix cache, as a weight update
// does in vLLM) and goes through the real publisher shell
// (actors/publisher), which tells the router the engine's version
// and raises its hard minimum (MinVersionSet) exactly as in a run.
type PublishConfig struct {
	// Every is the modelled time between two publishes (× TimeScale in
	// real time).
	Every time.Duration
	// Stagger is the modelled time between two replicas' acks of one
	// version; (Replicas − 1) × Stagger must be < Every.
	Stagger time.Duration
	// VersionRule is the router's rule for replicas behind the newest
	// acknowledged version: policy.VersionStaleness or policy.VersionNewest
	// (the rule before issue 15).
	VersionRule string
	// MaxVersionLag is the staleness budget (versions) of VersionStaleness,
	// given to the router and, as its MaxLag, to the publisher, as
	// wiring does for a run. Under VersionNewest the publisher's
	// MaxLag is 0 (only the newest version is routed), as before issue 15.
	MaxVersionLag int64
	// Seed seeds the ack order of every publish.
	Seed uint64
}

// routerSink is the publisher shell's view of the router (as in
// cluster/node): acks and minimum versions go into the core under the
// proxy's lock.
type routerSink struct{ r *proxy.Router }

func (s routerSink) SetVersion(url string, v int64) error {
	return s.r.Apply(policy.SetVersion{URL: url, Version: v})
}

func (s routerSink) SetMinVersion(v int64) error {
	return s.r.Apply(policy.SetMinVersion{Version: v})
}

// noDispatch drops the shell's catch-up commands: the publisher driver
// loads versions into the engines itself, at the staggered ack times.
type noDispatch struct{}

func (noDispatch) Dispatch(tracker.Command) {}

// applyPublish sets the router's version rule for p.
func applyPublish(pc *proxy.Config, p *PublishConfig) {
	pc.Policy.VersionRule = p.VersionRule
	pc.Policy.MaxVersionLag = p.MaxVersionLag
}

// trackerLag is the publisher's MaxLag for p (wiring's rule).
func trackerLag(p *PublishConfig) int64 {
	if p.VersionRule == policy.VersionNewest {
		return 0
	}
	return p.MaxVersionLag
}

// runPublisher publishes versions 1, 2, … every p.Every × scale until ctx
// ends, acking them on the engines (models[i] is engine i's model) in a
// staggered random order. It returns how many versions every engine
// acknowledged, and an error only if publishing itself failed.
func runPublisher(ctx context.Context, p *PublishConfig, scale float64, f *fleet, models []engine.Model) (int, error) {
	if scale <= 0 {
		return 0, errors.New("routerbench: publishing needs TimeScale > 0")
	}
	n := len(f.engines)
	if time.Duration(n-1)*p.Stagger >= p.Every {
		return 0, fmt.Errorf("routerbench: (replicas − 1) × Stagger %v must be < Every %v", p.Stagger, p.Every)
	}
	tc := tracker.DefaultConfig()
	tc.MaxLag = trackerLag(p)
	sh, err := publisher.New(publisher.Config{Tracker: tc, RunID: "routerbench", Sender: "routerbench"}, nil, routerSink{f.router}, noDispatch{})
	if err != nil {
		return 0, err
	}
	defer sh.Close()
	name := func(i int) string { return fmt.Sprint("e", i) }
	for i, u := range f.urls {
		if _, err := sh.Join(name(i), u, 0); err != nil {
			return 0, err
		}
	}
	real := func(d time.Duration) time.Duration { return time.Duration(float64(d) * scale) }
	rng := rand.New(rand.NewPCG(p.Seed, 0x5eed))
	acked := 0
	for v := int64(1); ; v++ {
		if !sleepCtx(ctx, real(p.Every-time.Duration(n-1)*p.Stagger)) {
			return acked, nil
		}
		done := make(chan error, 1)
		go func() { done <- sh.Publish(ctx, tracker.VersionInfo{Version: v, DeltaBytes: 1}) }()
		// Publish waits for the first ack: start acking once the version
		// is registered (a receiver's Fetching is refused before).
		order := rng.Perm(n)
		for sh.Fetching(name(order[0]), v) != nil {
			if !sleepCtx(ctx, 100*time.Microsecond) {
				<-done
				return acked, nil
			}
		}
		for j, i := range order {
			if j > 0 && !sleepCtx(ctx, real(p.Stagger)) {
				<-done
				return acked, nil
			}
			if err := f.engines[i].SetModel(models[i], v); err != nil {
				<-done
				return acked, err
			}
			if _, err := sh.Ack(name(i), v); err != nil {
				<-done
				return acked, err
			}
		}
		if err := <-done; err != nil {
			if ctx.Err() != nil {
				return acked, nil
			}
			return acked, err
		}
		acked++
	}
}
