package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/asyncrl/asyncrl/actors/publisher/tracker"
	"github.com/asyncrl/asyncrl/actors/router/policy"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/engine/driver"
)

// tinker.sampler_weights: version. For one model on its own engines, a
// sampler checkpoint is published the way a run publishes a trained step:
// every engine loads it as a full checkpoint with the next version
// number (the vLLM driver's load_checkpoint, the path a run's weight sync
// takes for a full version), the router records each engine's version as
// the engine confirms it, and once all have loaded (or failed), the
// router's minimum version is raised to it. From then on the router sends
// no sample to an engine that did not load it — the version gate of a run
// — so a sample never comes from older weights. The engines serve one
// checkpoint at a time: sampling a path published earlier is refused.
//
// The decisions are the run's version tracker's (actors/publisher/tracker,
// the core the weight publisher's shell and the simulator step): the next
// version number, which engines are behind and what each loads (a
// sampler checkpoint is a whole checkpoint, published NoDelta, so every
// plan is a full load of the newest), each engine's version as it
// confirms, and the minimum version the router may route to. The server
// is the tracker's shell: it serialises it under engMu and carries out
// the loads. A version no engine loaded stays the tracker's (versions
// only go up, so a version number never names two checkpoints): the
// router's minimum is not raised to it, the engines keep serving the
// previous checkpoint, and the next save is the version after it.

// versionState is the published sampler checkpoint (engMu).
type versionState struct {
	version int64
	path    string // tinker://… of the checkpoint the engines serve
	dir     string
}

func (s *Server) versionMode() bool { return s.cfg.Tinker.SamplerWeights == config.SamplerVersion }

// publishSampler makes the sampler checkpoint at dir servable: a LoRA
// adapter on every engine, or (version mode) the engines' next version.
func (s *Server) publishSampler(p ckptPath, dir string) error {
	if !s.versionMode() {
		return s.ensureAdapter(adapterName(p), dir, true)
	}
	_, err := s.publishVersion(p, dir)
	return err
}

// publishVersion publishes dir as the tracker's next version, loads it
// on every engine the tracker says is behind, records each load in the
// tracker and the router, then raises the router's minimum version to
// the tracker's. Engines that fail keep their old version and get no
// traffic; it is an error only when none loaded it.
func (s *Server) publishVersion(p ckptPath, dir string) (int64, error) {
	s.engMu.Lock()
	defer s.engMu.Unlock()
	if len(s.engines) == 0 {
		return 0, errors.New("no engine is in sampling yet")
	}
	v := s.versions.Target() + 1
	// A whole checkpoint: no delta leads to it. Its size only ranks plans,
	// and every plan through a NoDelta version is a full load.
	cmds, err := s.versions.Publish(tracker.VersionInfo{Version: v, FullBytes: 1, NoDelta: true})
	if err != nil {
		return 0, fmt.Errorf("publishing %s as version %d: %w", p, v, err)
	}
	var errs []error
	loaded := 0
	for _, c := range cmds {
		if err := s.loadPlan(c, dir); err != nil {
			s.log.Warn().Err(err).Str("engine", c.Engine).Int64("version", v).Msg("engine did not load the sampler checkpoint; the router's version gate keeps samples off it")
			errs = append(errs, err)
			continue
		}
		loaded++
	}
	if loaded == 0 {
		return 0, fmt.Errorf("no engine loaded %s as version %d: %w", p, v, errors.Join(errs...))
	}
	if err := s.router.Apply(policy.RaiseMinVersion{Version: s.versions.MinRoutable()}); err != nil {
		return 0, fmt.Errorf("raising the router's minimum version to %d: %w", s.versions.MinRoutable(), err)
	}
	s.published = versionState{version: v, path: p.String(), dir: dir}
	s.met.samplerVersion.Set(float64(v))
	s.log.Info().Str("path", p.String()).Int64("version", v).Int("engines", loaded).Msg("sampler checkpoint published as a version")
	return v, nil
}

// loadPlan carries out the tracker's command for one engine: a full load
// of dir, the newest version's checkpoint (the only plan a NoDelta version
// allows), then the engine's ack in the tracker and its version in the
// router (engMu held).
func (s *Server) loadPlan(c tracker.Command, dir string) error {
	if c.Plan.Full != c.Plan.Target || len(c.Plan.Deltas) > 0 {
		return fmt.Errorf("engine %s: %s: a sampler checkpoint is loaded whole", c.Engine, c.Plan)
	}
	if err := s.loadVersionOn(c.Engine, dir, c.Plan.Target); err != nil {
		return err
	}
	if _, err := s.versions.Ack(c.Engine, c.Plan.Target); err != nil {
		return err
	}
	return s.router.Apply(policy.SetVersion{URL: c.Engine, Version: c.Plan.Target})
}

// loadVersionOn loads the full checkpoint dir on engine url as version v
// through the vLLM driver (the built-in engine is driven the same way).
func (s *Server) loadVersionOn(url, dir string, v int64) error {
	d, err := driver.New(driver.KindVLLM, url, driver.Options{Client: s.samples.client, Model: s.cfg.BaseModel, APIKey: s.cfg.EngineAPIKey})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	return d.LoadCheckpoint(ctx, dir, v)
}

// joinVersion registers an engine that joins with the tracker (serving
// the base, version 0) and loads on it the published checkpoint — the
// one the router's minimum admits, the tracker's target unless a newer
// version reached no engine — before the router may route to it (engMu
// held); it returns the version the engine serves. An engine that cannot
// load it is not registered.
func (s *Server) joinVersion(url string) (int64, error) {
	if !s.versionMode() {
		return 0, nil
	}
	if _, err := s.versions.Join(url, 0); err != nil {
		return 0, err
	}
	v := s.published.version
	if v == 0 {
		return 0, nil
	}
	if err := s.loadVersionOn(url, s.published.dir, v); err != nil {
		s.versions.Leave(url)
		return 0, err
	}
	if _, err := s.versions.Ack(url, v); err != nil {
		s.versions.Leave(url)
		return 0, err
	}
	return v, nil
}

// leaveVersion forgets an engine that left sampling (engMu held).
func (s *Server) leaveVersion(url string) { s.versions.Leave(url) }

// versionModel is the engine model name serving sampler path p in version
// mode: the base name while p is the published checkpoint.
func (s *Server) versionModel(p ckptPath) (string, error) {
	s.engMu.Lock()
	cur := s.published
	s.engMu.Unlock()
	if cur.path != p.String() {
		// 400, not 409: the sampling client retries 409 for as long as its
		// progress timeout, 2 h (is_retryable_status_code and RetryConfig
		// in src/tinker/lib/retry_handler.py, tinker 6b025363/d595dc2b).
		if cur.path == "" {
			return "", httpErr(http.StatusBadRequest, "sampler checkpoint %s is not published (tinker.sampler_weights: version; the server restarted?): save_weights_for_sampler again", p)
		}
		return "", httpErr(http.StatusBadRequest, "the engines serve %s (version %d), not %s: with tinker.sampler_weights: version one sampler checkpoint is served at a time (adapter mode serves many)", cur.path, cur.version, p)
	}
	return s.cfg.BaseModel, nil
}
