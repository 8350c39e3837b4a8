package trainer

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/asyncrl/asyncrl/actors/rollout"
	"github.com/asyncrl/asyncrl/actors/trainer/microbatch"
	"github.com/asyncrl/asyncrl/engine"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/model"
)

// TestSupportNormalisedMismatchEndToEnd: the built-in engine serves the
// trainer's own weights with top-k 5 at T 0.8; the rollout client records
// output_support_logprobs; the trainer with SupportNorm normalises its
// logprob over the same support sets, so the train–inference mismatch is
// ~0. The full-vocabulary logprobs in the same mode (what runs had before,
// and why normalize_over_support was refused) are far off.
func TestSupportNormalisedMismatchEndToEnd(t *testing.T) {
	const temp, topK = 0.8, 5
	m, err := model.New(model.DefaultConfig(), 4)
	if err != nil {
		t.Fatal(err)
	}
	ecfg := engine.DefaultConfig()
	ecfg.TimeScale = 0
	e, err := engine.New(ecfg, m.Clone())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.Handler())
	hc := &http.Client{Transport: &http.Transport{Proxy: nil}}
	defer func() {
		srv.Close()
		e.Close()
		hc.CloseIdleConnections()
	}()
	gen := &rollout.HTTPClient{BaseURL: srv.URL, Model: "asyncrl-policy", Client: hc}

	build := func(overSupport bool) *messages.TokenBatch {
		tb, err := messages.NewTokenBatch(messages.BatchSpec{Vocab: 98, SupportK: topK})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 6 {
			prompt := []int32{1, int32(40 + i), int32(50 + i), 60}
			out, err := gen.Generate(context.Background(), rollout.TurnRequest{SessionID: fmt.Sprint(i), Tokens: prompt,
				MaxTokens: 12, Temperature: temp, TopP: 1, TopK: topK})
			if err != nil {
				t.Fatal(err)
			}
			if len(out.SupportLogprobs) != len(out.Tokens) || len(out.Tokens) == 0 {
				t.Fatalf("engine answer without support logprobs: %+v", out)
			}
			tr := messages.Trajectory{ID: fmt.Sprint(i), GroupID: fmt.Sprint("g", i/3), Reward: float32(i % 2), PromptLen: int32(len(prompt))}
			for _, id := range prompt {
				tr.TokenIDs = append(tr.TokenIDs, id)
				tr.Logprobs = append(tr.Logprobs, 0)
				tr.LossMask = append(tr.LossMask, 0)
				tr.PolicyVersions = append(tr.PolicyVersions, 0)
				tr.Support = append(tr.Support, -1, -1, -1, -1, -1)
			}
			for j, id := range out.Tokens {
				tr.TokenIDs = append(tr.TokenIDs, id)
				lp := out.Logprobs[j]
				if overSupport {
					lp = out.SupportLogprobs[j]
				}
				tr.Logprobs = append(tr.Logprobs, lp)
				tr.LossMask = append(tr.LossMask, 1)
				tr.PolicyVersions = append(tr.PolicyVersions, int32(out.Versions[j]))
				row := append([]int32(nil), out.Support[j]...)
				for len(row) < topK {
					row = append(row, -1)
				}
				tr.Support = append(tr.Support, row...)
			}
			if err := tb.Append(tr); err != nil {
				t.Fatal(err)
			}
		}
		return tb
	}
	mismatch := func(label string, tb *messages.TokenBatch, supportNorm bool) float64 {
		cfg := model.DefaultTrainerConfig()
		cfg.SupportNorm, cfg.Temperature = supportNorm, temp
		tr, err := model.NewTrainer(m.Clone(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		mb := microbatch.DefaultConfig()
		mb.MaxTokensPerMicrobatch = 40
		p, err := Prepare(tb, true, mb, 0)
		if err != nil {
			t.Fatal(err)
		}
		st, err := Train(tr, p)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: mismatch %.3g over %d tokens", label, st.Mismatch, st.Tokens)
		return st.Mismatch
	}
	if got := mismatch("support-normalised rollout and trainer", build(true), true); got > 1e-5 {
		t.Errorf("support-normalised on both sides: mismatch %v, want ~0", got)
	}
	if got := mismatch("full-vocabulary rollout and trainer", build(false), false); got > 1e-5 {
		t.Errorf("full vocabulary on both sides: mismatch %v, want ~0", got)
	}
	if got := mismatch("full-vocabulary rollout, support-normalised trainer", build(false), true); got < 1e-2 {
		t.Errorf("full-vocabulary rollout logprobs against a support-normalised trainer: mismatch %v, want clearly > 0", got)
	}
}

// inlineRefs splits tb by group (in first-seen order, trajectories of one
// group contiguous) into one inline reference per group, as a pipeline
// without a trajectory buffer sends them.
func inlineRefs(t *testing.T, tb *messages.TokenBatch) (ids []string, refs []messages.GroupRef) {
	t.Helper()
	parts := map[string]*messages.TokenBatch{}
	for i := range tb.Len() {
		tr, err := tb.Trajectory(i)
		if err != nil {
			t.Fatal(err)
		}
		p := parts[tr.GroupID]
		if p == nil {
			if p, err = messages.NewTokenBatch(tb.Spec()); err != nil {
				t.Fatal(err)
			}
			parts[tr.GroupID] = p
			ids = append(ids, tr.GroupID)
		}
		if err := p.Append(tr); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		data, err := messages.EncodeTokenBatch(parts[id])
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, messages.GroupRef{GroupID: id, Batch: messages.InlineRef(data)})
	}
	return ids, refs
}

// inlineBatch is the mini-batch a TrainBatch of inline references
// assembles to (what the actor trains).
func inlineBatch(t *testing.T, env messages.TrainBatch) *messages.TokenBatch {
	t.Helper()
	tb, _, err := fetchBatch(context.Background(), inlineOnly{}, env)
	if err != nil {
		t.Fatal(err)
	}
	return tb
}
