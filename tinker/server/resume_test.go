package server_test

import (
	"fmt"
	"reflect"
	"testing"
)

// Resume from state as the SDK does it: ServiceClient
// .create_training_client_from_state(_with_optimizer)
// (src/tinker/lib/public_interfaces/service_client.py, identical in
// thinking-machines-lab/tinker 6b025363 = v0.24.1 and d595dc2b = v0.25.0)
// with client/config create_model_via_load_weights false: POST
// weights_info {"tinker_path"} (RestClient.get_weights_info_by_tinker_path),
// then create_lora_training_client(base_model, rank=lora_rank, train_*
// flags) — create_model with the session's next model_seq_id — then
// TrainingClient.load_state(_with_optimizer)(path): load_weights with the
// new model's seq_id 1 and optimizer false (true). v0.25.0 first fetches
// client/dynamic_config after client/config.

// resume runs the SDK's from-state sequence and returns the new model.
func resume(t *testing.T, c rawClient, sess string, modelSeq int, path string, optimizer bool) string {
	t.Helper()
	code, info := c.do("POST", "weights_info", fmt.Sprintf(`{"tinker_path":%q}`, path))
	want(t, "weights_info", code, 200, info, "base_model", "is_lora", "lora_rank", "train_mlp", "train_attn", "train_unembed")
	if info["base_model"] != "asyncrl-policy" || info["is_lora"] != true || info["lora_rank"] != float64(8) {
		t.Fatalf("weights_info %v: want base_model asyncrl-policy, is_lora, lora_rank 8 (the saving model's)", info)
	}
	code, out := c.do("POST", "create_model", fmt.Sprintf(`{"session_id":%q,"model_seq_id":%d,"base_model":%q,"lora_config":{"rank":%v,"train_unembed":%v,"train_mlp":%v,"train_attn":%v},"type":"create_model"}`,
		sess, modelSeq, info["base_model"], info["lora_rank"], info["train_unembed"], info["train_mlp"], info["train_attn"]))
	want(t, "create_model from weights_info", code, 200, out, "request_id")
	model := c.wait(out["request_id"].(string))["model_id"].(string)
	code, out = c.do("POST", "load_weights", fmt.Sprintf(`{"model_id":%q,"path":%q,"seq_id":1,"optimizer":%v,"type":"load_weights"}`, model, path, optimizer))
	want(t, "load_weights", code, 200, out, "request_id")
	if res := c.wait(out["request_id"].(string)); res["error"] != nil {
		t.Fatalf("load_weights: %v", res)
	}
	return model
}

const fbData = `[{"model_input":{"chunks":[{"tokens":[1,68,69,70,71],"type":"encoded_text"}]},"loss_fn_inputs":{"target_tokens":{"data":[68,69,70,71,2],"dtype":"int64"},"weights":{"data":[1,1,1,1,1],"dtype":"float32"}}}]`

// forwardLogprobs runs a JSON forward (the 0.24.1 route; used on both
// flows only to read the weights) and returns the datum's logprobs.
func forwardLogprobs(t *testing.T, c rawClient, model string, seq int) []any {
	t.Helper()
	code, out := c.do("POST", "forward", fmt.Sprintf(`{"forward_input":{"data":%s,"loss_fn":"cross_entropy"},"model_id":%q,"seq_id":%d,"type":"forward"}`, fbData, model, seq))
	want(t, "forward", code, 200, out, "request_id")
	res := c.wait(out["request_id"].(string))
	outs, ok := res["loss_fn_outputs"].([]any)
	if !ok || len(outs) != 1 {
		t.Fatalf("forward result %v", res)
	}
	return outs[0].(map[string]any)["logprobs"].(map[string]any)["data"].([]any)
}

// step is forward_backward + optim_step at seq, seq+1.
func step(t *testing.T, c rawClient, model string, seq int) {
	t.Helper()
	code, out := c.do("POST", "forward_backward", fmt.Sprintf(`{"forward_backward_input":{"data":%s,"loss_fn":"cross_entropy"},"model_id":%q,"seq_id":%d,"type":"forward_backward"}`, fbData, model, seq))
	want(t, "forward_backward", code, 200, out, "request_id")
	if res := c.wait(out["request_id"].(string)); res["error"] != nil {
		t.Fatalf("forward_backward: %v", res)
	}
	code, out = c.do("POST", "optim_step", fmt.Sprintf(`{"adam_params":{"beta1":0.9,"beta2":0.95,"eps":1e-12,"grad_clip_norm":0.0,"learning_rate":0.01,"weight_decay":0.0},"model_id":%q,"seq_id":%d,"type":"optim_step"}`, model, seq+1))
	want(t, "optim_step", code, 200, out, "request_id")
	if res := c.wait(out["request_id"].(string)); res["error"] != nil {
		t.Fatalf("optim_step: %v", res)
	}
}

// TestResumeFromState024 trains a step, saves the state, then resumes it
// both ways: the weights are the saved ones in each, and after one more
// identical step the model resumed with its optimizer matches the
// original exactly while the one resumed without it (fresh AdamW) does
// not.
func TestResumeFromState024(t *testing.T) {
	r, _ := start(t, testConfig(t.TempDir()), "")
	c := rawClient{t: t, url: r.URL}
	code, out := c.do("POST", "client/config", `{"sdk_version":"0.24.1"}`)
	want(t, "client/config", code, 200, out, "create_model_via_load_weights")
	sess, orig := sdkSession(t, c, "0.24.1")
	step(t, c, orig, 1)
	code, out = c.do("POST", "save_weights", saveBody(orig, "ck", 3))
	want(t, "save_state", code, 200, out, "request_id")
	path := c.wait(out["request_id"].(string))["path"].(string)
	saved := forwardLogprobs(t, c, orig, 4)

	weightsOnly := resume(t, c, sess, 1, path, false)
	withOpt := resume(t, c, sess, 2, path, true)
	for name, m := range map[string]string{"from_state": weightsOnly, "from_state_with_optimizer": withOpt} {
		if got := forwardLogprobs(t, c, m, 2); !reflect.DeepEqual(got, saved) {
			t.Fatalf("%s: logprobs %v, want the saved model's %v", name, got, saved)
		}
	}
	step(t, c, orig, 5)
	step(t, c, withOpt, 3)
	step(t, c, weightsOnly, 3)
	after := forwardLogprobs(t, c, orig, 7)
	if got := forwardLogprobs(t, c, withOpt, 5); !reflect.DeepEqual(got, after) {
		t.Fatalf("resumed with optimizer, one step later: %v, want the original's %v", got, after)
	}
	if got := forwardLogprobs(t, c, weightsOnly, 5); reflect.DeepEqual(got, after) {
		t.Fatal("resumed without optimizer matches the original after a step: the optimizer state was not what differed")
	}
	// The checkpoint records its model: weights_info answers after the
	// saving model is gone (unloaded, or the server restarted).
	code, out = c.do("POST", "unload_model", fmt.Sprintf(`{"model_id":%q,"type":"unload_model"}`, orig))
	want(t, "unload_model", code, 200, out, "request_id")
	c.wait(out["request_id"].(string))
	resume(t, c, sess, 3, path, true)
	// A path that is not saved is a 404 the SDK does not retry; a bad
	// one a 422.
	code, out = c.do("POST", "weights_info", fmt.Sprintf(`{"tinker_path":"tinker://%s/weights/nope"}`, orig))
	want(t, "weights_info of an unknown checkpoint", code, 404, out, "detail")
	code, out = c.do("POST", "weights_info", `{"tinker_path":"s3://x"}`)
	want(t, "weights_info of a bad path", code, 422, out, "detail")
}

// TestResumeFromState025 is v0.25.0's start (client/config, then
// client/dynamic_config, whose 404 it would tolerate) and the same
// from-state sequence; its forward_backward is protobuf (not part of this
// flow; a JSON step changes the weights before the save).
func TestResumeFromState025(t *testing.T) {
	r, _ := start(t, testConfig(t.TempDir()), "")
	c := rawClient{t: t, url: r.URL}
	code, out := c.do("POST", "client/config", `{"sdk_version":"0.25.0"}`)
	want(t, "client/config", code, 200, out, "parallel_fwdbwd_chunks")
	// InternalClientHolder._fetch_client_dynamic_config: POST
	// ClientConfigRequest, exclude_none.
	code, out = c.do("POST", "client/dynamic_config", `{"sdk_version":"0.25.0"}`)
	want(t, "client/dynamic_config", code, 200, out, "refresh_interval_sec")
	if v, _ := out["refresh_interval_sec"].(float64); v < 10 {
		t.Fatalf("refresh_interval_sec %v", out)
	}
	sess, orig := sdkSession(t, c, "0.25.0")
	// A JSON step (0.25.0 would send it as protobuf), only so that the
	// saved weights differ from the base model's.
	step(t, c, orig, 1)
	code, out = c.do("POST", "save_weights", saveBody(orig, "ck", 3))
	want(t, "save_state", code, 200, out, "request_id")
	path := c.wait(out["request_id"].(string))["path"].(string)
	saved := forwardLogprobs(t, c, orig, 4)
	for i, opt := range []bool{false, true} {
		m := resume(t, c, sess, i+1, path, opt)
		code, out := c.do("POST", "get_info", fmt.Sprintf(`{"model_id":%q,"type":"get_info"}`, m))
		want(t, "get_info", code, 200, out, "lora_rank")
		if out["lora_rank"] != float64(8) {
			t.Fatalf("resumed model's rank: %v", out)
		}
		if got := forwardLogprobs(t, c, m, 2); !reflect.DeepEqual(got, saved) {
			t.Fatalf("resumed (optimizer %v): logprobs %v, want %v", opt, got, saved)
		}
	}
}
