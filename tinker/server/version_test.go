package server_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/cluster/localengine"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/tinker/client"
	"github.com/asyncrl/asyncrl/wiring"
)

// TestSamplerWeightsAsVersion: with tinker.sampler_weights: version, a
// save_weights_for_sampler is loaded on the engines as their next weight
// version (a full checkpoint) and the router's minimum version rises to
// it. An engine that cannot load it (its weight roots exclude the
// checkpoint) keeps version 0 and gets no sample from then on — the run's
// version gate — while the one that loaded it serves every session. A
// second save is version 2; sampling the first path is then refused, 400
// (a 409 the SDK's sampling client would retry).
func TestSamplerWeightsAsVersion(t *testing.T) {
	c := testConfig(t.TempDir())
	c.Tinker.SamplerWeights = config.SamplerVersion
	c.Tinker.SampleEngineWait = 500 * time.Millisecond
	r, cl := start(t, c, "")
	ctx := ctxT(t)
	good := r.Engines[0]
	m, err := wiring.InitialPolicy("", uint64(c.Run.Seed))
	if err != nil {
		t.Fatal(err)
	}
	ec := c.Engines
	ec.WeightRoots = []string{t.TempDir()} // not the tinker data dir
	bad, err := localengine.Start(ec, m, c.Run.Seed, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { localengine.StopAll(bad) })
	if err := r.Server.AddEngine(bad[0].URL); err != nil {
		t.Fatal(err)
	}
	sess, model := newModel(t, ctx, cl, 8)
	p1, sp1, err := cl.SaveForSampler(ctx, model, 1, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	if v := good.E.Stats().Version; v != 1 {
		t.Fatalf("the engine that could load it serves version %d, want 1", v)
	}
	if v := bad[0].E.Stats().Version; v != 0 {
		t.Fatalf("the engine that could not load it serves version %d, want 0", v)
	}
	badBefore := bad[0].E.Stats().GenerationTokens
	for i := range 4 {
		sp, err := cl.CreateSamplingSession(ctx, sess, int64(10+i), "", p1)
		if err != nil {
			t.Fatal(err)
		}
		out, err := cl.Sample(ctx, client.SampleRequest(sp, 0, []int32{1, 5, 6}, 1, 4, 1))
		if err != nil || len(out.Sequences) != 1 {
			t.Fatalf("sample %d: %+v %v", i, out, err)
		}
		if rep, _ := r.Server.SessionReplica(sp); rep != good.URL {
			t.Fatalf("session %d sampled on %s, want the engine at version 1 (%s)", i, rep, good.URL)
		}
	}
	if got := bad[0].E.Stats().GenerationTokens; got != badBefore {
		t.Fatalf("the engine behind the minimum version generated %d tokens", got-badBefore)
	}
	p2, _, err := cl.SaveForSampler(ctx, model, 2, "", 2)
	if err != nil {
		t.Fatal(err)
	}
	if v := good.E.Stats().Version; v != 2 {
		t.Fatalf("after the second save the engine serves version %d, want 2", v)
	}
	var ae *client.APIError
	if _, err := cl.Sample(ctx, client.SampleRequest(sp1, 1, []int32{1, 5, 6}, 1, 4, 1)); !errors.As(err, &ae) || ae.Code != 400 {
		t.Fatalf("sampling the superseded checkpoint: %v, want 400", err)
	}
	// With the only engine at version 2 gone, the router's minimum
	// version keeps the sample off the engine at version 0: it fails
	// rather than answer from older weights.
	localengine.StopAll(r.Engines[:1])
	sp, err := cl.CreateSamplingSession(ctx, sess, 20, "", p2)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := cl.Sample(ctx, client.SampleRequest(sp, 0, []int32{1, 5, 6}, 1, 4, 1)); err == nil || !strings.Contains(err.Error(), "tinker.sample_engine_wait") {
		t.Fatalf("sampled %+v (%v) with no engine at the published version; want a failure after tinker.sample_engine_wait", out, err)
	}
	if got := bad[0].E.Stats().GenerationTokens; got != badBefore {
		t.Fatalf("the engine behind the minimum version generated %d tokens", got-badBefore)
	}
}

// TestSamplerVersionJoiners: in version mode an engine that joins after a
// save loads the published checkpoint before it is routable (it serves
// that version at once); one that cannot load it is refused and not
// counted by the next save, which every engine in sampling loads as the
// next version — the version tracker's plan for engines behind.
func TestSamplerVersionJoiners(t *testing.T) {
	c := testConfig(t.TempDir())
	c.Tinker.SamplerWeights = config.SamplerVersion
	r, cl := start(t, c, "")
	ctx := ctxT(t)
	m, err := wiring.InitialPolicy("", uint64(c.Run.Seed))
	if err != nil {
		t.Fatal(err)
	}
	_, model := newModel(t, ctx, cl, 8)
	if _, _, err := cl.SaveForSampler(ctx, model, 1, "", 1); err != nil {
		t.Fatal(err)
	}
	late, err := localengine.Start(c.Engines, m, c.Run.Seed, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { localengine.StopAll(late) })
	if v := late[0].E.Stats().Version; v != 0 {
		t.Fatalf("a fresh engine serves version %d", v)
	}
	if err := r.Server.AddEngine(late[0].URL); err != nil {
		t.Fatal(err)
	}
	if v := late[0].E.Stats().Version; v != 1 {
		t.Fatalf("the engine that joined after the save serves version %d, want the published 1", v)
	}
	ec := c.Engines
	ec.WeightRoots = []string{t.TempDir()}                  // not the tinker data dir: it cannot load a sampler checkpoint
	m2, err := wiring.InitialPolicy("", uint64(c.Run.Seed)) // each engine its own model
	if err != nil {
		t.Fatal(err)
	}
	bad, err := localengine.Start(ec, m2, c.Run.Seed, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { localengine.StopAll(bad) })
	if err := r.Server.AddEngine(bad[0].URL); err == nil {
		t.Fatal("an engine that cannot load the published checkpoint joined sampling")
	}
	if got := r.Server.Engines(); len(got) != 2 || slices.Contains(got, bad[0].URL) {
		t.Fatalf("engines in sampling %v, want the first and the late one", got)
	}
	if _, _, err := cl.SaveForSampler(ctx, model, 2, "", 2); err != nil {
		t.Fatal(err)
	}
	for _, e := range []*localengine.Engine{r.Engines[0], late[0]} {
		if v := e.E.Stats().Version; v != 2 {
			t.Errorf("engine %s serves version %d after the second save, want 2", e.URL, v)
		}
	}
	if v := bad[0].E.Stats().Version; v != 0 {
		t.Errorf("the refused engine serves version %d", v)
	}
}

// TestSamplerVersionNoEngineLoaded: a save no engine can load fails and
// raises nothing — the engines keep serving what they served, and the
// router's minimum stays — and the next save, once an engine that can
// load it is in, is published as the version after the failed one
// (versions only go up, as in the run's tracker: a version number never
// names two checkpoints, even on an engine that loaded the failed one
// and then failed to confirm it) and served.
func TestSamplerVersionNoEngineLoaded(t *testing.T) {
	c := testConfig(t.TempDir())
	c.Tinker.SamplerWeights = config.SamplerVersion
	r, cl := start(t, c, "")
	ctx := ctxT(t)
	good := r.Engines[0]
	m, err := wiring.InitialPolicy("", uint64(c.Run.Seed))
	if err != nil {
		t.Fatal(err)
	}
	ec := c.Engines
	ec.WeightRoots = []string{t.TempDir()}
	bad, err := localengine.Start(ec, m, c.Run.Seed, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { localengine.StopAll(bad) })
	r.Server.RemoveEngine(good.URL)
	if err := r.Server.AddEngine(bad[0].URL); err != nil {
		t.Fatal(err) // nothing published yet: nothing to load
	}
	_, model := newModel(t, ctx, cl, 8)
	if _, _, err := cl.SaveForSampler(ctx, model, 1, "", 1); err == nil {
		t.Fatal("a save no engine could load succeeded")
	}
	if err := r.Server.AddEngine(good.URL); err != nil {
		t.Fatal(err)
	}
	if v := good.E.Stats().Version; v != 0 {
		t.Fatalf("after the failed save the engine that rejoined serves version %d, want 0", v)
	}
	_, sp, err := cl.SaveForSampler(ctx, model, 2, "", 2)
	if err != nil {
		t.Fatal(err)
	}
	if v := good.E.Stats().Version; v != 2 {
		t.Fatalf("the save after a failed one: the engine serves version %d, want 2", v)
	}
	out, err := cl.Sample(ctx, client.SampleRequest(sp, 0, []int32{1, 5, 6}, 1, 4, 1))
	if err != nil || len(out.Sequences) != 1 {
		t.Fatalf("sample after the second save: %+v %v", out, err)
	}
	if rep, _ := r.Server.SessionReplica(sp); rep != good.URL {
		t.Fatalf("sampled on %s, want the engine at version 2 (%s)", rep, good.URL)
	}
}
