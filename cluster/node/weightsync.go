package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/asyncrl/asyncrl/actors/publisher"
	"github.com/asyncrl/asyncrl/actors/router/policy"
	"github.com/asyncrl/asyncrl/actors/router/proxy"
	"github.com/asyncrl/asyncrl/cluster/weightsync"
	"github.com/asyncrl/asyncrl/config"
	pol "github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/weights/delta"
	"github.com/asyncrl/asyncrl/wiring"
)

// weightSync is publisher.mode delta (cluster/weightsync) as the node
// wires it: the Sync, its publisher shell, and the engines of other nodes
// (remote.go) its commands go to in a cluster term.
type weightSync struct {
	*weightsync.Sync
	shell *publisher.Shell
	// remote is set by startRemote before the first engine joins.
	remote *EngineSet
}

// remoteEngines is the Sync's Remote: the remote engines, once there.
func (w *weightSync) remoteEngines() weightsync.Remote {
	if w.remote == nil {
		return nil
	}
	return remoteAdapter{w.remote}
}

// remoteAdapter is a EngineSet as a weightsync.Remote.
type remoteAdapter struct{ r *EngineSet }

func (a remoteAdapter) Dispatch(engine string, target int64) bool {
	return a.r.dispatch(engine, target)
}
func (a remoteAdapter) WaitEngines(ctx context.Context) error { return a.r.waitEngines(ctx) }
func (a remoteAdapter) WaitServed(ctx context.Context, version int64) error {
	return a.r.waitServed(ctx, version)
}

// routerSink tells the router proxy what the publisher shell decides.
type routerSink struct{ r *proxy.Router }

func (s routerSink) SetVersion(url string, v int64) error {
	return s.r.Apply(policy.SetVersion{URL: url, Version: v})
}

func (s routerSink) SetMinVersion(v int64) error {
	return s.r.Apply(policy.SetMinVersion{Version: v})
}

// startWeightSync builds the weight sync in the mode of
// publisher.transport, starts the remote engines' side in a cluster term,
// and joins every driven engine at version 0.
func (n *Node) startWeightSync(ctx context.Context, baseDir string) (*weightSync, error) {
	cfg := n.cfg
	l := weightsync.LayoutFor(cfg)
	qs, err := weightsync.SchemeFor(cfg) // publisher.quantize
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	stage := filepath.Join(l.Publisher, "staging")
	if err := os.MkdirAll(stage, 0o755); err != nil {
		return nil, fmt.Errorf("node: publisher dir: %w", err)
	}
	mode, err := n.weightSyncMode(ctx, l, baseDir, stage)
	if err != nil {
		return nil, err
	}
	w := &weightSync{}
	s, err := weightsync.New(weightsync.Config{RunID: cfg.Run.ID, Quantize: qs, PauseMode: string(cfg.Trainer.PauseMode), Logger: n.opts.Logger,
		Registerer: n.reg, Bus: n.bus, Router: routerSink{n.router},
		// The publisher keeps routing engines within the run's staleness
		// budget (router.max_version_lag), so that the router's hard
		// minimum leaves a replica that is still loading a publish its
		// sessions (issue 15).
		Tracker: wiring.PublisherTracker(cfg), Acks: n.subj.AcksAll, MinVersion: n.subj.Weights,
		BaseDir: baseDir, Stage: stage, BeforeApply: n.hooks.beforeApply, BeforeAnnounce: n.opts.BeforeAnnounce,
		Remote: w.remoteEngines}, mode)
	if err != nil {
		return nil, err
	}
	w.Sync, w.shell = s, s.Shell()
	if n.opts.Remote != nil {
		n.phase("weight store open")
		if err := uploadBase(ctx, weightsync.StoreOf(s), baseDir); err != nil {
			w.Close()
			return nil, err
		}
		n.phase("version 0 uploaded to the term's bucket")
		n.wsync = w // startRemote registers the members' engines with it
		if err := n.startRemote(ctx, n.subj.WeightsBucket); err != nil {
			w.Close()
			return nil, err
		}
	}
	for i, d := range n.driven { // with the data plane only the node's own: checkExternal refuses external engines there
		if d.Local == nil {
			// An engine started elsewhere serves weights of its own: the
			// run's version 0 goes in before it is registered.
			if err := d.LoadBase(ctx, baseDir, string(cfg.Trainer.PauseMode)); err != nil {
				w.Close()
				return nil, err
			}
		}
		if err := w.Join(i, d); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// weightSyncMode is publisher.transport's mode: the data plane (no store
// and no receivers; the agents pull each version into memory), or the
// store with a receiver per engine.
func (n *Node) weightSyncMode(ctx context.Context, l weightsync.Layout, baseDir, stage string) (weightsync.Mode, error) {
	cfg := n.cfg
	if cfg.Publisher.Transport == config.TransportDataPlane {
		if cfg.Trainer.Backend == config.BackendRemote {
			// A remote trainer's versions would need their own offers and
			// the worker's version bookkeeping (worker.go reads the delta
			// publisher).
			return nil, fmt.Errorf("%w: publisher.transport dataplane needs trainer.backend builtin", ErrConfig)
		}
		base, err := pol.LoadServing(baseDir)
		if err != nil {
			return nil, fmt.Errorf("node: base checkpoint: %w", err)
		}
		names := make([]string, len(n.engines))
		for i, le := range n.engines {
			names[i] = le.Name
		}
		return weightsync.DataPlane(cfg.Run.ID, base.Config(), names, n.hooks.corrupt)
	}
	st, err := n.weightStore(ctx)
	if err != nil {
		return nil, err
	}
	pcfg := delta.DefaultPublisherConfig()
	pcfg.Encode.Level = cfg.Publisher.ZstdLevel
	pcfg.Encode.MaxFileSizeGB = cfg.Publisher.MaxFileSizeGB
	pcfg.Encode.SpoolDir = stage
	pcfg.FullEvery = int64(cfg.Publisher.FullCheckpointEvery)
	return weightsync.Store(ctx, st, pcfg, baseDir, l.Receivers, n.reg)
}
