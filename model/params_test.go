package model

import "testing"

// TestUpdateParamsRefreshesTable: a change through UpdateParams reaches the
// forward pass (the first-layer table is rebuilt), exactly as a refresh after
// the same change does.
func TestUpdateParamsRefreshesTable(t *testing.T) {
	m, err := New(DefaultConfig(), 7)
	if err != nil {
		t.Fatal(err)
	}
	want := m.Clone()
	before := append([]float32(nil), m.Forward([]int32{5, 6, 7}, m.NewWorkspace())...)
	m.UpdateParams(func(p []float32) {
		for i := range p {
			p[i] *= 1.5
		}
	})
	after := m.Forward([]int32{5, 6, 7}, m.NewWorkspace())
	same := true
	for i := range after {
		if after[i] != before[i] {
			same = false
		}
	}
	if same {
		t.Fatal("forward pass unchanged after UpdateParams: table not refreshed")
	}
	for i := range want.params {
		want.params[i] *= 1.5
	}
	want.refresh()
	got := want.Forward([]int32{5, 6, 7}, want.NewWorkspace())
	for i := range got {
		if got[i] != after[i] {
			t.Fatalf("logit %d: UpdateParams %v, refreshed %v", i, after[i], got[i])
		}
	}
}
