package agent

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/asyncrl/asyncrl/cluster/discovery"
	"github.com/asyncrl/asyncrl/cluster/placement"
	"github.com/asyncrl/asyncrl/tinker/server"
)

// tinkerRole is the tinker role: a Tinker API server (tinker/server) on
// this node, whose training futures live in the cluster's JetStream (the
// node's bus, the bucket replicated as the node's streams, keys under the
// node's name) and which samples on the cluster's engines: those the
// members advertise in gossip (and tinker.engine_urls), through the
// server's router. A sync loop keeps the server's engine set equal to
// the live members' engines.
type tinkerRole struct {
	run  *server.Running
	kick chan struct{} // a membership change: sync now
}

// hasTinker reports whether the node runs the tinker role; "all" does
// not include it (placement.Tinker).
func (c Config) hasTinker() bool { return slices.Contains(c.Roles, placement.Tinker) }

// startTinker starts the server on the node's bus (tinker.listen, or
// Config.TinkerListen) with no engines of its own.
func (a *Agent) startTinker(ctx context.Context) error {
	c := a.cfg.Run
	if c.Tinker.DataDir == "" {
		// One data dir per node: nodes of one machine share run.data_dir.
		c.Tinker.DataDir = filepath.Join(c.Run.DataDir, a.cfg.Name, "tinker")
	}
	r, err := server.Start(ctx, c, server.Options{Listen: a.cfg.TinkerListen, APIKey: a.cfg.TinkerAPIKey,
		Log: a.log.With().Str("component", "tinker").Logger(), NATS: a.bus.Conn(), NoLocalEngines: true,
		FutureKeyPrefix: a.cfg.Name + ".", FutureReplicas: a.cfg.Replicas})
	if err != nil {
		return fmt.Errorf("node: tinker role: %w", err)
	}
	a.tinker = &tinkerRole{run: r, kick: make(chan struct{}, 1)}
	a.event("tinker %s", r.URL)
	return nil
}

// TinkerURL is the Tinker API's root (http://host:port), "" without the
// tinker role.
func (a *Agent) TinkerURL() string {
	if a.tinker == nil {
		return ""
	}
	return a.tinker.run.URL
}

// TinkerServer is the role's server (nil without the tinker role).
func (a *Agent) TinkerServer() *server.Server {
	if a.tinker == nil {
		return nil
	}
	return a.tinker.run.Server
}

// kickTinker asks the tinker role's sync loop to look at the members now.
func (a *Agent) kickTinker() {
	if a.tinker == nil {
		return
	}
	select {
	case a.tinker.kick <- struct{}{}:
	default:
	}
}

// syncTinkerEngines runs until ctx ends: on every membership change, and
// every second (an engine that could not be added is tried again), the
// server's engines are made the members' engines.
func (a *Agent) syncTinkerEngines(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		a.applyTinkerEngines(a.wantedTinkerEngines())
		select {
		case <-ctx.Done():
			return
		case <-a.tinker.kick:
		case <-t.C:
		}
	}
}

// wantedTinkerEngines lists the engines the live members advertise, and
// tinker.engine_urls.
func (a *Agent) wantedTinkerEngines() []string {
	want := slices.Clone(a.cfg.Run.Tinker.EngineURLs)
	for _, m := range a.ms.Members() {
		want = append(want, discovery.EngineURLs(m.Meta.Endpoints)...)
	}
	slices.Sort(want)
	return slices.Compact(want)
}

// applyTinkerEngines adds the wanted engines the server lacks and removes
// the ones no member advertises any more.
func (a *Agent) applyTinkerEngines(want []string) {
	s := a.tinker.run.Server
	have := s.Engines()
	for _, u := range have {
		if !slices.Contains(want, u) {
			s.RemoveEngine(u)
			a.event("tinker engine removed %s", u)
		}
	}
	for _, u := range want {
		if slices.Contains(have, u) {
			continue
		}
		if err := s.AddEngine(u); err != nil {
			a.log.Warn().Err(err).Str("engine", u).Msg("node: tinker role: engine not added yet")
			continue
		}
		a.event("tinker engine added %s", u)
	}
}
