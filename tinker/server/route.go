package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/asyncrl/asyncrl/actors/router/policy"
	"github.com/asyncrl/asyncrl/actors/router/proxy"
	"github.com/asyncrl/asyncrl/internal/netx"
)

// The server samples through asyncrl's router (actors/router/proxy), run
// in-process on a loopback listener: requests of one sampling session
// carry its id in X-Session-ID, so the router keeps them on one replica
// (its KV cache holds the session's prompts) while it balances sessions
// by load, retries a request whose replica refused the connection on
// another one, and takes a replica that keeps failing out of routing
// until its health probes pass again.

// startRouter builds the router over the initial engines and serves it
// on 127.0.0.1 (a free port).
func (s *Server) startRouter(urls []string) error {
	rc := proxy.DefaultConfig()
	rc.ListenAddr = "127.0.0.1:0"
	rc.Logger = s.log.With().Str("component", "tinker-router").Logger()
	rc.Registerer = s.cfg.Registry // asyncrl_router_* next to asyncrl_tinker_* on /metrics
	rc.Transport = netx.KeyTransport(nil, s.cfg.EngineAPIKey, nil)
	// Bodies are bounded by the API's own limit; the router adds nothing.
	rc.MaxBodyBytes = max(s.cfg.Tinker.MaxRequestBytes, rc.MaxBodyBytes)
	r, err := proxy.New(rc)
	if err != nil {
		return fmt.Errorf("tinker: router: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = r.Shutdown(context.Background())
		return fmt.Errorf("tinker: router listen: %w", err)
	}
	s.router, s.routerURL = r, "http://"+ln.Addr().String()
	s.routerSrv = &http.Server{Handler: r.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.routerSrv.Serve(ln) }()
	for _, u := range urls {
		if err := s.AddEngine(u); err != nil {
			return err
		}
	}
	return nil
}

// stopRouter stops the router's listener and loops.
func (s *Server) stopRouter() {
	if s.routerSrv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = s.routerSrv.Shutdown(ctx)
	_ = s.router.Shutdown(ctx)
	_ = s.routerSrv.Close()
}

// AddEngine puts a vLLM-compatible engine into sampling: the sampler
// checkpoints loaded so far are loaded on it first, so a session routed to
// it finds its adapter. Adding an engine already in is a no-op; an engine
// that cannot load them is not added (the error says which).
func (s *Server) AddEngine(url string) error {
	url = strings.TrimRight(url, "/")
	s.engMu.Lock()
	defer s.engMu.Unlock()
	if slices.Contains(s.engines, url) {
		return nil
	}
	for name, dir := range s.adapterDirs {
		if err := s.loadAdapterOn(url, name, dir); err != nil {
			return fmt.Errorf("tinker: engine %s joins sampling: %w", url, err)
		}
	}
	v, err := s.joinVersion(url)
	if err != nil {
		return fmt.Errorf("tinker: engine %s joins sampling: loading the published sampler checkpoint: %w", url, err)
	}
	if err := s.router.Apply(policy.AddReplica{URL: url, Version: v}); err != nil && !errors.Is(err, policy.ErrDuplicateReplica) {
		return fmt.Errorf("tinker: engine %s: %w", url, err)
	}
	s.engines = append(s.engines, url)
	s.log.Info().Str("engine", url).Int("engines", len(s.engines)).Msg("engine added to sampling")
	return nil
}

// RemoveEngine takes an engine out of sampling (its node left); the
// router forgets its sessions, which move to another replica.
func (s *Server) RemoveEngine(url string) {
	url = strings.TrimRight(url, "/")
	s.engMu.Lock()
	defer s.engMu.Unlock()
	i := slices.Index(s.engines, url)
	if i < 0 {
		return
	}
	s.engines = slices.Delete(s.engines, i, i+1)
	s.leaveVersion(url)
	_ = s.router.Apply(policy.RemoveReplica{URL: url})
	s.log.Info().Str("engine", url).Int("engines", len(s.engines)).Msg("engine removed from sampling")
}

// Engines lists the engines sampled on.
func (s *Server) Engines() []string {
	s.engMu.Lock()
	defer s.engMu.Unlock()
	return slices.Clone(s.engines)
}

// SessionReplica is the engine the router keeps a sampling session on
// (false before its first sample, or after its replica left).
func (s *Server) SessionReplica(samplingSessionID string) (string, bool) {
	v, ok := s.router.Lookup(samplingSessionID)
	return v.Replica, ok
}

// ensureAdapter loads sampler checkpoint dir as LoRA adapter name on
// every engine (vLLM's /v1/load_lora_adapter; the built-in engine loads
// it with its checkpoint loader). Without force a name already loaded is
// not loaded again; with force (a checkpoint saved over) it is reloaded
// in place. Engines that join later load it in AddEngine.
func (s *Server) ensureAdapter(name, dir string, force bool) error {
	s.engMu.Lock()
	defer s.engMu.Unlock()
	if _, ok := s.adapterDirs[name]; ok && !force {
		return nil
	}
	if len(s.engines) == 0 {
		return errors.New("no engine is in sampling yet")
	}
	for _, u := range s.engines {
		if err := s.loadAdapterOn(u, name, dir); err != nil {
			delete(s.adapterDirs, name)
			return err
		}
	}
	s.adapterDirs[name] = dir
	return nil
}

// loadAdapterOn loads one adapter on one engine (engMu held).
func (s *Server) loadAdapterOn(url, name, dir string) error {
	body, _ := json.Marshal(map[string]any{"lora_name": name, "lora_path": dir, "load_inplace": true})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/load_lora_adapter", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.samples.client.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", url, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %d %s", url, resp.StatusCode, bytes.TrimSpace(msg))
	}
	return nil
}
