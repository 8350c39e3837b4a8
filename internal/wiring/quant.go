package wiring

import (
	"fmt"

	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/engine"
	pmodel "github.com/asyncrl/asyncrl/policy"
)

// EngineQuantize is the engine option engines.quantize asks for: the
// engine serves every model it loads quantised by q
// (policy.Model.Quantized; the loaded model itself is left alone). None
// for "none". A model that is not the built-in policy is refused: nothing
// else exposes its weight matrices.
func EngineQuantize(q config.ServingQuantization) []engine.Option {
	if q == "" || q == config.ServeNone {
		return nil
	}
	pq := pmodel.Quant(q)
	return []engine.Option{engine.WithModelTransform("engines.quantize "+string(q), func(m engine.Model) (engine.Model, error) {
		pm, ok := m.(*pmodel.Model)
		if !ok {
			return nil, fmt.Errorf("only the built-in policy can be quantised, got %T", m)
		}
		qm, err := pm.Quantized(pq)
		if err != nil {
			return nil, err
		}
		return qm, nil
	})}
}
