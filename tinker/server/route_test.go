package server_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/cluster/localengine"
	"github.com/asyncrl/asyncrl/tinker"
	"github.com/asyncrl/asyncrl/tinker/client"
	"github.com/asyncrl/asyncrl/tinker/server"
	"github.com/asyncrl/asyncrl/wiring"
)

// engineTokens is the tokens each of r's engines generated so far.
func engineTokens(r *server.Running) map[string]int64 {
	out := map[string]int64{}
	for _, e := range r.Engines {
		out[e.URL] = e.E.Stats().GenerationTokens
	}
	return out
}

// TestSamplingSessionsStickToReplicas: samples of a sampling session go
// through the router with the session id as its sticky key, so every one
// lands on the replica the router placed the session on (only that
// engine generates tokens for it); when that replica dies, the session's
// next sample is answered by the other one and the session moves there.
func TestSamplingSessionsStickToReplicas(t *testing.T) {
	c := testConfig(t.TempDir())
	c.Engines.Count = 2
	r, cl := start(t, c, "")
	ctx := ctxT(t)
	sess, err := cl.CreateSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	samplers := make([]string, 2)
	for i := range samplers {
		if samplers[i], err = cl.CreateSamplingSession(ctx, sess, int64(i), "asyncrl-policy", ""); err != nil {
			t.Fatal(err)
		}
	}
	home := map[string]string{}
	for round := range 3 {
		for _, sp := range samplers {
			before := engineTokens(r)
			out, err := cl.Sample(ctx, client.SampleRequest(sp, int64(round), []int32{1, 5, 6}, 2, 4, 1))
			if err != nil || len(out.Sequences) != 2 {
				t.Fatalf("sample %s round %d: %+v %v", sp, round, out, err)
			}
			rep, ok := r.Server.SessionReplica(sp)
			if !ok {
				t.Fatalf("the router does not track sampling session %s (no X-Session-ID?)", sp)
			}
			if home[sp] == "" {
				home[sp] = rep
			} else if rep != home[sp] {
				t.Fatalf("round %d: session %s moved from %s to %s", round, sp, home[sp], rep)
			}
			after := engineTokens(r)
			for u := range after {
				if grew := after[u] > before[u]; grew != (u == rep) {
					t.Fatalf("round %d, session %s on %s: engine %s generated %d tokens", round, sp, rep, u, after[u]-before[u])
				}
			}
		}
	}
	// Kill the replica of the first session: its next sample is answered
	// by the other engine (the router retries a refused connection
	// elsewhere) and the session sticks there from then on.
	dead := home[samplers[0]]
	for _, e := range r.Engines {
		if e.URL == dead {
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_ = e.Stop(sctx)
			cancel()
		}
	}
	for round := 3; round < 5; round++ {
		out, err := cl.Sample(ctx, client.SampleRequest(samplers[0], int64(round), []int32{1, 5, 6}, 1, 4, 1))
		if err != nil || len(out.Sequences) != 1 {
			t.Fatalf("sample after its replica died: %+v %v", out, err)
		}
		if rep, ok := r.Server.SessionReplica(samplers[0]); !ok || rep == dead {
			t.Fatalf("session still on the dead replica %s (%s, %v)", dead, rep, ok)
		}
	}
}

// TestEngineJoinsWithAdapters: an engine added after a sampler checkpoint
// was saved loads it before it takes traffic, so a sampling session on
// that checkpoint is served by it once the first engine is gone.
func TestEngineJoinsWithAdapters(t *testing.T) {
	c := testConfig(t.TempDir())
	r, cl := start(t, c, "")
	ctx := ctxT(t)
	sess, model := newModel(t, ctx, cl, 8)
	path, _, err := cl.SaveForSampler(ctx, model, 1, "s1", 0)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := cl.CreateSamplingSession(ctx, sess, 1, "", path)
	if err != nil {
		t.Fatal(err)
	}
	m, err := wiring.InitialPolicy("", uint64(c.Run.Seed))
	if err != nil {
		t.Fatal(err)
	}
	ec := c.Engines
	extra, err := localengine.Start(ec, m, c.Run.Seed, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { localengine.StopAll(extra) })
	if err := r.Server.AddEngine(extra[0].URL); err != nil {
		t.Fatal(err)
	}
	if got := r.Server.Engines(); len(got) != 2 {
		t.Fatalf("engines %v", got)
	}
	r.Server.RemoveEngine(r.Engines[0].URL)
	localengine.StopAll(r.Engines[:1])
	out, err := cl.Sample(ctx, client.SampleRequest(sp, 0, []int32{1, 5, 6}, 1, 4, 1))
	if err != nil || len(out.Sequences) != 1 {
		t.Fatalf("sample on the engine that joined: %+v %v", out, err)
	}
	if rep, _ := r.Server.SessionReplica(sp); rep != extra[0].URL {
		t.Fatalf("served by %q, want the new engine %s", rep, extra[0].URL)
	}
}

// TestSampleWaitsForAnEngine: a sample submitted while no engine is in
// sampling waits (tinker.sample_engine_wait) and is answered once an
// engine joins, instead of failing.
func TestSampleWaitsForAnEngine(t *testing.T) {
	c := testConfig(t.TempDir())
	c.Tinker.SampleEngineWait = 20 * time.Second
	c.Tinker.LongPoll = 300 * time.Millisecond
	r, cl := start(t, c, "")
	ctx := ctxT(t)
	u := r.Engines[0].URL
	r.Server.RemoveEngine(u)
	sess, err := cl.CreateSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := cl.CreateSamplingSession(ctx, sess, 0, "asyncrl-policy", "")
	if err != nil {
		t.Fatal(err)
	}
	id, err := cl.ASample(ctx, client.SampleRequest(sp, 0, []int32{1, 5, 6}, 1, 4, 1))
	if err != nil {
		t.Fatal(err)
	}
	if _, done, err := cl.Poll(ctx, id); err != nil || done {
		t.Fatalf("the sample finished (%v, %v) with no engine in sampling", done, err)
	}
	if err := r.Server.AddEngine(u); err != nil {
		t.Fatal(err)
	}
	var out tinker.SampleResponse
	if err := cl.Wait(ctx, id, &out); err != nil || len(out.Sequences) != 1 {
		t.Fatalf("sample after the engine joined: %+v %v", out, err)
	}
}

// TestEnginesWithAPIKey: with engines.api_key_file set the built-in
// engines refuse keyless requests, and the server sends the key on
// samples and adapter loads (through its router and its own client).
func TestEnginesWithAPIKey(t *testing.T) {
	c := testConfig(t.TempDir())
	keyFile := filepath.Join(t.TempDir(), "engine.key")
	if err := os.WriteFile(keyFile, []byte("engine-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.Engines.APIKeyFile = keyFile
	r, cl := start(t, c, "")
	ctx := ctxT(t)
	resp, err := http.Post(r.Engines[0].URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":[1,5],"max_tokens":1}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a keyless completion got %d, want 401 (the engine is not guarded)", resp.StatusCode)
	}
	_, model := newModel(t, ctx, cl, 8)
	_, sp, err := cl.SaveForSampler(ctx, model, 1, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := cl.Sample(ctx, client.SampleRequest(sp, 0, []int32{1, 5, 6}, 1, 4, 1)); err != nil || len(out.Sequences) != 1 {
		t.Fatalf("sample on key-guarded engines: %+v %v", out, err)
	}
}
