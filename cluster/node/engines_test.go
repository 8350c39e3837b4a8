package node

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/actors/publisher"
	"github.com/asyncrl/asyncrl/actors/router/proxy"
	"github.com/asyncrl/asyncrl/cluster/localengine"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/engine"
	"github.com/asyncrl/asyncrl/internal/syncbuf"
	pmodel "github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/wiring"
)

// updates counts engine's "weights updated" lines in the log.
func updates(log *syncbuf.Buffer, engine string) int {
	n := 0
	for _, line := range strings.Split(log.String(), "\n") {
		if strings.Contains(line, `"engine":"`+engine+`"`) && strings.Contains(line, "weights updated") {
			n++
		}
	}
	return n
}

// TestInProcPublishOnSomeEngines: publisher.mode full. A version that one
// engine takes and another refuses (it serves a later version: a version
// decrease) is published — Publish returns nil, as the Publisher
// contract says of a version routable on some engine — and the router's
// minimum moves to it. A try again of the version after a failure no
// engine took (the trainer's retry) swaps only the engines that do not
// serve it: the engine that took it is not paused and swapped again.
func TestInProcPublishOnSomeEngines(t *testing.T) {
	cfg := config.Default()
	cfg.Engines.Count = 2
	m, err := pmodel.New(wiring.PolicyModel(cfg), 1)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	es, err := localengine.Start(cfg.Engines, m, 1, zerolog.New(logs), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer localengine.StopAll(es)
	r, err := proxy.New(routerConfig(cfg, []string{es[0].URL, es[1].URL}, zerolog.Nop()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Shutdown(context.Background()) }()
	p := &inProcPublisher{mode: "keep", router: r, log: zerolog.Nop(), engines: es}
	ctx := context.Background()
	if err := es[1].E.SetModel(m, 5); err != nil { // engine-1 refuses versions below 5
		t.Fatal(err)
	}
	if err := p.Publish(ctx, publisher.Weights{Model: m}, 3); err != nil {
		t.Fatalf("version 3, taken by engine-0 and refused by engine-1: Publish = %v, want nil (routable on engine-0)", err)
	}
	if v := es[0].E.Version(); v != 3 {
		t.Fatalf("engine-0 serves version %d, want 3", v)
	}
	if got := r.MinVersion(); got != 3 {
		t.Fatalf("the router's minimum version is %d, want 3", got)
	}
	// The same version again (a retry; a remote worker's repeat) swaps
	// only the engines that do not serve it: engine-0 is not paused and
	// swapped again, engine-1 is tried again and refuses again.
	if n := updates(logs, "engine-0"); n != 1 {
		t.Fatalf("engine-0 logged %d weight updates for version 3, want 1", n)
	}
	if err := p.Publish(ctx, publisher.Weights{Model: m}, 3); err != nil {
		t.Fatalf("version 3 again: Publish = %v, want nil", err)
	}
	if n := updates(logs, "engine-0"); n != 1 {
		t.Fatalf("engine-0, which serves version 3, was swapped again by its retry (%d updates)", n)
	}
	// No engine takes version 4 (engine-1 serves 5; engine-0 stopped):
	// an error naming the refusal.
	if err := es[0].Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Publish(ctx, publisher.Weights{Model: m}, 4); !errors.Is(err, engine.ErrVersionDecrease) {
		t.Fatalf("version 4, taken by no engine: Publish = %v, want engine-1's %v", err, engine.ErrVersionDecrease)
	}
}
