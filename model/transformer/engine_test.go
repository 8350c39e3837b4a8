package transformer_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/engine"
	"github.com/asyncrl/asyncrl/messages/vllmwire"
	"github.com/asyncrl/asyncrl/model/transformer"
	"github.com/asyncrl/asyncrl/weights/delta"
	"github.com/asyncrl/asyncrl/weights/safetensors"
	"github.com/asyncrl/asyncrl/weights/store"
	"github.com/asyncrl/asyncrl/wiring"
)

// checkpoint saves a tiny random model of arch into a temp dir with
// generation_config.json's eos_token_id eos.
func checkpoint(t *testing.T, arch transformer.Arch, vocab int, seed uint64, eos int) string {
	t.Helper()
	c, err := transformer.NewPreset(arch, transformer.PresetTiny, vocab)
	if err != nil {
		t.Fatal(err)
	}
	one := 1
	c.BOSTokenID, c.EOSTokenIDs = &one, []int{eos}
	// A larger initializer_range than HF's 0.02 makes the random model's
	// distributions peaked enough for greedy decoding to be meaningful.
	c.InitializerRange = 0.2
	m, err := transformer.InitWithOptions(c, transformer.GenerationConfig{BOSTokenID: &one, EOSTokenIDs: []int{eos}}, seed,
		transformer.InitOptions{CorrectionBiasStd: 0.05})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := m.Save(dir, 0); err != nil {
		t.Fatal(err)
	}
	return dir
}

type server struct {
	t   *testing.T
	e   *engine.Engine
	url string
	m   *transformer.Model
}

func serve(t *testing.T, dir string, cfg engine.Config) *server {
	t.Helper()
	em, err := wiring.LoadPolicy(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, ok := em.(*transformer.Model)
	if !ok {
		t.Fatalf("LoadPolicy gave %T for a %s checkpoint", em, dir)
	}
	e, err := engine.New(cfg, m, engine.WithLoader(wiring.LoadPolicy))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.Handler())
	t.Cleanup(func() {
		e.Close()
		srv.Close()
		http.DefaultClient.CloseIdleConnections()
	})
	return &server{t: t, e: e, url: srv.URL, m: m}
}

func testConfig() engine.Config {
	cfg := engine.DefaultConfig()
	cfg.TimeScale = 0
	cfg.MaxModelLen = 512
	cfg.Latency.MaxNumSeqs = 64
	cfg.Latency.MaxWaiting = 256
	return cfg
}

func (s *server) post(path string, body any) (int, []byte) {
	buf, _ := json.Marshal(body)
	resp, err := http.Post(s.url+path, "application/json", bytes.NewReader(buf))
	if err != nil {
		s.t.Error(err)
		return 0, nil
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

func (s *server) complete(body map[string]any) engine.CompletionChoice {
	code, out := s.post("/v1/completions", body)
	if code != http.StatusOK {
		s.t.Fatalf("completions: %d %s", code, out)
	}
	var r engine.CompletionResponse
	if err := json.Unmarshal(out, &r); err != nil {
		s.t.Fatal(err)
	}
	return r.Choices[0]
}

// statelessLogprob is log_softmax(NextLogits(prefix))[tok] in float64.
func statelessLogprob(m engine.Model, prefix []int32, tok int32) float64 {
	l := make([]float32, m.VocabSize())
	m.NextLogits(prefix, l)
	mx := math.Inf(-1)
	for _, v := range l {
		mx = max(mx, float64(v))
	}
	var s float64
	for _, v := range l {
		s += math.Exp(float64(v) - mx)
	}
	return float64(l[tok]) - mx - math.Log(s)
}

func argmax(m engine.Model, prefix []int32) int32 {
	l := make([]float32, m.VocabSize())
	m.NextLogits(prefix, l)
	best := 0
	for i, v := range l {
		if v > l[best] {
			best = i
		}
	}
	return int32(best)
}

// TestEngineServesHFCheckpoints: the built-in engine serves tiny qwen3 and
// qwen3_moe checkpoints through the dispatching loader — token-id prompts,
// greedy decoding that is deterministic and is the stateless model's
// argmax, logprobs equal to the stateless model's, return_routed_experts
// rows equal Routes(), and 32 concurrent requests answered exactly as the
// same requests one by one.
func TestEngineServesHFCheckpoints(t *testing.T) {
	for _, arch := range []transformer.Arch{transformer.Qwen3, transformer.Qwen3MoE, transformer.DeepseekV3} {
		t.Run(string(arch), func(t *testing.T) {
			const vocab = 300
			s := serve(t, checkpoint(t, arch, vocab, 5, vocab-1), testConfig())
			moe := arch != transformer.Qwen3
			prompts := make([][]int32, 32)
			for i := range prompts {
				n := 3 + i%11
				for j := range n {
					prompts[i] = append(prompts[i], int32((i*37+j*11)%(vocab-1)))
				}
			}
			req := func(p []int32) map[string]any {
				b := map[string]any{"prompt": p, "max_tokens": 12, "temperature": 0, "ignore_eos": true, "return_token_ids": true}
				if moe {
					b["return_routed_experts"] = true
				}
				return b
			}
			one := make([]engine.CompletionChoice, len(prompts))
			for i, p := range prompts {
				one[i] = s.complete(req(p))
			}
			// Greedy and stateless agree, token by token.
			for i, p := range prompts[:6] {
				c := one[i]
				all := slices.Clone(p)
				for k, tok := range c.TokenIDs {
					if want := argmax(s.m, all); tok != want {
						t.Fatalf("prompt %d token %d: engine %d, stateless argmax %d", i, k, tok, want)
					}
					if d := math.Abs(float64(c.OutputLogprobs[k]) - statelessLogprob(s.m, all, tok)); d > 1e-4 {
						t.Fatalf("prompt %d token %d: logprob off by %g", i, k, d)
					}
					all = append(all, tok)
				}
				if moe {
					L, K, E := s.m.RouteShape()
					rows, err := vllmwire.DecodeRoutedExperts(*c.RoutedExperts, int32(E), L, K)
					if err != nil {
						t.Fatal(err)
					}
					if want := s.m.Routes(all[:len(all)-1], 0); !slices.Equal(rows.Values, want) {
						t.Fatalf("prompt %d: routed_experts rows differ from Routes()", i)
					}
				}
			}
			// Deterministic: the same request again gives the same answer.
			again := s.complete(req(prompts[3]))
			if !slices.Equal(again.TokenIDs, one[3].TokenIDs) || !slices.Equal(again.OutputLogprobs, one[3].OutputLogprobs) {
				t.Fatal("the same greedy request answered differently")
			}
			// 32 at once (batched decode of mixed lengths) = one by one.
			var wg sync.WaitGroup
			many := make([]engine.CompletionChoice, len(prompts))
			for i, p := range prompts {
				wg.Add(1)
				go func() {
					defer wg.Done()
					many[i] = s.complete(req(p))
				}()
			}
			wg.Wait()
			for i := range prompts {
				a, b := one[i], many[i]
				if !slices.Equal(a.TokenIDs, b.TokenIDs) || !slices.Equal(a.OutputLogprobs, b.OutputLogprobs) {
					t.Fatalf("prompt %d: concurrent answer %v differs from the lone one %v", i, b.TokenIDs, a.TokenIDs)
				}
				if moe && fmt.Sprint(*a.RoutedExperts) != fmt.Sprint(*b.RoutedExperts) {
					t.Fatalf("prompt %d: concurrent routes differ", i)
				}
			}
		})
	}
}

// TestEngineStopsOnGenerationConfigEOS: generation stops at
// generation_config.json's eos_token_id (finish_reason stop), which is not
// the character tokenizer's id 2.
func TestEngineStopsOnGenerationConfigEOS(t *testing.T) {
	const vocab = 300
	dir := checkpoint(t, transformer.Qwen3, vocab, 9, vocab-1)
	s := serve(t, dir, testConfig())
	prompt := []int32{10, 20, 30, 40}
	free := s.complete(map[string]any{"prompt": prompt, "max_tokens": 16, "temperature": 0, "ignore_eos": true, "return_token_ids": true})
	k := -1
	for i := 3; i < len(free.TokenIDs) && k < 0; i++ {
		if !slices.Contains(free.TokenIDs[:i], free.TokenIDs[i]) {
			k = i
		}
	}
	if k < 0 {
		t.Fatalf("greedy run %v has no fresh token after step 3", free.TokenIDs)
	}
	eos := free.TokenIDs[k]
	if err := os.WriteFile(filepath.Join(dir, transformer.GenerationConfigFileName), fmt.Appendf(nil, `{"eos_token_id": [%d, %d]}`, vocab-1, eos), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := s.post("/update_weights", map[string]any{"checkpoint_dir": dir, "version": 1}); code != 200 {
		t.Fatalf("update_weights: %d %s", code, out)
	}
	c := s.complete(map[string]any{"prompt": prompt, "max_tokens": 16, "temperature": 0, "return_token_ids": true})
	if c.FinishReason == nil || *c.FinishReason != "stop" || !slices.Equal(c.TokenIDs, free.TokenIDs[:k+1]) {
		t.Fatalf("finish %v tokens %v, want stop after %v", c.FinishReason, c.TokenIDs, free.TokenIDs[:k+1])
	}
}

// TestEngineWeightSwapRecomputesKV: a checkpoint swapped in mid-sequence
// (/update_weights while paused with keep) serves the rest of the
// sequence over keys and values recomputed with the new weights: each
// token's logprob is the stateless logprob of the weights that produced
// it.
func TestEngineWeightSwapRecomputesKV(t *testing.T) {
	const vocab = 200
	a := checkpoint(t, transformer.Qwen3MoE, vocab, 1, vocab-1)
	b := checkpoint(t, transformer.Qwen3MoE, vocab, 2, vocab-1)
	cfg := testConfig()
	cfg.TimeScale = 1
	cfg.Latency.DecodeBase = 3 * time.Millisecond
	cfg.Latency.DecodePerSeq, cfg.Latency.PrefillPerToken = 0, 0
	s := serve(t, a, cfg)
	mb, err := transformer.Load(b)
	if err != nil {
		t.Fatal(err)
	}
	prompt := []int32{7, 8, 9, 10, 11, 12}
	buf, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": 60, "temperature": 0, "ignore_eos": true,
		"return_token_ids": true, "stream": true})
	resp, err := http.Post(s.url+"/v1/completions", "application/json", bytes.NewReader(buf))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var c engine.CompletionChoice
	swapped := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || line == "[DONE]" {
			continue
		}
		var chunk engine.CompletionResponse
		if err := json.Unmarshal([]byte(line), &chunk); err != nil {
			t.Fatalf("chunk %s: %v", line, err)
		}
		for _, ch := range chunk.Choices {
			c.TokenIDs = append(c.TokenIDs, ch.TokenIDs...)
			c.OutputLogprobs = append(c.OutputLogprobs, ch.OutputLogprobs...)
			c.TokenWeightVersions = append(c.TokenWeightVersions, ch.TokenWeightVersions...)
		}
		// Swap the weights once a few tokens are out, while the
		// sequence is frozen by a keep-mode pause.
		if !swapped && len(c.TokenIDs) >= 3 {
			swapped = true
			if code, out := s.post("/pause?mode=keep", nil); code != 200 {
				t.Fatalf("pause: %d %s", code, out)
			}
			if code, out := s.post("/update_weights", map[string]any{"checkpoint_dir": b, "version": 1}); code != 200 {
				t.Fatalf("update_weights: %d %s", code, out)
			}
			if code, out := s.post("/resume", nil); code != 200 {
				t.Fatalf("resume: %d %s", code, out)
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	models := map[int64]engine.Model{0: s.m, 1: mb}
	all := slices.Clone(prompt)
	seen := map[int64]bool{}
	for i, tok := range c.TokenIDs {
		v := c.TokenWeightVersions[i]
		seen[v] = true
		if d := math.Abs(float64(c.OutputLogprobs[i]) - statelessLogprob(models[v], all, tok)); d > 1e-4 {
			t.Fatalf("token %d (version %d): logprob off by %g from the stateless model of its version", i, v, d)
		}
		all = append(all, tok)
	}
	if !seen[0] || !seen[1] {
		t.Fatalf("versions %v: the swap did not land mid-sequence", c.TokenWeightVersions)
	}
}

// TestEngineRPCsLoadHFCheckpoints: vLLM's worker-extension RPCs
// (asyncrl_load_checkpoint, then asyncrl_apply_delta with a SkyRL delta
// over the HF tensor names) serve the new weights bit for bit: the
// engine then answers what the delta's target checkpoint computes.
func TestEngineRPCsLoadHFCheckpoints(t *testing.T) {
	const vocab = 120
	a := checkpoint(t, transformer.DeepseekV3, vocab, 1, vocab-1)
	b := checkpoint(t, transformer.DeepseekV3, vocab, 2, vocab-1)
	cfg := testConfig()
	em, err := wiring.LoadPolicy(a)
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(cfg, nil, engine.WithLoader(wiring.LoadPolicy), engine.WithWorkDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.Handler())
	t.Cleanup(func() {
		e.Close()
		srv.Close()
		http.DefaultClient.CloseIdleConnections()
	})
	s := &server{t: t, e: e, url: srv.URL, m: em.(*transformer.Model)}
	rpc := func(method string, args ...any) {
		code, out := s.post("/collective_rpc", map[string]any{"method": method, "args": args})
		if code != 200 {
			t.Fatalf("%s: %d %s", method, code, out)
		}
	}
	rpc(engine.RPCLoadCheckpoint, a, 0)
	// A SkyRL delta a → b over the HF tensor names.
	ca, err := safetensors.OpenDir(a)
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close()
	cb, err := safetensors.OpenDir(b)
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close()
	syncDir := t.TempDir()
	st, err := store.NewLocal(syncDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := delta.Encode(context.Background(), delta.DefaultEncodeConfig(), ca, cb, 1, st); err != nil {
		t.Fatal(err)
	}
	rpc(engine.RPCApplyDelta, filepath.Join(syncDir, delta.DeltaDir(1)), 1)
	mb, err := transformer.Load(b)
	if err != nil {
		t.Fatal(err)
	}
	prompt := []int32{3, 1, 4, 1, 5, 9, 2, 6}
	c := s.complete(map[string]any{"prompt": prompt, "max_tokens": 6, "temperature": 0, "ignore_eos": true, "return_token_ids": true})
	all := slices.Clone(prompt)
	for i, tok := range c.TokenIDs {
		if c.TokenWeightVersions[i] != 1 {
			t.Fatalf("token %d from version %d", i, c.TokenWeightVersions[i])
		}
		if want := argmax(mb, all); tok != want {
			t.Fatalf("token %d: %d, the delta's target checkpoint gives %d", i, tok, want)
		}
		if d := math.Abs(float64(c.OutputLogprobs[i]) - statelessLogprob(mb, all, tok)); d > 1e-4 {
			t.Fatalf("token %d: logprob off by %g from the target checkpoint's", i, d)
		}
		all = append(all, tok)
	}
}
