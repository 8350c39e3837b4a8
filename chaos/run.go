package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/asyncrl/asyncrl/chaos/faultproxy"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/transport"
)

// warmupWithin bounds the wait for Config.WarmupSteps.
const warmupWithin = 60 * time.Second

var errNoWarmup = errors.New("the loop made no progress before the faults")

// runConfig derives the node's configuration from the chaos config.
func runConfig(cfg Config, dir string) config.Config {
	rc := cfg.Run
	rc.Run.ID = "chaos"
	rc.Run.Seed = cfg.Seed
	rc.Run.Steps = 1 << 30 // the session ends on Duration, not on steps
	rc.Run.DataDir = dir
	rc.Run.ReportDir = filepath.Join(dir, "report")
	rc.Bus.NATSURL = "" // embedded
	rc.Bus.JetStreamDir = filepath.Join(dir, "jetstream")
	rc.Trainer.Backend = config.BackendRemote // versions become checkpoints the fleet loads
	rc.Publisher.SyncDir = filepath.Join(dir, "weights")
	rc.Engines.Count = 1 // required by the node; taken out of the router
	// A blackholed turn is given up after 3 s and retried elsewhere,
	// instead of holding its trajectory for a minute.
	rc.Rollout.TurnTimeout = min(rc.Rollout.TurnTimeout, 3*time.Second)
	// Probe often so a blackholed or killed engine leaves the rotation
	// within a fault's hold.
	rc.Router.HealthCheckInterval = min(rc.Router.HealthCheckInterval, 200*time.Millisecond)
	rc.Router.HealthCheckTimeout = min(rc.Router.HealthCheckTimeout, 300*time.Millisecond)
	rc.Router.UnhealthyThreshold = min(rc.Router.UnhealthyThreshold, 2)
	rc.Metrics.Listen = ""
	return rc
}

// Run plays a chaos session (see the package contract). The report is
// returned whenever the session ran; err is ErrViolation (wrapped) when an
// invariant failed, or what stopped the session from running.
func Run(ctx context.Context, cfg Config) (Report, error) {
	return run(ctx, cfg, false)
}

// run is Run with the test-only planted bug switch (see fleet.plantForget):
// set up the node, the fleet and the trainer worker (session.go), warm up,
// play the schedule, heal, wait for recovery, audit and judge.
func run(ctx context.Context, cfg Config, plantForget bool) (Report, error) {
	start := time.Now()
	rep := Report{Seed: cfg.Seed, Duration: cfg.Duration}
	if err := cfg.Validate(); err != nil {
		return rep, err
	}
	s := &session{cfg: cfg, start: start, progress: cfg.Progress}
	if s.progress == nil {
		s.progress = io.Discard
	}
	defer s.close()
	if err := s.setUp(ctx, plantForget); err != nil {
		return rep, err
	}
	if err := s.warmUp(ctx); err != nil {
		return rep, err
	}
	// Faults are played for Duration; the node's Wait ends early only when
	// the run fails (for example the filter starves the trainer).
	// Schedule offsets count from here, as Duration does.
	faultsStart := time.Now()
	dctx, dcancel := context.WithTimeout(ctx, cfg.Duration)
	defer dcancel()
	waitErr := make(chan error, 1)
	go func() {
		_, err := s.n.Wait(dctx)
		waitErr <- err
		dcancel()
	}()
	played, injectErrs := play(dctx, faultsStart, Schedule(cfg), target{fl: s.fl, bus: s.n.Bus()}, s.progress)
	healErrs := healAll(s.fl)
	runErr := <-waitErr
	atHeal := int(s.steps.Load())
	fmt.Fprintf(s.progress, "%8.3fs healed every fault; %d steps so far, waiting for recovery\n", time.Since(faultsStart).Seconds(), atHeal)
	if runErr == nil {
		s.recover(ctx, atHeal)
	}
	ev, workerErr, auditErr := s.evidence(atHeal, runErr, &rep)

	rep.Injected = played
	rep.Faults = countFaults(cfg.kinds(), played)
	rep.Invariants = Check(ev)
	rep.Wall = time.Since(start)
	if err := ctx.Err(); err != nil {
		// Stopped early (Ctrl-C): the verdicts are printed, but progress
		// and convergence were not given their chance.
		rep.Interrupted = true
		return rep, fmt.Errorf("chaos: interrupted after %v: %w", time.Since(start).Round(time.Millisecond), err)
	}
	if err := errors.Join(runErr, workerErr, auditErr, errors.Join(injectErrs...), errors.Join(healErrs...)); err != nil {
		return rep, fmt.Errorf("chaos: the session did not run cleanly: %w", err)
	}
	if !rep.OK() {
		return rep, fmt.Errorf("%w: seed %d: %d of %d invariants broken", ErrViolation, cfg.Seed, len(rep.Violations()), len(rep.Invariants))
	}
	return rep, nil
}

func allAt(vs []int64, v int64) bool {
	for _, x := range vs {
		if x != v {
			return false
		}
	}
	return true
}

// event is one step of playing the schedule: a fault's start or its heal.
type event struct {
	at   time.Duration
	heal bool
	f    Fault
}

// play injects the schedule on the wall clock (offsets from start) until
// it is done or ctx ends; faults still active then are left to healAll.
func play(ctx context.Context, start time.Time, sched []Fault, tg target, progress io.Writer) ([]Fault, []error) {
	var evs []event
	for _, f := range sched {
		evs = append(evs, event{at: f.At, f: f})
		if !busKind(f.Kind) {
			evs = append(evs, event{at: f.At + f.Hold, heal: true, f: f})
		}
	}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].at < evs[j].at })
	var played []Fault
	var errs []error
	// before holds each engine's proxy counters when its fault started, so
	// the heal can tell what the fault did.
	before := map[int]faultproxy.Stats{}
	idx := map[int]int{} // engine → index in played of its active fault
	healOne := func(engine int) {
		i, ok := idx[engine]
		if !ok {
			return
		}
		delete(idx, engine)
		f := &played[i]
		if err := heal(tg.fl, *f); err != nil {
			errs = append(errs, err)
			return
		}
		f.Effect = effect(f.Kind, before[engine], tg.fl.members[engine].proxy.Stats())
	}
	for _, ev := range evs {
		t := time.NewTimer(time.Until(start.Add(ev.at)))
		select {
		case <-ctx.Done():
			t.Stop()
			// Time is up: heal what is still active, so its effect counts.
			for engine := range tg.fl.members {
				healOne(engine)
			}
			return played, errs
		case <-t.C:
		}
		if ev.heal {
			healOne(ev.f.Engine)
			continue
		}
		if ev.f.Engine >= 0 {
			before[ev.f.Engine] = tg.fl.members[ev.f.Engine].proxy.Stats()
		}
		if err := inject(tg, ev.f); err != nil {
			errs = append(errs, err)
			continue
		}
		if ev.f.Engine >= 0 {
			idx[ev.f.Engine] = len(played)
		}
		played = append(played, ev.f)
		fmt.Fprintf(progress, "%s\n", ev.f)
	}
	return played, errs
}

// target is what faults hit: the fleet, and the node's bus.
type target struct {
	fl  *fleet
	bus transport.Bus
}

// effect is what a healed fault did, from its proxy's counters when it
// started and when it healed: chunks delayed, connections reset, or
// connections blackholed plus chunks held; 1 for an engine restarted.
func effect(kind string, a, b faultproxy.Stats) int64 {
	switch kind {
	case KindLatency:
		return b.Delayed - a.Delayed
	case KindReset:
		return b.Reset - a.Reset
	case KindBlackhole:
		return b.Blackholed - a.Blackholed + b.Held - a.Held
	case KindEngineKill:
		return 1 // healed: restarted on the same port
	}
	return 0
}

func inject(tg target, f Fault) error {
	fl := tg.fl
	if f.Kind == KindBusReconnect {
		nc, ok := tg.bus.(interface{ Conn() *nats.Conn })
		if !ok {
			return fmt.Errorf("chaos: %s: the node's bus is not NATS", f.Kind)
		}
		return nc.Conn().ForceReconnect()
	}
	p := fl.members[f.Engine].proxy
	switch f.Kind {
	case KindEngineKill:
		return fl.kill(f.Engine)
	case KindLatency:
		return p.Set(faultproxy.Fault{Kind: faultproxy.Latency, Delay: f.Delay})
	case KindReset:
		return p.Set(faultproxy.Fault{Kind: faultproxy.Reset})
	case KindBlackhole:
		return p.Set(faultproxy.Fault{Kind: faultproxy.Blackhole})
	}
	return fmt.Errorf("chaos: unknown fault kind %q", f.Kind)
}

func heal(fl *fleet, f Fault) error {
	if f.Kind == KindEngineKill {
		return fl.restart(f.Engine)
	}
	return fl.members[f.Engine].proxy.Set(faultproxy.Fault{Kind: faultproxy.Pass})
}

// healAll ends every fault: proxies pass, killed engines restart.
func healAll(fl *fleet) []error {
	var errs []error
	for i, mb := range fl.members {
		if err := mb.proxy.Set(faultproxy.Fault{Kind: faultproxy.Pass}); err != nil {
			errs = append(errs, err)
		}
		if err := fl.restart(i); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// watcher samples the router's replica list and the engines' versions:
// a version that goes down, or a router that credits an engine with more
// than it serves, is a violation.
type watcher struct {
	fl     *fleet
	router string
	httpc  *http.Client

	mu         sync.Mutex
	last       map[string]int64
	lastMin    int64
	drops      []string
	overclaims []string
	samples    int
}

func newWatcher(fl *fleet, router string) *watcher {
	return &watcher{fl: fl, router: router, httpc: &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil}},
		last: map[string]int64{}}
}

func (w *watcher) run(ctx context.Context) {
	defer w.httpc.CloseIdleConnections()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.sample(ctx)
	}
}

type replicasJSON struct {
	MinVersion int64 `json:"min_version"`
	Replicas   []struct {
		URL     string `json:"url"`
		Version int64  `json:"version"`
	} `json:"replicas"`
}

func (w *watcher) sample(ctx context.Context) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.router+"/admin/replicas", nil)
	if err != nil {
		return
	}
	resp, err := w.httpc.Do(req)
	if err != nil {
		return
	}
	var rj replicasJSON
	err = json.NewDecoder(resp.Body).Decode(&rj)
	resp.Body.Close()
	if err != nil {
		return
	}
	// Read after the router: engines only move forward, so a correct
	// router's version is ≤ what the engine serves by now.
	served := w.fl.engineVersions()
	byURL := map[string]int{}
	for i, u := range w.fl.URLs() {
		byURL[u] = i
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.samples++
	if rj.MinVersion < w.lastMin {
		w.drops = append(w.drops, fmt.Sprintf("router min_version %d → %d", w.lastMin, rj.MinVersion))
	}
	w.lastMin = max(w.lastMin, rj.MinVersion)
	for _, r := range rj.Replicas {
		if prev, ok := w.last[r.URL]; ok && r.Version < prev {
			w.drops = append(w.drops, fmt.Sprintf("%s: v%d → v%d", r.URL, prev, r.Version))
		}
		w.last[r.URL] = max(w.last[r.URL], r.Version)
		if i, ok := byURL[r.URL]; ok && served[i] >= 0 && r.Version > served[i] {
			w.overclaims = append(w.overclaims, fmt.Sprintf("engine %d: router v%d, engine v%d", i, r.Version, served[i]))
		}
	}
}

func (w *watcher) results() (drops, overclaims []string, samples int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.drops...), append([]string(nil), w.overclaims...), w.samples
}
