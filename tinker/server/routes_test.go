package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/tinker/server"
)

// Route fixtures: request bodies as the tinker SDK sends them (JSON form,
// thinking-machines-lab/tinker v0.24.1 src/tinker/resources/*.py and
// src/tinker/types/*.py: nulls dropped, defaults and the "type" literal
// kept) and the answers' shapes as NovaSky-AI/SkyRL skyrl/tinker/api.py
// returns them.

type rawClient struct {
	t   *testing.T
	url string
	key string
}

func (c rawClient) do(method, path, body string, hdr ...string) (int, map[string]any) {
	c.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, c.url+"/api/v1/"+path, rd)
	req.Header.Set("Content-Type", "application/json")
	if c.key != "" {
		req.Header.Set("X-API-Key", c.key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return resp.StatusCode, out
}

// wait polls a future to its result.
func (c rawClient) wait(id string) map[string]any {
	c.t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		code, out := c.do("POST", "retrieve_future", `{"request_id":"`+id+`","allow_metadata_only":false}`)
		if code != 200 {
			c.t.Fatalf("retrieve_future %s: %d %v", id, code, out)
		}
		if out["type"] != "try_again" {
			return out
		}
	}
	c.t.Fatalf("future %s never finished", id)
	return nil
}

func want(t *testing.T, what string, code, wantCode int, out map[string]any, keys ...string) {
	t.Helper()
	if code != wantCode {
		t.Fatalf("%s: HTTP %d, want %d: %v", what, code, wantCode, out)
	}
	for _, k := range keys {
		if _, ok := out[k]; !ok {
			t.Fatalf("%s: answer lacks %q: %v", what, k, out)
		}
	}
}

func TestRouteFixtures(t *testing.T) {
	r, _ := start(t, testConfig(t.TempDir()), "")
	c := rawClient{t: t, url: r.URL}

	code, out := c.do("GET", "healthz", "")
	want(t, "healthz", code, 200, out, "status")
	code, out = c.do("GET", "get_server_capabilities", "")
	want(t, "get_server_capabilities", code, 200, out, "supported_models")
	if m := out["supported_models"].([]any)[0].(map[string]any); m["model_name"] != "asyncrl-policy" {
		t.Fatalf("supported_models: %v", out)
	}
	code, out = c.do("POST", "client/config", `{"sdk_version":"0.24.1"}`)
	want(t, "client/config", code, 200, out, "pjwt_auth_enabled")
	code, out = c.do("POST", "telemetry", `{"events":[],"platform":"linux","sdk_version":"0.24.1","session_id":"x"}`)
	want(t, "telemetry", code, 200, out, "status")

	// types/create_session_request.py
	code, out = c.do("POST", "create_session", `{"tags":[],"user_metadata":{},"sdk_version":"0.24.1","type":"create_session"}`)
	want(t, "create_session", code, 200, out, "session_id")
	sess := out["session_id"].(string)
	code, out = c.do("POST", "session_heartbeat", `{"session_id":"`+sess+`","type":"session_heartbeat"}`)
	want(t, "session_heartbeat", code, 200, out, "type")
	code, out = c.do("POST", "session_heartbeat", `{"session_id":"nope","type":"session_heartbeat"}`)
	want(t, "heartbeat unknown session", code, 404, out, "detail")

	// types/create_model_request.py (lora_config from types/lora_config.py)
	code, out = c.do("POST", "create_model", `{"session_id":"`+sess+`","model_seq_id":0,"base_model":"asyncrl-policy","lora_config":{"rank":32,"train_unembed":true,"train_mlp":true,"train_attn":true},"type":"create_model"}`)
	want(t, "create_model", code, 200, out, "request_id", "model_id")
	res := c.wait(out["request_id"].(string))
	model := res["model_id"].(string)
	code, out = c.do("POST", "get_info", `{"model_id":"`+model+`","type":"get_info"}`)
	want(t, "get_info", code, 200, out, "model_id", "model_data", "is_lora", "lora_rank")

	// types/forward_backward_request.py, datum.py, tensor_data.py
	fb := `{"model_id":"` + model + `","seq_id":1,"forward_backward_input":{"loss_fn":"cross_entropy","data":[{"model_input":{"chunks":[{"tokens":[1,68,69,70],"type":"encoded_text"}]},"loss_fn_inputs":{"target_tokens":{"data":[68,69,70,2],"dtype":"int64","shape":[4]},"weights":{"data":[0,1,1,1],"dtype":"float32","shape":[4]}}}]},"type":"forward_backward"}`
	code, out = c.do("POST", "forward_backward", fb)
	want(t, "forward_backward", code, 200, out, "request_id")
	fbID := out["request_id"].(string)
	res = c.wait(fbID)
	for _, k := range []string{"loss_fn_output_type", "loss_fn_outputs", "metrics"} {
		if _, ok := res[k]; !ok {
			t.Fatalf("forward_backward result lacks %s: %v", k, res)
		}
	}
	// The same (model_id, seq_id) and body is the same future; another body
	// 400 (a 409 the SDK would retry for 300 s: stalls_test.go).
	code, out = c.do("POST", "forward_backward", fb)
	if code != 200 || out["request_id"] != fbID {
		t.Fatalf("retried forward_backward: %d %v, want the same request_id %s", code, out, fbID)
	}
	code, out = c.do("POST", "forward_backward", strings.Replace(fb, `"weights":{"data":[0,1,1,1]`, `"weights":{"data":[0,1,1,0]`, 1))
	want(t, "seq_id reused with another body", code, 400, out, "detail")

	code, out = c.do("POST", "forward", `{"model_id":"`+model+`","seq_id":2,"forward_input":{"loss_fn":"cross_entropy","data":[{"model_input":{"chunks":[{"tokens":[1,68],"type":"encoded_text"}]},"loss_fn_inputs":{"target_tokens":{"data":[68,69],"dtype":"int64"}}}]},"type":"forward"}`)
	want(t, "forward", code, 200, out, "request_id")
	c.wait(out["request_id"].(string))

	// types/optim_step_request.py with the SDK's AdamParams defaults
	code, out = c.do("POST", "optim_step", `{"model_id":"`+model+`","seq_id":3,"adam_params":{"learning_rate":0.0001,"beta1":0.9,"beta2":0.95,"eps":1e-12,"weight_decay":0.0,"grad_clip_norm":0.0},"type":"optim_step"}`)
	want(t, "optim_step", code, 200, out, "request_id")
	c.wait(out["request_id"].(string))

	code, out = c.do("POST", "save_weights", `{"model_id":"`+model+`","path":"ckpt1","seq_id":4,"type":"save_weights"}`)
	want(t, "save_weights", code, 200, out, "request_id")
	res = c.wait(out["request_id"].(string))
	if res["path"] != "tinker://"+model+"/weights/ckpt1" {
		t.Fatalf("save_weights path %v", res)
	}
	code, out = c.do("POST", "load_weights", `{"model_id":"`+model+`","path":"tinker://`+model+`/weights/ckpt1","seq_id":5,"optimizer":true,"type":"load_weights"}`)
	want(t, "load_weights", code, 200, out, "request_id")
	c.wait(out["request_id"].(string))

	code, out = c.do("POST", "save_weights_for_sampler", `{"model_id":"`+model+`","path":"s1","seq_id":6,"type":"save_weights_for_sampler"}`)
	want(t, "save_weights_for_sampler (named)", code, 200, out, "request_id")
	res = c.wait(out["request_id"].(string))
	spath := res["path"].(string)
	code, out = c.do("POST", "save_weights_for_sampler", `{"model_id":"`+model+`","sampling_session_seq_id":0,"seq_id":7,"type":"save_weights_for_sampler"}`)
	want(t, "save_weights_for_sampler (session)", code, 200, out, "request_id")
	res = c.wait(out["request_id"].(string))
	if _, ok := res["sampling_session_id"]; !ok {
		t.Fatalf("save_weights_for_sampler without a path made no sampling session: %v", res)
	}

	// types/create_sampling_session_request.py
	code, out = c.do("POST", "create_sampling_session", `{"session_id":"`+sess+`","sampling_session_seq_id":1,"model_path":"`+spath+`","type":"create_sampling_session"}`)
	want(t, "create_sampling_session", code, 200, out, "sampling_session_id")
	sampler := out["sampling_session_id"].(string)
	code, out = c.do("GET", "samplers/"+sampler, "")
	want(t, "samplers/{id}", code, 200, out, "sampler_id", "base_model", "model_path")

	// types/sample_request.py, sampling_params.py
	code, out = c.do("POST", "asample", `{"num_samples":2,"prompt":{"chunks":[{"tokens":[1,82,72,89],"type":"encoded_text"}]},"sampling_params":{"max_tokens":5,"temperature":1.0,"top_k":-1,"top_p":1.0},"sampling_session_id":"`+sampler+`","seq_id":0,"topk_prompt_logprobs":0,"type":"sample"}`,
		"X-Tinker-Sampling-Backpressure", "1")
	want(t, "asample", code, 200, out, "request_id")
	res = c.wait(out["request_id"].(string))
	seqs := res["sequences"].([]any)
	if len(seqs) != 2 {
		t.Fatalf("asample: %d sequences, want 2: %v", len(seqs), res)
	}
	for _, s := range seqs {
		m := s.(map[string]any)
		if len(m["tokens"].([]any)) != len(m["logprobs"].([]any)) || (m["stop_reason"] != "length" && m["stop_reason"] != "stop") {
			t.Fatalf("sampled sequence %v", m)
		}
	}
	code, out = c.do("POST", "asample", `{"num_samples":1,"prompt":{"chunks":[{"tokens":[1,82],"type":"encoded_text"}]},"sampling_params":{"max_tokens":3},"base_model":"asyncrl-policy","type":"sample"}`)
	want(t, "asample base_model", code, 200, out, "request_id")
	c.wait(out["request_id"].(string))

	code, out = c.do("POST", "unload_model", `{"model_id":"`+model+`","type":"unload_model"}`)
	want(t, "unload_model", code, 200, out, "request_id")
	c.wait(out["request_id"].(string))
	code, out = c.do("POST", "get_info", `{"model_id":"`+model+`","type":"get_info"}`)
	want(t, "get_info after unload", code, 404, out, "detail")

	resp, err := http.Get(r.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{`asyncrl_tinker_requests_total{code="200",route="asample"}`, `asyncrl_tinker_train_finished_total{op="forward_backward",state="done"} 1`,
		`asyncrl_tinker_samples_finished_total{ok="true"} 2`, "asyncrl_tinker_futures_pending 0", "asyncrl_tinker_models 0"} {
		if !bytes.Contains(b, []byte(m)) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
}

func TestBadRequests(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.Tinker.MaxRequestBytes = 4096
	r, _ := start(t, cfg, "")
	c := rawClient{t: t, url: r.URL}
	_, out := c.do("POST", "create_session", `{"tags":[],"user_metadata":{},"sdk_version":"0.24.1"}`)
	sess := out["session_id"].(string)

	// FastAPI-style 422 naming the field.
	code, out := c.do("POST", "create_model", `{"session_id":"`+sess+`","model_seq_id":0,"base_model":"asyncrl-policy"}`)
	want(t, "create_model without lora_config", code, 422, out, "detail")
	loc, _ := json.Marshal(out["detail"].([]any)[0].(map[string]any)["loc"])
	if string(loc) != `["body","lora_config"]` {
		t.Fatalf("422 loc %s, want [\"body\",\"lora_config\"]", loc)
	}
	code, out = c.do("POST", "create_model", `{"session_id":"`+sess+`","model_seq_id":"x","base_model":"asyncrl-policy","lora_config":{"rank":4}}`)
	want(t, "create_model with a string seq id", code, 422, out, "detail")
	if !bytes.Contains(mustJSON(out), []byte("model_seq_id")) {
		t.Fatalf("type error does not name model_seq_id: %v", out)
	}
	code, out = c.do("POST", "create_model", `{"session_id":"`+sess+`","model_seq_id":0,"base_model":"llama","lora_config":{"rank":4}}`)
	want(t, "unknown base model", code, 422, out, "detail")
	// A bad forward_backward input of a known model is a failed future
	// (category user), never an HTTP error (tinker/batch.go).
	_, out = c.do("POST", "create_model", `{"session_id":"`+sess+`","model_seq_id":0,"base_model":"asyncrl-policy","lora_config":{"rank":4}}`)
	model := c.wait(out["request_id"].(string))["model_id"].(string)
	code, out = c.do("POST", "forward_backward", `{"model_id":"`+model+`","seq_id":1,"forward_backward_input":{"loss_fn":"dro","data":[]}}`)
	want(t, "dro loss", code, 200, out, "request_id")
	if res := c.wait(out["request_id"].(string)); res["category"] != "user" || !bytes.Contains(mustJSON(res), []byte("unsupported loss_fn")) {
		t.Fatalf("dro refusal: %v", res)
	}
	code, out = c.do("POST", "forward_backward", `{"model_id":"`+model+`","forward_backward_input":{"loss_fn":"cross_entropy","data":[]}}`)
	want(t, "forward_backward without seq_id", code, 422, out, "detail")
	code, out = c.do("POST", "asample", `{"prompt":{"chunks":[{"tokens":[1,2],"type":"encoded_text"}]},"sampling_params":{"max_tokens":0},"base_model":"asyncrl-policy"}`)
	want(t, "asample with max_tokens 0", code, 422, out, "detail")
	code, out = c.do("POST", "asample", `{"prompt":{"chunks":[{"type":"image","data":"AAAA","format":"png"}]},"sampling_params":{"max_tokens":2},"base_model":"asyncrl-policy"}`)
	want(t, "image chunk", code, 422, out, "detail")

	code, out = c.do("POST", "retrieve_future", `{"request_id":"t-0000000000000000"}`)
	want(t, "unknown future", code, 404, out, "detail")
	code, out = c.do("POST", "forward_backward", `{}`, "Content-Type", "application/x-protobuf")
	want(t, "malformed protobuf body", code, 400, out, "detail")
	code, out = c.do("POST", "optim_step", `{}`, "Content-Type", "application/x-protobuf")
	want(t, "protobuf body on a JSON route", code, 415, out, "detail")
	code, out = c.do("POST", "create_session", `{"tags":["`+strings.Repeat("x", 5000)+`"]}`)
	want(t, "oversized body", code, 413, out, "detail")
	code, out = c.do("POST", "training_runs", `{}`)
	want(t, "REST route", code, 404, out, "detail")
}

func TestAPIKeyAndListen(t *testing.T) {
	cfg := testConfig(t.TempDir())
	r, _ := start(t, cfg, "tml-secret")
	c := rawClient{t: t, url: r.URL}
	code, out := c.do("POST", "create_session", `{"tags":[]}`)
	want(t, "no key", code, 401, out, "detail")
	code, _ = c.do("GET", "healthz", "")
	if code != 200 {
		t.Fatalf("healthz needs no key: %d", code)
	}
	c.key = "tml-secret"
	code, out = c.do("POST", "create_session", `{"tags":[]}`)
	want(t, "with key", code, 200, out, "session_id")
}

func TestNonLoopbackNeedsAPIKey(t *testing.T) {
	cfg := testConfig(t.TempDir())
	_, err := server.Start(context.Background(), cfg, server.Options{Listen: "0.0.0.0:0"})
	if !errors.Is(err, server.ErrAPIKey) {
		t.Fatalf("listen 0.0.0.0 without a key: %v, want ErrAPIKey", err)
	}
}

func mustJSON(v any) []byte { b, _ := json.Marshal(v); return b }
