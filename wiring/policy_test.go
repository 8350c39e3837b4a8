package wiring

import (
	"path/filepath"
	"testing"

	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/engine"
	pmodel "github.com/asyncrl/asyncrl/model"
)

// TestMoEExample: examples/moe.yaml loads, maps onto a mixture-of-experts
// policy, and its rollout.routed_experts shape is the policy's route shape
// (a mismatch would make every answer's routes fail their check).
func TestMoEExample(t *testing.T) {
	c, err := config.Load(filepath.Join("..", "examples", "moe.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := pmodel.New(PolicyModel(c), 1)
	if err != nil {
		t.Fatal(err)
	}
	L, K, E := m.RouteShape()
	r := c.Rollout.RoutedExperts
	if E == 0 || !r.Enabled || r.Layers != L || r.TopK != K || r.NumExperts != E {
		t.Fatalf("policy routes %d×%d of %d, rollout.routed_experts %+v", L, K, E, r)
	}
	if config.BuiltinPolicyLayers != pmodel.DefaultConfig().Layers {
		t.Fatalf("config.BuiltinPolicyLayers %d, policy.DefaultConfig().Layers %d", config.BuiltinPolicyLayers, pmodel.DefaultConfig().Layers)
	}
	if dense := PolicyModel(config.Default()); dense != pmodel.DefaultConfig() {
		t.Fatalf("default config maps to %+v, not the dense default policy", dense)
	}
	em, err := InitialPolicyFor("", PolicyModel(c), 1)
	if err != nil {
		t.Fatal(err)
	}
	rm, ok := em.(engine.RoutesModel)
	if !ok {
		t.Fatal("the engines' initial model is no RoutesModel")
	}
	if l, k, e := rm.RouteShape(); l != L || k != K || e != E {
		t.Fatalf("the engines' initial model routes %d×%d of %d, the trainer's %d×%d of %d", l, k, e, L, K, E)
	}
}
