package server_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// The four ways the server used to stall a client of the tinker SDK, each
// driven with the bodies the SDK sends (JSON, thinking-machines-lab/tinker
// 6b025363 = v0.24.1: resources/*.py dump requests with exclude_none, the
// "type" literal kept; the training client numbers its requests seq_id 1,
// 2, … — TrainingClient._get_request_id + 1 in
// src/tinker/lib/public_interfaces/training_client.py).
//
// The SDK retries 408, 409, 429 and 5xx for up to 300 s and raises any
// other status at once (InternalClientHolder._is_retryable_status_code and
// execute_with_retries, src/tinker/lib/internal_client_holder.py, same
// commit and d595dc2b = v0.25.0); while it retries, the training client's
// later calls wait for their turn. So nothing here may answer 409.

// sdkSession opens a session and a model the way ServiceClient does
// (create_session, then create_model with model_seq_id and the
// lora_config defaults of create_lora_training_client).
func sdkSession(t *testing.T, c rawClient, sdk string) (sess, model string) {
	t.Helper()
	code, out := c.do("POST", "create_session", `{"tags":[],"user_metadata":{},"sdk_version":"`+sdk+`","type":"create_session"}`)
	want(t, "create_session", code, 200, out, "session_id")
	sess = out["session_id"].(string)
	code, out = c.do("POST", "create_model", `{"session_id":"`+sess+`","model_seq_id":0,"base_model":"asyncrl-policy","lora_config":{"rank":8,"train_unembed":true,"train_mlp":true,"train_attn":true},"type":"create_model"}`)
	want(t, "create_model", code, 200, out, "request_id")
	return sess, c.wait(out["request_id"].(string))["model_id"].(string)
}

// saveBody is types/save_weights_request.py as TrainingClient.save_state
// sends it (ttl_seconds None dropped, overwrite default false kept).
func saveBody(model, name string, seq int) string {
	return fmt.Sprintf(`{"model_id":%q,"path":%q,"seq_id":%d,"overwrite":false,"type":"save_weights"}`, model, name, seq)
}

// Stall 1: saving under an existing name was a 409 (retried 300 s). It is
// now a failed future with category "user" naming the checkpoint, and the
// training client's next call runs at once.
func TestSaveUnderExistingNameFailsTheFuture(t *testing.T) {
	r, _ := start(t, testConfig(t.TempDir()), "")
	c := rawClient{t: t, url: r.URL}
	_, model := sdkSession(t, c, "0.24.1")
	code, out := c.do("POST", "save_weights", saveBody(model, "ck", 1))
	want(t, "first save", code, 200, out, "request_id")
	if res := c.wait(out["request_id"].(string)); res["path"] != "tinker://"+model+"/weights/ck" {
		t.Fatalf("first save: %v", res)
	}
	code, out = c.do("POST", "save_weights", saveBody(model, "ck", 2))
	want(t, "save under the same name", code, 200, out, "request_id")
	res := c.wait(out["request_id"].(string))
	if res["category"] != "user" || !strings.Contains(fmt.Sprint(res["error"]), "tinker://"+model+"/weights/ck exists") {
		t.Fatalf("save under an existing name: %v, want a failed future (category user) naming the checkpoint", res)
	}
	// overwrite=True replaces it.
	code, out = c.do("POST", "save_weights", strings.Replace(saveBody(model, "ck", 3), `"overwrite":false`, `"overwrite":true`, 1))
	want(t, "overwrite", code, 200, out, "request_id")
	if res := c.wait(out["request_id"].(string)); res["path"] != "tinker://"+model+"/weights/ck" {
		t.Fatalf("overwrite: %v", res)
	}
	// The sampler flavour the same way.
	sampler := fmt.Sprintf(`{"model_id":%q,"path":"sw","seq_id":%%d,"type":"save_weights_for_sampler"}`, model)
	code, out = c.do("POST", "save_weights_for_sampler", fmt.Sprintf(sampler, 4))
	want(t, "sampler save", code, 200, out, "request_id")
	c.wait(out["request_id"].(string))
	code, out = c.do("POST", "save_weights_for_sampler", fmt.Sprintf(sampler, 5))
	want(t, "sampler save under the same name", code, 200, out, "request_id")
	if res := c.wait(out["request_id"].(string)); res["category"] != "user" || !strings.Contains(fmt.Sprint(res["error"]), "exists") {
		t.Fatalf("sampler save under an existing name: %v", res)
	}
}

// Stall 2: a seq_id reused with another body was a 409 (retried 300 s);
// it is a 400 the SDK raises at once, with the message.
func TestSeqIDReusedWithAnotherBodyIs400(t *testing.T) {
	r, _ := start(t, testConfig(t.TempDir()), "")
	c := rawClient{t: t, url: r.URL}
	_, model := sdkSession(t, c, "0.24.1")
	code, out := c.do("POST", "save_weights", saveBody(model, "a", 1))
	want(t, "save", code, 200, out, "request_id")
	first := out["request_id"].(string)
	code, out = c.do("POST", "save_weights", saveBody(model, "b", 1))
	want(t, "seq_id 1 again with another body", code, 400, out, "detail")
	if d := fmt.Sprint(out["detail"]); !strings.Contains(d, model+"/1") || !strings.Contains(d, first) {
		t.Fatalf("detail %q does not name the seq_id and the request that holds it", d)
	}
}

// Stall 3: a late retry of a finished save (same seq_id, same body) got
// 409 "exists" because existence was checked before idempotency; it gets
// the original future and its result.
func TestLateRetryOfAFinishedSaveGetsItsFuture(t *testing.T) {
	r, _ := start(t, testConfig(t.TempDir()), "")
	c := rawClient{t: t, url: r.URL}
	_, model := sdkSession(t, c, "0.24.1")
	code, out := c.do("POST", "save_weights", saveBody(model, "ck", 1))
	want(t, "save", code, 200, out, "request_id")
	id := out["request_id"].(string)
	want1 := c.wait(id)
	code, out = c.do("POST", "save_weights", saveBody(model, "ck", 1))
	want(t, "late retry", code, 200, out, "request_id")
	if out["request_id"] != id {
		t.Fatalf("late retry got request %v, want the original %s", out["request_id"], id)
	}
	if res := c.wait(id); res["path"] != want1["path"] || res["error"] != nil {
		t.Fatalf("late retry's result %v, want %v", res, want1)
	}
}

// sdkDatum is types/datum.py's JSON: a cross_entropy datum of 4 tokens, or a
// bad one whose target_tokens are one short.
func sdkDatum(bad bool) string {
	target := `[68,69,70,2]`
	if bad {
		target = `[68,69,70]`
	}
	return `{"model_input":{"chunks":[{"tokens":[1,68,69,70],"type":"encoded_text"}]},"loss_fn_inputs":{"target_tokens":{"data":` + target + `,"dtype":"int64"},"weights":{"data":[0,1,1,1],"dtype":"float32"}}}`
}

// chunkBody is one chunk of a forward_backward call: n data, the one at
// index bad (if any) bad.
func chunkBody(model string, seq, n, bad int) string {
	d := make([]string, n)
	for i := range d {
		d[i] = sdkDatum(i == bad)
	}
	return fmt.Sprintf(`{"model_id":%q,"seq_id":%d,"forward_backward_input":{"loss_fn":"cross_entropy","data":[%s]},"type":"forward_backward"}`,
		model, seq, strings.Join(d, ","))
}

// Stall 4: a batch over the SDK's chunk size (1024 data,
// training_client.py MAX_CHUNK_LEN in 0.24.1, client/config
// fwdbwd_max_chunk_len's default in 0.25.0) with a bad datum in a later
// chunk. The old server answered that chunk 422 with the chunk's index; in
// the SDK's default parallel mode it sends chunks 2..n first and chunk 1
// only if they all got a future, and each later call waits for chunk 1's
// turn: the client hung for ever. Now client/config turns parallel chunks
// off (the SDK then sends chunks in seq_id order), every chunk is answered
// with a future, the bad chunk's fails naming the datum's index in the
// whole batch, and the batch's later chunks fail rather than train.
func TestChunkedBatchWithABadDatumInALaterChunk(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.Tinker.MaxRequestBytes = 8 << 20
	r, _ := start(t, cfg, "")
	c := rawClient{t: t, url: r.URL}
	_, model := sdkSession(t, c, "0.24.1")

	// Serial mode (what client/config asks for): 1024 + 1024 + 5 data,
	// datum 1024+1027 = 2051 bad (index 3 of the third chunk).
	var ids []string
	for i, n := range []int{1024, 1024, 5} {
		bad := -1
		if i == 2 {
			bad = 3
		}
		code, out := c.do("POST", "forward_backward", chunkBody(model, i+1, n, bad))
		if code != 200 {
			t.Fatalf("chunk %d: HTTP %d %v — the SDK would never send the rest of the batch", i+1, code, out)
		}
		ids = append(ids, out["request_id"].(string))
	}
	for i := range 2 {
		if res := c.wait(ids[i]); res["error"] != nil {
			t.Fatalf("good chunk %d failed: %v", i+1, res)
		}
	}
	res := c.wait(ids[2])
	if e := fmt.Sprint(res["error"]); res["category"] != "user" || !strings.Contains(e, "data[2051].loss_fn_inputs.target_tokens") || !strings.Contains(e, "from seq_id 1") {
		t.Fatalf("bad chunk's future: %v, want category user naming data[2051] of the batch from seq_id 1", res)
	}
	// The client goes on: the next call (optim_step, seq_id 4) runs.
	code, out := c.do("POST", "optim_step", fmt.Sprintf(`{"model_id":%q,"seq_id":4,"adam_params":{"learning_rate":0.0001,"beta1":0.9,"beta2":0.95,"eps":1e-12,"weight_decay":0.0,"grad_clip_norm":0.0},"type":"optim_step"}`, model))
	want(t, "optim_step after the refused batch", code, 200, out, "request_id")
	if res := c.wait(out["request_id"].(string)); res["error"] != nil {
		t.Fatalf("optim_step: %v", res)
	}

	// A bad datum in the middle chunk: the chunk after it does not train.
	ids = ids[:0]
	for i, n := range []int{1024, 1024, 5} {
		bad := -1
		if i == 1 {
			bad = 7
		}
		code, out := c.do("POST", "forward_backward", chunkBody(model, 5+i, n, bad))
		want(t, fmt.Sprintf("chunk %d", i+1), code, 200, out, "request_id")
		ids = append(ids, out["request_id"].(string))
	}
	if res := c.wait(ids[1]); !strings.Contains(fmt.Sprint(res["error"]), "data[1031]") {
		t.Fatalf("middle chunk: %v, want data[1031]", res)
	}
	if res := c.wait(ids[2]); res["category"] != "user" || !strings.Contains(fmt.Sprint(res["error"]), "data[1031]") {
		t.Fatalf("chunk after the refused one: %v, want a failed future naming data[1031]", res)
	}

	// 0.24.1's forward (the JSON /forward route) sends its chunks in a
	// loop that stops at the first HTTP error, leaving the later chunks'
	// turns untaken (TrainingClient.forward, _forward_async): whatever the
	// chunk mode, a bad datum in any but the last chunk must not be an
	// HTTP error. Here in the first chunk: the second is refused after it.
	fwd := func(seq, n, bad int) string {
		return strings.Replace(strings.Replace(chunkBody(model, seq, n, bad), `"forward_backward_input"`, `"forward_input"`, 1), `"type":"forward_backward"`, `"type":"forward"`, 1)
	}
	code, out = c.do("POST", "forward", fwd(100, 1024, 5))
	want(t, "forward chunk 1 with a bad datum", code, 200, out, "request_id")
	if res := c.wait(out["request_id"].(string)); !strings.Contains(fmt.Sprint(res["error"]), "body.forward_input.data[5]") {
		t.Fatalf("forward chunk 1: %v", res)
	}
	code, out = c.do("POST", "forward", fwd(101, 2, -1))
	want(t, "forward chunk 2", code, 200, out, "request_id")
	if res := c.wait(out["request_id"].(string)); res["category"] != "user" || !strings.Contains(fmt.Sprint(res["error"]), "data[5]") {
		t.Fatalf("forward chunk 2 after a refused chunk: %v", res)
	}

	// A client in parallel mode (one that ignores client/config) sends
	// chunks 2..n at once, before chunk 1: each must still get a future,
	// or the SDK never sends chunk 1.
	var wg sync.WaitGroup
	codes := make([]int, 2)
	for i := range 2 {
		wg.Go(func() {
			bad := -1
			if i == 1 {
				bad = 0
			}
			codes[i], _ = c.do("POST", "forward_backward", chunkBody(model, 9+i, []int{1024, 3}[i], bad))
		})
	}
	wg.Wait()
	if codes[0] != 200 || codes[1] != 200 {
		t.Fatalf("parallel chunks 2 and 3 answered %v; any non-200 leaves the SDK waiting for ever", codes)
	}
	code, out = c.do("POST", "forward_backward", chunkBody(model, 8, 1024, -1))
	want(t, "parallel chunk 1, sent last", code, 200, out, "request_id")

	code, out = c.do("POST", "client/config", `{"sdk_version":"0.24.1"}`)
	want(t, "client/config", code, 200, out, "parallel_fwdbwd_chunks")
	if out["parallel_fwdbwd_chunks"] != false || out["create_model_via_load_weights"] != false {
		t.Fatalf("client/config %v: want parallel_fwdbwd_chunks and create_model_via_load_weights false", out)
	}
}
