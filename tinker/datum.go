package tinker

// NextTokenDatum is a supervised datum over toks, the shape the SDK's
// cookbook builds for cross_entropy: model input toks[:n-1], target_tokens
// toks[1:], weights 1 for the targets at positions ≥ trainFrom (0 trains
// every target; len(prompt)-1 trains only what follows a prompt).
func NextTokenDatum(toks []int32, trainFrom int) Datum {
	n := len(toks) - 1
	if n < 0 {
		n = 0
	}
	tg, w := make([]float64, n), make([]float64, n)
	for i := range tg {
		tg[i] = float64(toks[i+1])
		if i >= trainFrom {
			w[i] = 1
		}
	}
	return Datum{
		ModelInput: ModelInput{Chunks: []Chunk{{Type: "encoded_text", Tokens: toks[:n]}}},
		LossFnInputs: map[string]TensorData{
			"target_tokens": {Data: tg, DType: "int64", Shape: []int{n}},
			"weights":       {Data: w, DType: "float32", Shape: []int{n}},
		},
	}
}
