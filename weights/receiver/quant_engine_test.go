package receiver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"testing"

	"github.com/asyncrl/asyncrl/engine"
	"github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/weights/quant"
)

// TestBuiltInEngineServesQuantisedVersion is quantise-on-publish end to
// end for each scheme: versions 0 and 1 are quantised serving
// checkpoints, version 1 travels as a delta over the quantised bytes, the
// receiver replays it and the real built-in engine loads it; the logprobs
// the engine returns over HTTP equal those of the dequantised model
// (model.QuantizedCopy of the trainer's weights) and not the BF16 ones'.
func TestBuiltInEngineServesQuantisedVersion(t *testing.T) {
	for _, name := range []string{"fp8", "mxfp8"} {
		t.Run(name, func(t *testing.T) {
			s, _ := quant.Lookup(name)
			var masters []*model.Model
			eng, _, _ := syncedEngine(t, t.TempDir(), func(m *model.Model, dir string) error {
				masters = append(masters, m)
				_, err := m.SaveServingQuantized(dir, s, nil)
				return err
			})
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			sctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() { _ = eng.Serve(sctx, ln) }()

			prompt := []int32{1, 20, 33, 41, 52, 60}
			body, _ := json.Marshal(map[string]any{"model": "asyncrl-policy", "prompt": prompt, "max_tokens": 8,
				"temperature": 0, "logprobs": 1, "ignore_eos": true, "return_token_ids": true})
			resp, err := http.Post(fmt.Sprintf("http://%s/v1/completions", ln.Addr()), "application/json", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var cr engine.CompletionResponse
			if err := json.NewDecoder(resp.Body).Decode(&cr); err != nil || resp.StatusCode != http.StatusOK || len(cr.Choices) != 1 {
				t.Fatalf("status %d, %v, %+v", resp.StatusCode, err, cr)
			}
			c := cr.Choices[0]
			if c.Logprobs == nil || len(c.TokenIDs) != 8 || len(c.Logprobs.TokenLogprobs) != 8 {
				t.Fatalf("choice %+v", c)
			}
			served, _, err := masters[1].QuantizedCopy(s)
			if err != nil {
				t.Fatal(err)
			}
			bf16 := masters[1].Clone()
			bf16.RoundBF16()
			ctxToks := append([]int32{}, c.PromptTokenIDs...)
			var offBF16 float64
			for i, tok := range c.TokenIDs {
				want := logSoftmax(served, ctxToks)[tok]
				if d := math.Abs(float64(c.Logprobs.TokenLogprobs[i]) - want); d > 1e-5 {
					t.Fatalf("token %d: engine logprob %v, dequantised model %v", i, c.Logprobs.TokenLogprobs[i], want)
				}
				offBF16 = max(offBF16, math.Abs(float64(c.Logprobs.TokenLogprobs[i])-logSoftmax(bf16, ctxToks)[tok]))
				ctxToks = append(ctxToks, tok)
			}
			if offBF16 < 1e-4 {
				t.Fatalf("the engine's logprobs match the BF16 model's too (max diff %g): the version was not served quantised", offBF16)
			}
		})
	}
}

func logSoftmax(m *model.Model, toks []int32) []float64 {
	logits := make([]float32, m.VocabSize())
	m.NextLogits(toks, logits)
	mx := math.Inf(-1)
	for _, l := range logits {
		mx = max(mx, float64(l))
	}
	var sum float64
	for _, l := range logits {
		sum += math.Exp(float64(l) - mx)
	}
	out := make([]float64, len(logits))
	for i, l := range logits {
		out[i] = float64(l) - mx - math.Log(sum)
	}
	return out
}
