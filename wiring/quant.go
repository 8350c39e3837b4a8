package wiring

import (
	"fmt"

	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/engine"
	pmodel "github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/model/transformer"
)

// EngineQuantize is the engine option engines.quantize asks for: the
// engine serves every model it loads quantised by q (the built-in
// policy's model.Model.Quantized, a Hugging Face model's
// transformer.Model.Quantized; the loaded model itself is left alone).
// None for "none". Any other model is refused: nothing else exposes its
// weight matrices.
func EngineQuantize(q config.ServingQuantization) []engine.Option {
	if q == "" || q == config.ServeNone {
		return nil
	}
	pq := pmodel.Quant(q)
	return []engine.Option{engine.WithModelTransform("engines.quantize "+string(q), func(m engine.Model) (engine.Model, error) {
		switch pm := m.(type) {
		case *pmodel.Model:
			qm, err := pm.Quantized(pq)
			if err != nil {
				return nil, err
			}
			return qm, nil
		case *transformer.Model:
			qm, err := pm.Quantized(string(q))
			if err != nil {
				return nil, err
			}
			return qm, nil
		}
		return nil, fmt.Errorf("only the built-in policy and Hugging Face models (model/transformer) can be quantised, got %T", m)
	})}
}
