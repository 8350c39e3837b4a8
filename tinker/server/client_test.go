package server_test

import (
	"errors"
	"testing"

	"github.com/asyncrl/asyncrl/tinker"
	"github.com/asyncrl/asyncrl/tinker/client"
)

// TestClientEveryRoute drives every route through tinker/client (the
// route fixtures drive them with the SDK's literal bodies): a model saved,
// trained further, loaded back to the saved state (forward loss equal to
// the one at the save), sampled from its sampler weights, unloaded.
func TestClientEveryRoute(t *testing.T) {
	_, c := start(t, testConfig(t.TempDir()), "key-1")
	ctx := ctxT(t)
	if err := c.Healthz(ctx); err != nil {
		t.Fatal(err)
	}
	if names, err := c.Capabilities(ctx); err != nil || len(names) != 1 || names[0] != "asyncrl-policy" {
		t.Fatalf("capabilities %v %v", names, err)
	}
	if cfg, err := c.ClientConfig(ctx); err != nil || cfg["pjwt_auth_enabled"] != false {
		t.Fatalf("client/config %v %v", cfg, err)
	}
	if err := c.Telemetry(ctx); err != nil {
		t.Fatal(err)
	}
	sess, err := c.CreateSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Heartbeat(ctx, sess); err != nil {
		t.Fatal(err)
	}
	model, err := c.CreateModel(ctx, sess, "asyncrl-policy", 0, 16)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := c.GetInfo(ctx, model); err != nil || info.LoRARank != 16 || info.ModelData.ModelName != "asyncrl-policy" {
		t.Fatalf("get_info %+v %v", info, err)
	}
	in := tinker.ForwardBackwardInput{LossFn: "cross_entropy", Data: []tinker.Datum{sftDatum("rev ab=", "ba")}}
	p := tinker.DefaultAdamParams()
	p.LearningRate = 1e-2
	seq := int64(1)
	step := func() {
		t.Helper()
		if _, err := c.ForwardBackward(ctx, model, seq, in); err != nil {
			t.Fatal(err)
		}
		if _, err := c.OptimStep(ctx, model, seq+1, p); err != nil {
			t.Fatal(err)
		}
		seq += 2
	}
	step()
	path, err := c.SaveWeights(ctx, model, seq, "after1")
	if err != nil {
		t.Fatal(err)
	}
	seq++
	atSave, _ := c.Forward(ctx, model, seq, in)
	seq++
	step()
	step()
	if err := c.LoadWeights(ctx, model, seq, path, true); err != nil {
		t.Fatal(err)
	}
	seq++
	loaded, _ := c.Forward(ctx, model, seq, in)
	seq++
	if loaded.Metrics["loss:sum"] != atSave.Metrics["loss:sum"] {
		t.Fatalf("load_weights did not restore the saved state: loss %v, at the save %v", loaded.Metrics["loss:sum"], atSave.Metrics["loss:sum"])
	}
	spath, _, err := c.SaveForSampler(ctx, model, seq, "s1", 0)
	if err != nil {
		t.Fatal(err)
	}
	seq++
	sampler, err := c.CreateSamplingSession(ctx, sess, 1, "", spath)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := c.GetSampler(ctx, sampler); err != nil || info["model_path"] != spath {
		t.Fatalf("samplers/{id} %v %v", info, err)
	}
	out, err := c.Sample(ctx, client.SampleRequest(sampler, 0, []int32{1, 5, 6}, 3, 4, 1))
	if err != nil || len(out.Sequences) != 3 {
		t.Fatalf("sample %+v %v", out, err)
	}
	if err := c.UnloadModel(ctx, model); err != nil {
		t.Fatal(err)
	}
	var ae *client.APIError
	if _, err := c.Forward(ctx, model, seq, in); !errors.As(err, &ae) || ae.Code != 404 {
		t.Fatalf("forward on an unloaded model: %v, want 404", err)
	}
}
