package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/asyncrl/asyncrl/tinker"
	"github.com/asyncrl/asyncrl/tinker/client"
	"github.com/asyncrl/asyncrl/tinker/wire"
)

// The server driven with the request bodies of the two SDK versions users
// install (tinker/wire/testdata: 0.25.0's protobuf bodies from its own
// encoder, 0.24.1's JSON) and its answers read as each version reads them
// (client.ReadForwardBackward/ReadSample: protobuf by Content-Type;
// 0.25.0 refuses a JSON sample or forward_backward result).

const fixtureDir = "../wire/testdata/"

// sdkVersion is one SDK's wire behaviour.
type sdkVersion struct {
	name   string
	accept string // on retrieve_future for sample/forward/forward_backward results
}

var sdks = []sdkVersion{
	{"0.24.1", client.AcceptProtobufOrJSON},
	{"0.25.0", client.AcceptProtobuf},
}

// splice replaces the leading model_id (1) and seq_id (2) fields of an SDK
// body — request_conv writes them first, in that order — keeping the rest
// of its bytes as the SDK wrote them.
func splice(t *testing.T, body []byte, model string, seq int64) []byte {
	t.Helper()
	rest := body
	for _, want := range []protowire.Number{1, 2} {
		num, typ, n := protowire.ConsumeTag(rest)
		if n < 0 || num != want {
			t.Fatalf("fixture does not start with field %d: %d/%d", want, num, typ)
		}
		m := protowire.ConsumeFieldValue(num, typ, rest[n:])
		if m < 0 {
			t.Fatal("fixture field does not parse")
		}
		rest = rest[n+m:]
	}
	out := protowire.AppendTag(nil, 1, protowire.BytesType)
	out = protowire.AppendString(out, model)
	out = protowire.AppendTag(out, 2, protowire.VarintType)
	out = protowire.AppendVarint(out, uint64(seq))
	return append(out, rest...)
}

// submit sends fixture name as version v sends it; it returns the future.
func (v sdkVersion) submit(t *testing.T, ctx context.Context, c *client.Client, name, model string, seq int64) string {
	t.Helper()
	if v.name == "0.25.0" {
		raw, err := os.ReadFile(fixtureDir + "sdk-0.25.0/" + name + ".pb")
		if err != nil {
			t.Fatal(err)
		}
		id, err := c.SubmitProtobuf(ctx, splice(t, raw, model, seq))
		if err != nil {
			t.Fatalf("%s %s: %v", v.name, name, err)
		}
		return id
	}
	raw, err := os.ReadFile(fixtureDir + "sdk-0.24.1/" + name + ".json")
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatal(err)
	}
	body["model_id"], body["seq_id"] = model, seq
	route := "forward_backward"
	if _, fwd := body["forward_input"]; fwd {
		route = "forward" // 0.24.1's TrainingClient.forward
	}
	b, _ := json.Marshal(body)
	a, err := c.Raw(ctx, route, b)
	if err != nil || a.Code != 200 {
		t.Fatalf("%s %s: %v %d %s", v.name, name, err, a.Code, a.Body)
	}
	var f tinker.UntypedAPIFuture
	if err := json.Unmarshal(a.Body, &f); err != nil {
		t.Fatal(err)
	}
	return f.RequestID
}

// fwdbwd submits a fixture and reads its result as version v does.
func (v sdkVersion) fwdbwd(t *testing.T, ctx context.Context, c *client.Client, name, model string, seq int64) tinker.ForwardBackwardOutput {
	t.Helper()
	a, err := c.WaitAccept(ctx, v.submit(t, ctx, c, name, model, seq), v.accept)
	if err != nil {
		t.Fatalf("%s %s: %v", v.name, name, err)
	}
	if !a.Protobuf() {
		t.Errorf("%s %s: answered %s, the SDK asked for protobuf first", v.name, name, a.ContentType)
	}
	out, err := client.ReadForwardBackward(a, v.accept)
	if err != nil {
		t.Fatalf("%s %s: %v", v.name, name, err)
	}
	return out
}

func tokensOf(t *testing.T, name string) []int {
	t.Helper()
	raw, err := os.ReadFile(fixtureDir + "sdk-0.24.1/" + name + ".json")
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		FB *tinker.ForwardBackwardInput `json:"forward_backward_input"`
		F  *tinker.ForwardBackwardInput `json:"forward_input"`
	}
	_ = json.Unmarshal(raw, &body)
	in := body.FB
	if in == nil {
		in = body.F
	}
	var n []int
	for _, d := range in.Data {
		n = append(n, len(d.ModelInput.Tokens()))
	}
	return n
}

// checkOutput: one output per datum, logprobs of each datum's length and
// negative, a finite loss.
func checkOutput(t *testing.T, what string, out tinker.ForwardBackwardOutput, lens []int) {
	t.Helper()
	if len(out.LossFnOutputs) != len(lens) {
		t.Fatalf("%s: %d outputs for %d datums", what, len(out.LossFnOutputs), len(lens))
	}
	for i, o := range out.LossFnOutputs {
		lp := o["logprobs"]
		if len(lp.Data) != lens[i] || lp.DType != "float32" || len(lp.Shape) != 1 || lp.Shape[0] != lens[i] {
			t.Fatalf("%s: datum %d logprobs %d values %s %v, want %d", what, i, len(lp.Data), lp.DType, lp.Shape, lens[i])
		}
		for _, x := range lp.Data {
			if !(x < 0) {
				t.Fatalf("%s: logprob %v", what, x)
			}
		}
	}
	if l, ok := out.Metrics["loss:sum"]; !ok || math.IsNaN(l) || math.IsInf(l, 0) {
		t.Fatalf("%s: metrics %v", what, out.Metrics)
	}
}

// TestSDKSupervisedLoop: per SDK version, forward then forward_backward +
// optim_step with that version's bodies and answers; forward and
// forward_backward agree on the same weights, the loss falls, and both
// versions' first results are the same numbers (one request, two wire
// forms, the same fresh model).
func TestSDKSupervisedLoop(t *testing.T) {
	_, c := start(t, testConfig(t.TempDir()), "")
	ctx := ctxT(t)
	lens := tokensOf(t, "fb_cross_entropy")
	var firstLoss []float64
	var firstLP [][]float64
	for _, v := range sdks {
		_, model := newModel(t, ctx, c, 8)
		fwd := v.fwdbwd(t, ctx, c, "fwd_cross_entropy", model, 1)
		checkOutput(t, v.name+" forward", fwd, lens[:1])
		seq := int64(2)
		first := v.fwdbwd(t, ctx, c, "fb_cross_entropy", model, seq)
		checkOutput(t, v.name+" forward_backward", first, lens)
		for i, x := range fwd.LossFnOutputs[0]["logprobs"].Data {
			if y := first.LossFnOutputs[0]["logprobs"].Data[i]; math.Abs(x-y) > 1e-5 {
				t.Fatalf("%s: forward logprob %d %v, forward_backward %v on the same weights", v.name, i, x, y)
			}
		}
		p := tinker.DefaultAdamParams()
		p.LearningRate = 2e-2
		last := first
		for range 8 {
			if _, err := c.OptimStep(ctx, model, seq+1, p); err != nil {
				t.Fatal(err)
			}
			seq += 2
			last = v.fwdbwd(t, ctx, c, "fb_cross_entropy", model, seq)
		}
		a, b := first.Metrics["loss:sum"], last.Metrics["loss:sum"]
		t.Logf("SDK %s: loss:sum %.3f → %.3f", v.name, a, b)
		if !(b < 0.7*a) {
			t.Fatalf("SDK %s: loss %.3f → %.3f", v.name, a, b)
		}
		firstLoss = append(firstLoss, a)
		firstLP = append(firstLP, first.LossFnOutputs[1]["logprobs"].Data)
	}
	if math.Abs(firstLoss[0]-firstLoss[1]) > 1e-4*math.Abs(firstLoss[0]) {
		t.Fatalf("the same request's loss: 0.24.1 %v, 0.25.0 %v", firstLoss[0], firstLoss[1])
	}
	for i := range firstLP[0] {
		if math.Abs(firstLP[0][i]-firstLP[1][i]) > 1e-5 {
			t.Fatalf("logprob %d: 0.24.1 %v, 0.25.0 %v", i, firstLP[0][i], firstLP[1][i])
		}
	}
}

// TestSDKRLLossesAndCustomLoss: importance_sampling, ppo, cispo and the
// two calls of forward_backward_custom, each version's bodies on a fresh
// model per version: every answer reads as that SDK reads it, and both
// versions get the same losses.
func TestSDKRLLossesAndCustomLoss(t *testing.T) {
	_, c := start(t, testConfig(t.TempDir()), "")
	ctx := ctxT(t)
	names := []string{"fb_importance_sampling", "fb_ppo", "fb_cispo", "custom_fwd", "custom_bwd"}
	losses := map[string][]float64{}
	for _, v := range sdks {
		for i, name := range names {
			_, model := newModel(t, ctx, c, 4)
			out := v.fwdbwd(t, ctx, c, name, model, int64(i+1))
			checkOutput(t, v.name+" "+name, out, tokensOf(t, name))
			losses[name] = append(losses[name], out.Metrics["loss:sum"])
		}
	}
	for name, l := range losses {
		if math.Abs(l[0]-l[1]) > 1e-4*math.Max(1, math.Abs(l[0])) {
			t.Errorf("%s: 0.24.1 loss %v, 0.25.0 %v", name, l[0], l[1])
		}
	}
	if losses["custom_fwd"][0] != 0 {
		t.Errorf("custom loss's forward has zero weights, loss %v", losses["custom_fwd"][0])
	}
}

// TestSDKSampling: asample (JSON in every version) and its result as each
// version reads it — protobuf for both, the same tokens and logprobs as
// the JSON an Accept-less client gets for the same future.
func TestSDKSampling(t *testing.T) {
	_, c := start(t, testConfig(t.TempDir()), "")
	ctx := ctxT(t)
	sess, err := c.CreateSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sampler, err := c.CreateSamplingSession(ctx, sess, 0, "asyncrl-policy", "")
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range sdks {
		req := client.SampleRequest(sampler, int64(i+1), []int32{1, 40, 41, 42}, 3, 6, 1)
		seed := int64(7)
		req.SamplingParams.Seed = &seed
		id, err := c.ASample(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		a, err := c.WaitAccept(ctx, id, v.accept)
		if err != nil {
			t.Fatal(err)
		}
		if !a.Protobuf() {
			t.Fatalf("%s: sample answered %s", v.name, a.ContentType)
		}
		got, err := client.ReadSample(a, v.accept)
		if err != nil {
			t.Fatal(err)
		}
		var want tinker.SampleResponse
		if err := c.Wait(ctx, id, &want); err != nil { // no Accept: JSON
			t.Fatal(err)
		}
		if len(got.Sequences) != 3 || len(want.Sequences) != 3 {
			t.Fatalf("%s: %d / %d sequences", v.name, len(got.Sequences), len(want.Sequences))
		}
		for k := range got.Sequences {
			g, w := got.Sequences[k], want.Sequences[k]
			if g.StopReason != w.StopReason || len(g.Tokens) == 0 || !equal(g.Tokens, w.Tokens) || !equal(g.Logprobs, w.Logprobs) {
				t.Fatalf("%s: sequence %d protobuf %+v, JSON %+v", v.name, k, g, w)
			}
		}
	}
}

func equal[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestProtobufEdges: a retry whose map entries come in another order is
// the same future; a zstd-compressed body (Content-Encoding: zstd) is
// decoded; a malformed body is a 400 saying what it is not; a
// shape that does not fit its values a 422 naming the input; an unknown
// model 404; another Content-Encoding or a JSON-only route 415.
func TestProtobufEdges(t *testing.T) {
	_, c := start(t, testConfig(t.TempDir()), "")
	ctx := ctxT(t)
	_, model := newModel(t, ctx, c, 4)
	plain, _ := os.ReadFile(fixtureDir + "sdk-0.25.0/fb_cross_entropy.pb")
	zst, _ := os.ReadFile(fixtureDir + "sdk-0.25.0/fb_cross_entropy.pb.zst")
	_, model2 := newModel(t, ctx, c, 4)
	id1, err := c.SubmitProtobuf(ctx, splice(t, plain, model, 1))
	if err != nil {
		t.Fatal(err)
	}
	// The zstd frame holds model_id m-fixture: an unknown model, 404 —
	// proving it was decompressed and decoded.
	if _, err := c.SubmitProtobuf(ctx, zst, "Content-Encoding", "zstd"); err == nil || !strings.Contains(err.Error(), "HTTP 404") || !strings.Contains(err.Error(), "m-fixture") {
		t.Fatalf("zstd body: %v", err)
	}
	a1, err := c.WaitAccept(ctx, id1, client.AcceptProtobuf)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.ReadForwardBackward(a1, client.AcceptProtobuf); err != nil {
		t.Fatal(err)
	}

	// A retry of the same call with its map entries in another order (the
	// SDK's runtimes order them differently) is the same future.
	req, _, err := wire.DecodeForwardBackward(splice(t, plain, model, 1))
	if err != nil {
		t.Fatal(err)
	}
	reordered, err := wire.EncodeForwardBackward(req, false)
	if err != nil {
		t.Fatal(err)
	}
	if string(reordered) == string(splice(t, plain, model, 1)) {
		t.Fatal("the re-encoded body has the fixture's bytes: not a reordering")
	}
	if id, err := c.SubmitProtobuf(ctx, reordered); err != nil || id != id1 {
		t.Fatalf("retry with reordered map entries: %q %v, want the future %q", id, err, id1)
	}

	a, err := c.Raw(ctx, "forward_backward", []byte{0x0a, 0x09, 'm'}, "Content-Type", wire.ContentType)
	if err != nil || a.Code != 400 || !strings.Contains(string(a.Body), "not a tinker_public.ForwardBackwardRequest") {
		t.Fatalf("malformed: %v %d %s", err, a.Code, a.Body)
	}
	a, err = c.Raw(ctx, "forward_backward", []byte{0x0a, 0x01, 'm'}, "Content-Type", wire.ContentType, "Content-Encoding", "br")
	if err != nil || a.Code != 415 {
		t.Fatalf("brotli: %v %d %s", err, a.Code, a.Body)
	}
	in := tinker.ForwardBackwardInput{LossFn: "cross_entropy", Data: []tinker.Datum{tinker.NextTokenDatum([]int32{1, 5, 6, 7}, 0)}}
	in.Data[0].LossFnInputs["weights"] = tinker.TensorData{Data: []float64{1, 1, 1}, DType: "float32", Shape: []int{2}}
	body, err := wire.EncodeForwardBackward(tinker.ForwardBackwardRequest{ModelID: model, SeqID: new(int64(5)), ForwardBackwardInput: &in}, false)
	if err != nil {
		t.Fatal(err)
	}
	a, err = c.Raw(ctx, "forward_backward", body, "Content-Type", wire.ContentType)
	if err != nil || a.Code != 422 || !strings.Contains(string(a.Body), `"loc":["body","data",0,"loss_fn_inputs","weights"]`) {
		t.Fatalf("shape that does not fit: %v %d %s", err, a.Code, a.Body)
	}
	// A protobuf body for a model that is gone: the JSON path's 404.
	if err := c.UnloadModel(ctx, model2); err != nil {
		t.Fatal(err)
	}
	in.Data[0] = tinker.NextTokenDatum([]int32{1, 5, 6, 7}, 0)
	_, err = c.ForwardBackwardProtobuf(ctx, model2, 9, in, false)
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Code != 404 {
		t.Fatalf("unloaded model: %v", err)
	}
	a, err = c.Raw(ctx, "optim_step", []byte{0x0a, 0x01, 'm'}, "Content-Type", wire.ContentType)
	if err != nil || a.Code != 415 || !strings.Contains(string(a.Body), "only forward_backward") {
		t.Fatalf("protobuf on optim_step: %v %d %s", err, a.Code, a.Body)
	}
}
