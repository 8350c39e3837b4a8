package server_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/cluster/localengine"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/internal/wiring"
	"github.com/asyncrl/asyncrl/tinker/client"
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
