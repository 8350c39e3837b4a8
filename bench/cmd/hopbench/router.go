package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"

	"github.com/asyncrl/asyncrl/actors/router/proxy"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/wiring"
)

type strs []string

func (s *strs) String() string     { return fmt.Sprint(*s) }
func (s *strs) Set(v string) error { *s = append(*s, v); return nil }

// routerMain serves the router as `asyncrl router` builds it (the default
// run config's router section, served by Router.Serve with --front),
// plus net/http/pprof on --pprof, for profiling the hop:
// hopbench router --listen A --policy P --front F --engine U… --pprof B.
func routerMain(args []string) error {
	fs := flag.NewFlagSet("router", flag.ExitOnError)
	var engines strs
	listen := fs.String("listen", "127.0.0.1:0", "address to serve on")
	pol := fs.String("policy", "sticky_least_loaded", "routing policy")
	pp := fs.String("pprof", "", "serve /debug/pprof/ on this address")
	front := fs.String("front", "fast", "HTTP front end: fast or net_http")
	fs.Var(&engines, "engine", "engine base URL (repeatable)")
	_ = fs.Parse(args)
	cfg := config.Default()
	cfg.Router.Policy = config.RouterPolicy(*pol)
	pc := wiring.RunRouterConfig(cfg)
	pc.Replicas = engines
	pc.Front = *front
	r, err := proxy.New(pc)
	if err != nil {
		return err
	}
	defer func() { _ = r.Shutdown(context.Background()) }()
	if *pp != "" {
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		go func() { _ = http.ListenAndServe(*pp, mux) }()
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	return r.Serve(ln)
}
