package tinker

import (
	"strings"
	"testing"
	"time"
)

// The SDK's chunking (training_client.py, tinker 6b025363 and d595dc2b):
// 1024 data per chunk, or fewer when the estimated bytes would pass
// 5,000,000; chunks take consecutive seq_ids.
func TestPlaceChunk(t *testing.T) {
	c := NewCore(Limits{SessionTimeout: time.Hour, ResultTTL: time.Hour, ResultMaxBytes: 1 << 20, MaxModelsPerSession: 4, MaxPendingPerSession: 100})
	t0 := time.Unix(0, 0)
	if _, err := c.CreateSession(t0, "s"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateModel(t0, "s", "m", "base", 8); err != nil {
		t.Fatal(err)
	}
	full := ChunkStats{Seq: 1, Key: "fb/ce/", N: SDKChunkLen, Bytes10: 40960, Bytes4: 16384, First10: 40, First4: 16}
	rest := ChunkStats{Seq: 2, Key: "fb/ce/", N: 5, Bytes10: 200, Bytes4: 80, First10: 40, First4: 16}
	if p := c.PlaceChunk("m", full); p.Offset != 0 || p.StartSeq != 1 || p.Refused != -1 {
		t.Fatalf("first chunk %+v", p)
	}
	if p := c.PlaceChunk("m", rest); p.Offset != SDKChunkLen || p.StartSeq != 1 {
		t.Fatalf("second chunk %+v, want offset 1024 from seq 1", p)
	}
	// After a short chunk a new batch starts; so after a gap in seq_ids,
	// or another loss.
	next := rest
	next.Seq = 3
	if p := c.PlaceChunk("m", next); p.Offset != 0 || p.StartSeq != 3 {
		t.Fatalf("after a short chunk %+v, want a new batch", p)
	}
	f := full
	f.Seq, f.Key = 4, "fb/ppo/"
	c.PlaceChunk("m", f)
	r := rest
	r.Seq = 5
	if p := c.PlaceChunk("m", r); p.Offset != 0 {
		t.Fatalf("another loss continued the batch: %+v", p)
	}
	// A chunk closed by bytes: 100 data whose estimate plus the next
	// datum passes 5,000,000 (0.24.1's 10 bytes per value).
	big := ChunkStats{Seq: 6, Key: "fb/ce/", N: 100, Bytes10: SDKChunkBytes - 10, Bytes4: SDKChunkBytes / 3}
	c.PlaceChunk("m", big)
	r.Seq = 7
	if p := c.PlaceChunk("m", r); p.Offset != 100 || p.StartSeq != 6 {
		t.Fatalf("after a bytes-full chunk %+v, want offset 100 from seq 6", p)
	}
	// A refusal carries to the batch's later chunks.
	c.PlaceChunk("m", ChunkStats{Seq: 8, Key: "fb/ce/", N: SDKChunkLen})
	c.RefuseChunk("m", 8, 17)
	if p := c.PlaceChunk("m", ChunkStats{Seq: 9, Key: "fb/ce/", N: 3}); p.Refused != 17 || p.RefusedSeq != 8 {
		t.Fatalf("refusal not carried: %+v", p)
	}
	// Unloading forgets the model's chunks; unknown models are not kept.
	if err := c.UnloadModel("m"); err != nil {
		t.Fatal(err)
	}
	c.PlaceChunk("m", full)
	if len(c.chunks) != 0 {
		t.Fatalf("chunks of unloaded models kept: %v", c.chunks)
	}
}

func TestChunkStatsOfAndInBatch(t *testing.T) {
	in := &ForwardBackwardInput{LossFn: "cross_entropy", Data: []Datum{
		{ModelInput: ModelInput{Chunks: []Chunk{{Tokens: []int32{1, 2, 3}}}}, LossFnInputs: map[string]TensorData{
			"target_tokens": {Data: []float64{2, 3, 4}, DType: "int64"}, "weights": {Data: []float64{1, 1, 1}, DType: "float32"}}},
		{ModelInput: ModelInput{Chunks: []Chunk{{Tokens: []int32{1}}}}},
	}}
	st := ChunkStatsOf(7, "forward_backward", in)
	// 0.24.1: 10 per token and value; 0.25.0: 4 per token, 8 per int64, 4 per float32.
	if st.N != 2 || st.First10 != 90 || st.Bytes10 != 100 || st.First4 != 12+24+12 || st.Bytes4 != 48+4 {
		t.Fatalf("stats %+v", st)
	}
	errs := FieldErrors{{Loc: []any{"body", "forward_backward_input", "data", 3, "loss_fn_inputs", "target_tokens"}, Msg: "too short"}}
	msg, first := InBatch(errs, BatchPos{Offset: 2048, StartSeq: 5}, 7)
	if first != 2051 || !strings.Contains(msg, "body.forward_backward_input.data[2051].loss_fn_inputs.target_tokens: too short") || !strings.Contains(msg, "seq_id 7") {
		t.Fatalf("InBatch: %d %q", first, msg)
	}
}

// max_tokens absent (the SDK's SamplingParams default None) is the rest
// of the context; a prompt that fills the context leaves no room.
func TestSampleMaxTokensDefault(t *testing.T) {
	prompt := &ModelInput{Chunks: []Chunk{{Type: "encoded_text", Tokens: []int32{1, 5, 6}}}}
	r := SampleRequest{BaseModel: new("b"), Prompt: prompt, SamplingParams: &SamplingParams{}}
	if err := ValidateSample(&r, 98, 256); err != nil {
		t.Fatal(err)
	}
	if r.SamplingParams.MaxTokens == nil || *r.SamplingParams.MaxTokens != 253 {
		t.Fatalf("default max_tokens %v, want 256-3", r.SamplingParams.MaxTokens)
	}
	r = SampleRequest{BaseModel: new("b"), Prompt: prompt, SamplingParams: &SamplingParams{}}
	if err := ValidateSample(&r, 98, 3); err == nil || !strings.Contains(err.Error(), "max_tokens") {
		t.Fatalf("prompt filling the context: %v, want an error on max_tokens", err)
	}
}
