package model

// UpdateParams hands fn the model's parameters in the layout Flatten's
// gradient uses (so an external optimiser — the Tinker server's, which takes
// Adam's hyper-parameters per optim_step call — can apply a step) and then
// rebuilds the derived first-layer table. fn must not keep the slice.
func (m *Model) UpdateParams(fn func(params []float32)) {
	fn(m.params)
	m.refresh()
}
