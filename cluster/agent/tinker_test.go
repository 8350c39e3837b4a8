package agent

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/asyncrl/asyncrl/cluster/internal/clustertest"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/internal/syncbuf"
	"github.com/asyncrl/asyncrl/tinker"
	"github.com/asyncrl/asyncrl/tinker/client"
)

// TestTinkerRole: a node with the tinker role serves the Tinker API on
// the engines another node (the engine role) advertises in gossip, keeps
// its training futures in the cluster's JetStream under its own name,
// and drops the engines when their node leaves.
func TestTinkerRole(t *testing.T) {
	url := externalBus(t)
	cfg := agentRunConfig(t, 1)
	cfg.Engines.Count = 2
	cfg.Engines.TimeScale = 0
	cfg.Tinker.LongPoll = 2 * time.Second
	var events syncbuf.Buffer
	eng := testAgent(t, url, Config{Name: "e1", Roles: []string{"engine"}, Run: cfg})
	defer eng.Stop()
	tk := testAgent(t, url, Config{Name: "t1", Roles: []string{"tinker"}, Run: cfg, TinkerListen: "127.0.0.1:0",
		Join: []string{eng.ms.Addr()}, Events: &events})
	defer tk.Stop()
	if eng.TinkerURL() != "" {
		t.Fatalf("a node without the tinker role serves it at %s", eng.TinkerURL())
	}
	want := eng.host.Endpoints()
	clustertest.WaitFor(t, 15*time.Second, "the tinker node to add e1's engines", func() bool {
		got := tk.TinkerServer().Engines()
		return len(got) == 2 && (got[0] == want["engine-0"] || got[0] == want["engine-1"])
	})

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := &client.Client{BaseURL: tk.TinkerURL()}
	sess, err := c.CreateSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	model, err := c.CreateModel(ctx, sess, cfg.Engines.ServedModelName, 0, 8)
	if err != nil {
		t.Fatal(err)
	}
	in := tinker.ForwardBackwardInput{LossFn: "cross_entropy", Data: []tinker.Datum{{
		ModelInput:   tinker.ModelInput{Chunks: []tinker.Chunk{{Type: "encoded_text", Tokens: []int32{1, 10, 11, 12}}}},
		LossFnInputs: map[string]tinker.TensorData{"target_tokens": {Data: []float64{10, 11, 12, 2}, DType: "int64", Shape: []int{4}}}}}}
	fut, err := c.Submit(ctx, "forward_backward", tinker.ForwardBackwardRequest{ModelID: model, SeqID: ptr(int64(1)), ForwardBackwardInput: &in})
	if err != nil {
		t.Fatal(err)
	}
	var out tinker.ForwardBackwardOutput
	if err := c.Wait(ctx, fut, &out); err != nil || out.Metrics["loss:sum"] <= 0 {
		t.Fatalf("forward_backward %+v %v", out, err)
	}
	// The training future is in the cluster's bucket under the node's name.
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(ctx, "asyncrl_tinker_futures")
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, "t1."+fut)
	if err != nil {
		t.Fatalf("future %s not in the cluster's JetStream under t1.: %v", fut, err)
	}
	var rec struct{ State string }
	if err := json.Unmarshal(e.Value(), &rec); err != nil || rec.State != "done" {
		t.Fatalf("stored future %s: %s %v", fut, e.Value(), err)
	}
	// Sampling runs on e1's engines, through the router.
	path, _, err := c.SaveForSampler(ctx, model, 2, "s1", 0)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := c.CreateSamplingSession(ctx, sess, 1, "", path)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Sample(ctx, client.SampleRequest(sp, 0, []int32{1, 10, 11}, 2, 4, 1))
	if err != nil || len(res.Sequences) != 2 {
		t.Fatalf("sample %+v %v", res, err)
	}
	rep, ok := tk.TinkerServer().SessionReplica(sp)
	if !ok || (rep != want["engine-0"] && rep != want["engine-1"]) {
		t.Fatalf("sampled on %q, want one of e1's engines %v", rep, want)
	}
	// The engine node leaves: its engines leave sampling.
	eng.Stop()
	clustertest.WaitFor(t, 15*time.Second, "e1's engines to leave sampling", func() bool { return len(tk.TinkerServer().Engines()) == 0 })
	if !strings.Contains(events.String(), "tinker engine removed "+want["engine-0"]) {
		t.Fatalf("events lack the removal:\n%s", events.String())
	}
}

func ptr[T any](v T) *T { return &v }

// The tinker role refuses sampler_weights: version (the cluster's engine
// versions belong to the run's publisher), before anything starts.
func TestTinkerRoleRefusesVersionMode(t *testing.T) {
	cfg := agentRunConfig(t, 1)
	cfg.Tinker.SamplerWeights = config.SamplerVersion
	_, err := Start(context.Background(), Config{Name: "t1", Roles: []string{"tinker"}, Run: cfg})
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "tinker.sampler_weights") {
		t.Fatalf("err = %v, want ErrConfig naming tinker.sampler_weights", err)
	}
}
