package tinker

import (
	"slices"
	"testing"
)

func TestNextTokenDatum(t *testing.T) {
	d := NextTokenDatum([]int32{1, 7, 8, 9, 2}, 2)
	if got := d.ModelInput.Chunks[0].Tokens; !slices.Equal(got, []int32{1, 7, 8, 9}) {
		t.Errorf("input %v, want the tokens but the last", got)
	}
	if got := d.LossFnInputs["target_tokens"].Data; !slices.Equal(got, []float64{7, 8, 9, 2}) {
		t.Errorf("targets %v, want the tokens but the first", got)
	}
	if got := d.LossFnInputs["weights"].Data; !slices.Equal(got, []float64{0, 0, 1, 1}) {
		t.Errorf("weights %v, want 1 from target 2 on", got)
	}
	seq := int64(1)
	in := &ForwardBackwardInput{LossFn: "cross_entropy", Data: []Datum{d}}
	if err := ValidateFwdBwd("m", &seq, in, "forward_backward_input", 16); err != nil {
		t.Errorf("the datum does not validate: %v", err)
	}
}
