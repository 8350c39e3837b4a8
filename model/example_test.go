package model_test

import (
	"fmt"
	"math/rand/v2"
	"os"

	"github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/model/sampler"
	"github.com/asyncrl/asyncrl/model/tokenizer"
)

// One GRPO step by hand: sample a group from the serving copy, score it,
// compute advantages, train, and publish BF16 weights for an engine.
func Example() {
	m, _ := model.New(model.DefaultConfig(), 1)
	tr, _ := model.NewTrainer(m, model.DefaultTrainerConfig())
	serve := tr.ServingCopy() // what an engine would serve (BF16)

	rng := rand.New(rand.NewPCG(1, 2))
	logits := make([]float32, serve.VocabSize())
	var scratch sampler.Scratch
	var batch model.Batch
	var scores []float64
	for range 4 { // a group of 4 samples of one prompt
		seq := model.Sequence{Tokens: []int32{tokenizer.BOS}, LossMask: []uint8{0}, RolloutLogprobs: []float32{0}}
		for _, id := range tokenizer.Encode("rev ab=") {
			seq.Tokens = append(seq.Tokens, id)
			seq.LossMask = append(seq.LossMask, 0)
			seq.RolloutLogprobs = append(seq.RolloutLogprobs, 0)
		}
		start := len(seq.Tokens)
		for range 2 {
			serve.NextLogits(seq.Tokens, logits)
			tok, lp, _ := sampler.Sample(logits, sampler.DefaultParams(), rng, &scratch)
			seq.Tokens = append(seq.Tokens, tok)
			seq.LossMask = append(seq.LossMask, 1)
			seq.RolloutLogprobs = append(seq.RolloutLogprobs, lp)
		}
		score := 0.0
		if tokenizer.Decode(seq.Tokens[start:]) == "ba" {
			score = 1
		} else if tokenizer.Decode(seq.Tokens[start:start+1]) == "b" {
			score = 0.5
		}
		scores = append(scores, score)
		batch.Sequences = append(batch.Sequences, seq)
	}
	adv := model.Advantages(scores, []string{"p", "p", "p", "p"}, true)
	for i := range batch.Sequences {
		batch.Sequences[i].Advantage = float32(adv[i])
	}
	st, err := tr.Step(batch)
	if err != nil {
		panic(err)
	}
	fmt.Println("version", st.Version, "tokens", st.Tokens, "mismatch below 1e-2:", st.Mismatch < 1e-2)

	dir, _ := os.MkdirTemp("", "policy-example")
	defer os.RemoveAll(dir)
	if err := tr.Model().SaveServing(dir); err != nil {
		panic(err)
	}
	engineModel, _ := model.LoadServing(dir)
	fmt.Println("engine vocab", engineModel.VocabSize())
	// Output:
	// version 1 tokens 8 mismatch below 1e-2: true
	// engine vocab 98
}

// Gradient accumulation: a mini-batch trained as two microbatches takes
// one optimiser step, with token_mean dividing by the mini-batch's tokens.
func ExampleTrainer_Accumulate() {
	m, _ := model.New(model.DefaultConfig(), 1)
	tr, _ := model.NewTrainer(m, model.DefaultTrainerConfig())
	seq := func(gen string, adv float32) model.Sequence {
		s := model.Sequence{Tokens: []int32{tokenizer.BOS}, LossMask: []uint8{0}, RolloutLogprobs: []float32{0}, Advantage: adv}
		for _, id := range tokenizer.Encode(gen) {
			s.Tokens = append(s.Tokens, id)
			s.LossMask = append(s.LossMask, 1)
			s.RolloutLogprobs = append(s.RolloutLogprobs, -4.6) // ≈ uniform over 98 ids
		}
		return s
	}
	mini := model.Batch{Sequences: []model.Sequence{seq("ab", 1), seq("xyz", -1), seq("b", 0.5)}}
	tot, err := tr.Totals(mini) // the whole mini-batch's denominators, first
	if err != nil {
		panic(err)
	}
	if err := tr.Begin(tot); err != nil {
		panic(err)
	}
	for _, mb := range []model.Batch{{Sequences: mini.Sequences[:2]}, {Sequences: mini.Sequences[2:]}} {
		if err := tr.Accumulate(mb); err != nil {
			panic(err)
		}
	}
	st, err := tr.Apply()
	if err != nil {
		panic(err)
	}
	fmt.Println("totals", tot.Sequences, "sequences", tot.Tokens, "tokens; version", st.Version, "trained", st.Tokens)
	// Output:
	// totals 3 sequences 6 tokens; version 1 trained 6
}
